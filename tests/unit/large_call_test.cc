// A call whose buffers pass the largest message the transport takes in one frame
// (kMaxMessageBytes, 1 GiB) is cut into segments when its caller chose none, so that every
// message of the algorithms that cut their chunks fits one frame; smaller calls keep one
// message per chunk, as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/algo/builders.h"
#include "core/algo/collective.h"

namespace gyre::algo {
namespace {

// The largest message any rank of `spec` sends, in bytes.
int64_t LargestMessage(const CollectiveSpec& spec) {
  int64_t largest = 0;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    StatusOr<RankSchedule> s = BuildRankSchedule(spec, rank);
    EXPECT_TRUE(s.ok()) << spec.ToString() << ": " << s.status().ToString();
    if (!s.ok()) return -1;
    for (const Step& step : s->steps) {
      if (step.kind == StepKind::kSend) largest = std::max(largest, step.src.count);
    }
  }
  return largest * static_cast<int64_t>(DataTypeSize(spec.dtype));
}

// Calls of 4 GiB and a bit (the largest buffer), every algorithm that cuts its chunks into
// segments: no message is over the cap. Before, a broadcast's or an allreduce's chunk went
// whole into one frame and the transport refused the call.
TEST(LargeCallTest, CallsOverTheFrameCapAreCutIntoSegments) {
  const int64_t bytes = (int64_t{4} << 30) + 4096;
  struct Case {
    Collective collective;
    std::vector<Algorithm> algorithms;
  };
  const std::vector<Case> cases = {
      {Collective::kAllreduce,
       {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveDoubling, Algorithm::kRabenseifner,
        Algorithm::kDirect, Algorithm::kTwoD, Algorithm::kHierarchical}},
      {Collective::kBroadcast,
       {Algorithm::kBinomial, Algorithm::kChain, Algorithm::kLinear, Algorithm::kHierarchical}},
      {Collective::kReduce, {Algorithm::kBinomial, Algorithm::kRingGather}},
      {Collective::kReduceScatter, {Algorithm::kRing, Algorithm::kRecursiveHalving}},
      {Collective::kAllgather, {Algorithm::kRing}},
  };
  for (int p : {2, 3, 4}) {
    for (const Case& c : cases) {
      for (Algorithm a : c.algorithms) {
        CollectiveSpec spec = MakeSpec(c.collective, bytes, DataType::kInt8);
        // reduce_scatter and allgather: count is each rank's block, the largest buffer p x it.
        if (c.collective == Collective::kReduceScatter || c.collective == Collective::kAllgather) {
          spec.count = bytes / p;
        }
        spec.world_size = p;
        spec.algorithm = a;
        ASSERT_TRUE(ValidateSpec(spec).ok()) << spec.ToString();
        spec.segment_elems = LargeCallSegmentElems(spec);
        EXPECT_EQ(spec.segment_elems, kLargeCallSegmentBytes) << spec.ToString();
        EXPECT_LE(LargestMessage(spec), kMaxMessageBytes) << spec.ToString();
      }
    }
  }
}

TEST(LargeCallTest, SmallerCallsAndChosenSegmentsAreLeftAlone) {
  // Exactly the cap: one message per chunk, as before (float32: 2^28 elements).
  CollectiveSpec spec = MakeSpec(Collective::kBroadcast, int64_t{1} << 28, DataType::kFloat32);
  spec.world_size = 2;
  EXPECT_EQ(LargeCallSegmentElems(spec), 0);
  // One element more: segments of 64 MiB, in elements of the type.
  spec.count += 1;
  EXPECT_EQ(LargeCallSegmentElems(spec), kLargeCallSegmentBytes / 4);
  // A caller's own segments stay.
  spec.segment_elems = 1000;
  EXPECT_EQ(LargeCallSegmentElems(spec), 1000);
  // Gather: the root's output is p x count, over the cap although each block is not.
  CollectiveSpec gather = MakeSpec(Collective::kGather, int64_t{1} << 29, DataType::kInt8);
  gather.world_size = 3;
  EXPECT_EQ(LargeCallSegmentElems(gather), kLargeCallSegmentBytes);
  // A barrier moves nothing.
  CollectiveSpec barrier = MakeSpec(Collective::kBarrier, 0, DataType::kInt8);
  barrier.world_size = 4;
  EXPECT_EQ(LargeCallSegmentElems(barrier), 0);
}

// Which algorithms cut their messages into segments (those of the test above do), and the
// advice for a message over the cap that follows from it: another algorithm only where one of
// the collective cuts; for gather and scatter, whose algorithms all send whole blocks, smaller
// calls alone (the refusal used to say "choose another algorithm" for every collective).
TEST(LargeCallTest, TheAdviceForAMessageOverTheCapIsTrueToTheCollective) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRabenseifner,
                      Algorithm::kTwoD, Algorithm::kHierarchical}) {
    EXPECT_TRUE(CutsMessagesIntoSegments(Collective::kAllreduce, a)) << AlgorithmName(a);
  }
  EXPECT_TRUE(CutsMessagesIntoSegments(Collective::kAllgather, Algorithm::kRing));
  EXPECT_TRUE(CutsMessagesIntoSegments(Collective::kBroadcast, Algorithm::kChain));
  for (Collective c : {Collective::kGather, Collective::kScatter, Collective::kAlltoall}) {
    for (Algorithm a : AlgorithmsFor(c)) {
      EXPECT_FALSE(CutsMessagesIntoSegments(c, a)) << CollectiveName(c) << " " << AlgorithmName(a);
    }
  }
  EXPECT_FALSE(CutsMessagesIntoSegments(Collective::kAllgather, Algorithm::kRecursiveDoubling));
  EXPECT_FALSE(CutsMessagesIntoSegments(Collective::kAllgather, Algorithm::kBruck));

  for (Algorithm a : {Algorithm::kBinomial, Algorithm::kLinear}) {
    const std::string gather = OversizeMessageRemedy(Collective::kGather, a);
    EXPECT_EQ(gather,
              "every gather algorithm (binomial, linear) sends whole blocks as single messages, "
              "whatever the segment size, so no other algorithm helps: make smaller calls");
    const std::string scatter = OversizeMessageRemedy(Collective::kScatter, a);
    EXPECT_NE(scatter.find("every scatter algorithm"), std::string::npos) << scatter;
    EXPECT_EQ(scatter.find("choose"), std::string::npos) << scatter;
  }
  EXPECT_EQ(OversizeMessageRemedy(Collective::kAllgather, Algorithm::kBruck),
            "allgather bruck sends a block of that size as one message, and ring cuts blocks "
            "into segments: choose it for this call, or make smaller calls");
  // An algorithm that cuts is over the cap only by its segment: the segment size is the knob.
  const std::string ring = OversizeMessageRemedy(Collective::kAllreduce, Algorithm::kRing);
  EXPECT_NE(ring.find("give a smaller segment size (--segment_bytes"), std::string::npos) << ring;
}

}  // namespace
}  // namespace gyre::algo
