// Automatic algorithm choice by size and world shape, including hierarchical allreduce for a
// world spread over hosts.
#include "core/algo/select.h"

#include <gtest/gtest.h>

namespace gyre::algo {
namespace {

CollectiveSpec Allreduce(int p, int64_t bytes, int local_size) {
  CollectiveSpec s = MakeSpec(Collective::kAllreduce, bytes / 4, DataType::kFloat32);
  s.world_size = p;
  s.local_size = local_size;
  return s;
}

TEST(SelectTest, AllreduceBySize) {
  EXPECT_EQ(SelectAlgorithm(Allreduce(4, 4 << 10, 0)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(SelectAlgorithm(Allreduce(4, 256 << 10, 0)), Algorithm::kRabenseifner);
  EXPECT_EQ(SelectAlgorithm(Allreduce(4, 4 << 20, 0)), Algorithm::kRing);
}

TEST(SelectTest, LargeAllreduceAcrossHostsIsHierarchical) {
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 1 << 20, 4)), Algorithm::kHierarchical);
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 64 << 20, 2)), Algorithm::kHierarchical);
  // Below the threshold latency rules: the flat algorithms.
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 256 << 10, 4)), Algorithm::kRabenseifner);
  // One host (local_size 0 or p), or a shape that does not divide p: flat.
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 4 << 20, 0)), Algorithm::kRing);
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 4 << 20, 8)), Algorithm::kRing);
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 4 << 20, 3)), Algorithm::kRing);
  SelectionThresholds t;
  t.hierarchical_min_bytes = 64 << 10;
  EXPECT_EQ(SelectAlgorithm(Allreduce(8, 256 << 10, 4), t), Algorithm::kHierarchical);
}

TEST(SelectTest, BroadcastAcrossHostsIsHierarchicalBelowTheBandwidthSizes) {
  CollectiveSpec s = MakeSpec(Collective::kBroadcast, 1024, DataType::kFloat32, ReduceOp::kSum, 5);
  s.world_size = 8;
  EXPECT_EQ(SelectAlgorithm(s), Algorithm::kBinomial);
  s.local_size = 4;
  EXPECT_EQ(SelectAlgorithm(s), Algorithm::kHierarchical);
  s.count = 4 << 20;
  EXPECT_EQ(SelectAlgorithm(s), Algorithm::kScatterAllgather);
}

}  // namespace
}  // namespace gyre::algo
