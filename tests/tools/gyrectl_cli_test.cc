// gyrectl given bad input: --timeout out of range, a store folder that does not exist
// (named, and not created) and stray arguments are refused by name.
#include <gtest/gtest.h>
#include <sys/stat.h>

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

TEST(GyrectlCli, StrayPositionalArgumentsAreRefused) {
  ExpectRefused(
      {BuiltBinary("gyrectl"), "status", "extra", "--store", "file:///tmp", "--job_id", "j"},
      {"unexpected argument 'extra'"});
}

}  // namespace
}  // namespace gyre::testing
