// gyre-example-fusion given bad flags: each is refused by name with exit code 2 before the
// program allocates or joins anything, instead of aborting on std::length_error (a negative
// count) or reporting a meaningless ratio (0 bytes per tensor).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

struct BadFlags {
  std::vector<std::string> flags;
  std::vector<std::string> parts;
};

TEST(FusionExampleFlagsTest, EveryBadFlagIsNamedWithExitCodeTwo) {
  const std::string fusion = BuiltBinary("gyre-example-fusion");
  for (const BadFlags& c : std::vector<BadFlags>{
           {{"--tensors", "-3", "--layers", "-1", "--grad_bytes", "-4"},
            {"--tensors -3", "from 1 to 1000000"}},
           {{"--layers", "-1"}, {"--layers -1", "layers from 1 to 100000"}},
           {{"--grad_bytes", "-4"}, {"--grad_bytes -4", "from 4 to 1073741824", "multiple of 4"}},
           {{"--tensor_bytes", "0"}, {"--tensor_bytes 0", "from 4 to"}},
           {{"--tensor_bytes", "6"}, {"--tensor_bytes 6", "a multiple of 4"}},
           {{"--bucket_bytes", "0"}, {"--bucket_bytes 0"}},
           {{"--overlap_bucket_bytes", "-1"}, {"--overlap_bucket_bytes -1"}},
           {{"--iters", "0"}, {"--iters 0", "repetitions from 1"}},
           {{"--compute_passes", "-1"}, {"--compute_passes -1", "from 0 to"}},
           {{"--tensors", "1000000", "--tensor_bytes", "1048576"},
            {"--tensors 1000000 of --tensor_bytes 1048576 hold more than 4294967296 bytes"}},
           {{"--layers", "100", "--grad_bytes", "1073741824"}, {"--layers 100 of --grad_bytes"}},
           {{"stray"}, {"unexpected argument 'stray'", "takes flags only"}},
       }) {
    std::vector<std::string> argv = {fusion};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    CommandResult r = RunTool(argv, 30);
    EXPECT_FALSE(r.timed_out) << c.flags[0];
    EXPECT_EQ(r.exit_code, 2) << c.flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find("gyre-example-fusion: "), std::string::npos) << r.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(r.err.find(p), std::string::npos) << "want: " << p << "\ngot: " << r.err;
    }
    EXPECT_EQ(r.out, "") << c.flags[0];
  }
}

}  // namespace
}  // namespace gyre::testing
