// gyrerun's own output: the main job's report that cannot be written to stdout fails the
// run instead of exiting 0 without it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

TEST(GyrerunCli, ReportOnAFullStdoutFailsTheRun) {
  CommandResult r = RunToFullDisk({BuiltBinary("gyrerun"), "-n", "2", "--run", "selftest"}, 100);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cannot write the job's report to stdout"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gyre::testing
