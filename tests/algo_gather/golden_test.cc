// Golden text of one small schedule per algorithm (one rank's steps, FormatRankSchedule),
// so a change to a builder's steps, regions, tags or dependencies shows up as a diff that
// can be read. Each case is also verified, so a golden never pins a wrong schedule.
#include <gtest/gtest.h>

#include <string>

#include "core/algo/builders.h"
#include "core/algo/verifier.h"

namespace gyre::algo {
namespace {

CollectiveSpec Spec(Collective c, Algorithm a, int p, int64_t n, int root, int64_t segment) {
  CollectiveSpec s;
  s.collective = c;
  s.algorithm = a;
  s.world_size = p;
  s.count = n;
  s.root = root;
  s.segment_elems = segment;
  return s;
}

void ExpectGolden(const CollectiveSpec& spec, int rank, const std::string& want) {
  StatusOr<Schedule> s = BuildSchedule(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(VerifySchedule(*s).ok()) << VerifySchedule(*s);
  EXPECT_EQ(FormatRankSchedule(s->ranks[rank]), want) << spec.ToString();
  // BuildRankSchedule alone gives the same steps as the whole-schedule build.
  StatusOr<RankSchedule> one = BuildRankSchedule(spec, rank);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(FormatRankSchedule(*one), want) << spec.ToString();
}

TEST(NonReducingGoldenTest, BroadcastBinomial) {
  ExpectGolden(Spec(Collective::kBroadcast, Algorithm::kBinomial, /*p=*/5, /*count=*/4, /*root=*/1,
                    /*segment=*/2),
               /*rank=*/3, R"(rank 3 (4 steps, scratch 0)
  #0 recv out[0+2] <- r1 p1.r1.s0
  #1 send out[0+2] -> r4 p1.r0.s0 after #0
  #2 recv out[2+2] <- r1 p1.r1.s1
  #3 send out[2+2] -> r4 p1.r0.s1 after #2
)");
}

TEST(NonReducingGoldenTest, BroadcastChain) {
  ExpectGolden(Spec(Collective::kBroadcast, Algorithm::kChain, /*p=*/3, /*count=*/5, /*root=*/1,
                    /*segment=*/2),
               /*rank=*/2, R"(rank 2 (6 steps, scratch 0)
  #0 recv out[0+2] <- r1 p2.r0.s0
  #1 send out[0+2] -> r0 p2.r0.s0 after #0
  #2 recv out[2+2] <- r1 p2.r0.s1
  #3 send out[2+2] -> r0 p2.r0.s1 after #2
  #4 recv out[4+1] <- r1 p2.r0.s2
  #5 send out[4+1] -> r0 p2.r0.s2 after #4
)");
}

TEST(NonReducingGoldenTest, BroadcastScatterAllgather) {
  ExpectGolden(
      Spec(Collective::kBroadcast, Algorithm::kScatterAllgather, /*p=*/3, /*count=*/5, /*root=*/1,
           /*segment=*/0),
      /*rank=*/1, R"(rank 1 (7 steps, scratch 0)
  #0 copy out[0+5] = in[0+5]
  #1 send out[4+1] -> r0 p3.r1.s0 after #0
  #2 send out[2+2] -> r2 p3.r0.s0 after #0
  #3 send out[0+2] -> r2 p4.r0.s0 after #0
  #4 recv out[4+1] <- r0 p4.r0.s0 after #0 #1
  #5 send out[4+1] -> r2 p4.r1.s0 after #4
  #6 recv out[2+2] <- r0 p4.r1.s0 after #0 #2
)");
}

TEST(NonReducingGoldenTest, AllgatherRing) {
  ExpectGolden(Spec(Collective::kAllgather, Algorithm::kRing, /*p=*/3, /*count=*/2, /*root=*/0,
                    /*segment=*/0),
               /*rank=*/1, R"(rank 1 (5 steps, scratch 0)
  #0 copy out[2+2] = in[0+2]
  #1 send out[2+2] -> r2 p1.r0.s0 after #0
  #2 recv out[0+2] <- r0 p1.r0.s0
  #3 send out[0+2] -> r2 p1.r1.s0 after #2
  #4 recv out[4+2] <- r0 p1.r1.s0
)");
}

TEST(NonReducingGoldenTest, AllgatherRecursiveDoubling) {
  ExpectGolden(
      Spec(Collective::kAllgather, Algorithm::kRecursiveDoubling, /*p=*/3, /*count=*/2, /*root=*/0,
           /*segment=*/0),
      /*rank=*/0, R"(rank 0 (6 steps, scratch 0)
  #0 copy out[0+2] = in[0+2]
  #1 recv out[2+2] <- r1 p2.r0.s0
  #2 send out[0+4] -> r2 p3.r0.s0 after #0 #1
  #3 recv out[4+2] <- r2 p3.r0.s0
  #4 send out[0+2] -> r1 p4.r0.s0 after #0
  #5 send out[4+2] -> r1 p4.r0.s1 after #3
)");
}

TEST(NonReducingGoldenTest, AllgatherBruck) {
  ExpectGolden(Spec(Collective::kAllgather, Algorithm::kBruck, /*p=*/3, /*count=*/2, /*root=*/0,
                    /*segment=*/0),
               /*rank=*/2, R"(rank 2 (7 steps, scratch 6)
  #0 copy tmp[0+2] = in[0+2]
  #1 send tmp[0+2] -> r1 p5.r0.s0 after #0
  #2 recv tmp[2+2] <- r0 p5.r0.s0
  #3 send tmp[0+2] -> r0 p5.r1.s0 after #0 #1
  #4 recv tmp[4+2] <- r1 p5.r1.s0
  #5 copy out[4+2] = tmp[0+2] after #0
  #6 copy out[0+4] = tmp[2+4] after #2 #4
)");
}

TEST(NonReducingGoldenTest, GatherBinomialRoot) {
  ExpectGolden(Spec(Collective::kGather, Algorithm::kBinomial, /*p=*/5, /*count=*/1, /*root=*/2,
                    /*segment=*/0),
               /*rank=*/2, R"(rank 2 (6 steps, scratch 2)
  #0 copy out[2+1] = in[0+1]
  #1 recv out[1+1] <- r1 p6.r2.s0
  #2 recv tmp[0+2] <- r4 p6.r1.s0
  #3 copy out[4+1] = tmp[0+1] after #2
  #4 copy out[0+1] = tmp[1+1] after #2
  #5 recv out[3+1] <- r3 p6.r0.s0
)");
}

TEST(NonReducingGoldenTest, GatherBinomialInner) {
  ExpectGolden(Spec(Collective::kGather, Algorithm::kBinomial, /*p=*/5, /*count=*/1, /*root=*/2,
                    /*segment=*/0),
               /*rank=*/4, R"(rank 4 (3 steps, scratch 2)
  #0 copy tmp[0+1] = in[0+1]
  #1 recv tmp[1+1] <- r0 p6.r0.s0
  #2 send tmp[0+2] -> r2 p6.r1.s0 after #0 #1
)");
}

TEST(NonReducingGoldenTest, ScatterBinomialRoot) {
  ExpectGolden(Spec(Collective::kScatter, Algorithm::kBinomial, /*p=*/5, /*count=*/1, /*root=*/2,
                    /*segment=*/0),
               /*rank=*/2, R"(rank 2 (6 steps, scratch 2)
  #0 copy out[0+1] = in[2+1]
  #1 send in[1+1] -> r1 p6.r2.s0
  #2 copy tmp[0+1] = in[4+1]
  #3 copy tmp[1+1] = in[0+1]
  #4 send tmp[0+2] -> r4 p6.r1.s0 after #2 #3
  #5 send in[3+1] -> r3 p6.r0.s0
)");
}

TEST(NonReducingGoldenTest, ScatterBinomialInner) {
  ExpectGolden(Spec(Collective::kScatter, Algorithm::kBinomial, /*p=*/5, /*count=*/1, /*root=*/2,
                    /*segment=*/0),
               /*rank=*/4, R"(rank 4 (3 steps, scratch 2)
  #0 recv tmp[0+2] <- r2 p6.r1.s0
  #1 copy out[0+1] = tmp[0+1] after #0
  #2 send tmp[1+1] -> r0 p6.r0.s0 after #0
)");
}

TEST(NonReducingGoldenTest, GatherLinear) {
  ExpectGolden(Spec(Collective::kGather, Algorithm::kLinear, /*p=*/3, /*count=*/2, /*root=*/1,
                    /*segment=*/0),
               /*rank=*/1, R"(rank 1 (3 steps, scratch 0)
  #0 copy out[2+2] = in[0+2]
  #1 recv out[4+2] <- r2 p7.r0.s0
  #2 recv out[0+2] <- r0 p7.r0.s0
)");
}

TEST(NonReducingGoldenTest, ScatterLinear) {
  ExpectGolden(Spec(Collective::kScatter, Algorithm::kLinear, /*p=*/3, /*count=*/2, /*root=*/1,
                    /*segment=*/0),
               /*rank=*/1, R"(rank 1 (3 steps, scratch 0)
  #0 copy out[0+2] = in[2+2]
  #1 send in[4+2] -> r2 p7.r0.s0
  #2 send in[0+2] -> r0 p7.r0.s0
)");
}

TEST(NonReducingGoldenTest, AlltoallPairwise) {
  ExpectGolden(Spec(Collective::kAlltoall, Algorithm::kPairwise, /*p=*/3, /*count=*/1, /*root=*/0,
                    /*segment=*/0),
               /*rank=*/0, R"(rank 0 (5 steps, scratch 0)
  #0 copy out[0+1] = in[0+1]
  #1 send in[1+1] -> r1 p8.r1.s0
  #2 recv out[2+1] <- r2 p8.r1.s0
  #3 send in[2+1] -> r2 p8.r2.s0
  #4 recv out[1+1] <- r1 p8.r2.s0
)");
}

TEST(NonReducingGoldenTest, AlltoallBruck) {
  ExpectGolden(Spec(Collective::kAlltoall, Algorithm::kBruck, /*p=*/5, /*count=*/1, /*root=*/0,
                    /*segment=*/0),
               /*rank=*/1, R"(rank 1 (17 steps, scratch 9)
  #0 copy out[1+1] = in[1+1]
  #1 copy tmp[0+1] = in[2+1]
  #2 copy tmp[1+1] = in[4+1]
  #3 send tmp[0+2] -> r2 p5.r0.s0 after #1 #2
  #4 recv tmp[2+2] <- r0 p5.r0.s0
  #5 copy out[0+1] = tmp[2+1] after #4
  #6 copy tmp[7+1] = tmp[3+1] after #4
  #7 copy tmp[0+1] = in[3+1] after #1 #3
  #8 copy tmp[1+1] = tmp[7+1] after #2 #3 #6
  #9 send tmp[0+2] -> r3 p5.r1.s0 after #7 #8
  #10 recv tmp[2+2] <- r4 p5.r1.s0 after #4 #5 #6
  #11 copy out[4+1] = tmp[2+1] after #10
  #12 copy out[3+1] = tmp[3+1] after #10
  #13 copy tmp[0+1] = in[0+1] after #7 #9
  #14 send tmp[0+1] -> r0 p5.r2.s0 after #13
  #15 recv tmp[2+1] <- r2 p5.r2.s0 after #10 #11
  #16 copy out[2+1] = tmp[2+1] after #15
)");
}

TEST(NonReducingGoldenTest, BarrierDissemination) {
  ExpectGolden(
      Spec(Collective::kBarrier, Algorithm::kDissemination, /*p=*/3, /*count=*/0, /*root=*/0,
           /*segment=*/0),
      /*rank=*/0, R"(rank 0 (4 steps, scratch 0)
  #0 send tmp[0+0] -> r1 p9.r0.s0
  #1 recv tmp[0+0] <- r2 p9.r0.s0
  #2 send tmp[0+0] -> r2 p9.r1.s0 after #0 #1
  #3 recv tmp[0+0] <- r1 p9.r1.s0
)");
}

TEST(NonReducingGoldenTest, CountZeroHasNoSteps) {
  for (Collective c : {Collective::kBroadcast, Collective::kAllgather, Collective::kGather,
                       Collective::kScatter, Collective::kAlltoall}) {
    for (Algorithm a : AlgorithmsFor(c)) {
      StatusOr<Schedule> s = BuildSchedule(Spec(c, a, 4, 0, 1, 0));
      ASSERT_TRUE(s.ok()) << s.status();
      for (const RankSchedule& rs : s->ranks) EXPECT_TRUE(rs.steps.empty()) << FormatSchedule(*s);
    }
  }
}

TEST(NonReducingGoldenTest, RejectsAlgorithmOfAnotherCollective) {
  StatusOr<Schedule> s = BuildSchedule(Spec(Collective::kGather, Algorithm::kChain, 4, 8, 0, 0));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("chain"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace gyre::algo
