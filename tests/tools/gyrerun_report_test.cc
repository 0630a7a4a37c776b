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

// A program's own lines, relayed by gyrerun, are the job's output too: lost ones fail a job
// that would otherwise succeed, with a count and the first rank; the job itself still runs.
TEST(GyrerunCli, RanksOutputOnAFullStdoutFailsTheRun) {
  CommandResult r = RunToFullDisk(
      {BuiltBinary("gyrerun"), "-n", "2", "--mode", "embedded", "--", "/bin/echo", "hello"}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("2 lines of the ranks' stdout (the first from rank "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("could not be written: No space left on device"), std::string::npos)
      << r.err;
  // The same job with somewhere to write succeeds.
  CommandResult ok = RunTool(
      {BuiltBinary("gyrerun"), "-n", "2", "--mode", "embedded", "--", "/bin/echo", "hello"}, 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("[rank 1] hello"), std::string::npos) << ok.out;
}

}  // namespace
}  // namespace gyre::testing
