// gyrectl given bad input: --timeout out of range, a store folder that does not exist
// (named, and not created) and stray arguments are refused by name.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

TEST(GyrectlCli, TimeoutOutsideItsRangeIsRefused) {
  const std::string store = "file://" + EmptyTempDir("gyrectl-timeout");
  for (const char* t : {"0", "-1", "nan", "1e+300", "inf"}) {
    ExpectRefused(
        {BuiltBinary("gyrectl"), "status", "--store", store, "--job_id", "j", "--timeout", t},
        {std::string("--timeout ") + t, "from 0.001 to 3600 seconds"});
  }
}

TEST(GyrectlCli, MissingStoreFolderIsNamedAndNotCreated) {
  const std::string base = EmptyTempDir("gyrectl-missing");
  const std::string dir = base + "/a/b/c";
  for (const char* cmd : {"status", "dump", "timeline"}) {
    ExpectRefused({BuiltBinary("gyrectl"), cmd, "--store", "file://" + dir, "--job_id", "x",
                   "--out", base + "/out.json"},
                  {dir, "No such file or directory"});
    struct stat st;
    EXPECT_NE(::stat((base + "/a").c_str(), &st), 0) << cmd << " created " << base << "/a";
  }
}

// A control record overwritten with garbage is shown escaped (not written raw onto the
// terminal), and a timeline with no rank answering is a failure, not an empty file "written".
TEST(GyrectlCli, AGarbageRecordIsShownEscapedAndAnEmptyTimelineFails) {
  const std::string dir = EmptyTempDir("gyrectl-garbage");
  {
    std::ofstream f(dir + "/k.gyre%2Fcontrol%2Fj%2F0", std::ios::binary);
    f << std::string("\x01gar\x1b[31mbage\xff:99");
  }
  const std::string store = "file://" + dir;
  CommandResult status =
      RunTool({BuiltBinary("gyrectl"), "status", "--store", store, "--job_id", "j"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("'\\x01gar\\x1b[31mbage\\xff:99' is not an IPv4 host:port"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find('\x1b'), std::string::npos) << "a raw escape byte was printed";
  ExpectRefused({BuiltBinary("gyrectl"), "timeline", "--store", store, "--job_id", "j", "--out",
                 dir + "/timeline.json"},
                {"rank 0 did not answer", "no rank answered"});
}

TEST(GyrectlCli, StrayPositionalArgumentsAreRefused) {
  ExpectRefused(
      {BuiltBinary("gyrectl"), "status", "extra", "--store", "file:///tmp", "--job_id", "j"},
      {"unexpected argument 'extra'"});
}

}  // namespace
}  // namespace gyre::testing
