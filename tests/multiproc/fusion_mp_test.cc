// Gradient fusion and overlap with real ranks: gyre-example-fusion under gyrerun, through
// the daemon and embedded. Every rank checks its results exactly; rank 0 reports how many
// calls the buckets took.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

class FusionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FusionTest, BucketedResultsAreExactOnEveryRank) {
  const int p = 3;
  CommandResult r =
      RunCommand({BinDir() + "/gyrerun", "-n", std::to_string(p), "--mode", GetParam(), "--",
                  BinDir() + "/gyre-example-fusion", "--tensors=200", "--tensor_bytes=4096",
                  "--bucket_bytes=65536", "--layers=6", "--grad_bytes=65536",
                  "--overlap_bucket_bytes=131072", "--compute_passes=2", "--iters=2"},
                 {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < p; ++rank) {
    EXPECT_NE(r.out.find("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                         ": fusion results exact"),
              std::string::npos)
        << r.out;
  }
  // 200 tensors of 4 KiB in 64 KiB buckets: 800 KiB in 13 calls (12 full and a partial).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(bucketed into 13 calls)"))) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Modes, FusionTest, ::testing::Values("daemon", "embedded"));

}  // namespace
}  // namespace gyre::testing
