// The verifier and the cost model, on the ring allreduce and on hand-broken schedules that
// each violate one rule.
#include "core/algo/verifier.h"

#include <gtest/gtest.h>

#include "core/algo/builders.h"
#include "core/algo/cost.h"
#include "core/algo/formulas.h"

namespace gyre::algo {
namespace {

CollectiveSpec Ring(int p, int64_t n, int64_t segment = 0) {
  CollectiveSpec s;
  s.collective = Collective::kAllreduce;
  s.algorithm = Algorithm::kRing;
  s.world_size = p;
  s.count = n;
  s.segment_elems = segment;
  return s;
}

TEST(VerifierTest, RingAllreduceVerifiesForManyShapes) {
  for (int p = 1; p <= 9; ++p) {
    for (int64_t n : {0L, 1L, static_cast<int64_t>(p - 1), static_cast<int64_t>(p), 13L, 1000L}) {
      for (int64_t seg : {0L, 3L}) {
        auto s = BuildSchedule(Ring(p, n, seg));
        ASSERT_TRUE(s.ok()) << s.status();
        Status v = VerifySchedule(*s);
        EXPECT_TRUE(v.ok()) << "p=" << p << " n=" << n << " seg=" << seg << ": " << v;
      }
    }
  }
}

TEST(VerifierTest, CanonicalAllreduceVerifies) {
  for (int p = 1; p <= 9; ++p) {
    for (int64_t n : {0L, 1L, 5L, 1000L}) {
      CollectiveSpec spec = Ring(p, n);
      spec.deterministic = true;
      auto s = BuildSchedule(spec);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->spec.algorithm, Algorithm::kCanonical);
      Status v = VerifySchedule(*s);
      EXPECT_TRUE(v.ok()) << "p=" << p << " n=" << n << ": " << v;
    }
  }
}

TEST(CostTest, RingTrafficAndTimeMatchTheFormula) {
  for (int p = 2; p <= 9; ++p) {
    const int64_t n = 12L * p;
    auto s = BuildSchedule(Ring(p, n));
    ASSERT_TRUE(s.ok());
    CostParams params;
    params.alpha_s = 5e-6;
    params.beta_s_per_byte = 1e-9;
    auto cost = CostOf(*s, params);
    ASSERT_TRUE(cost.ok()) << cost.status();
    for (int r = 0; r < p; ++r) {
      auto f = Theory(s->spec, r);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(cost->ranks[r].traffic, f->traffic) << "p=" << p << " rank " << r;
      EXPECT_EQ(cost->ranks[r].traffic.msgs_sent + cost->ranks[r].traffic.msgs_recv, 4 * (p - 1));
    }
    auto f = Theory(s->spec, 0);
    const double closed = f->alpha_terms * params.alpha_s +
                          f->beta_elems * DataTypeSize(s->spec.dtype) * params.beta_s_per_byte;
    EXPECT_NEAR(cost->time_s, closed, 1e-12) << "p=" << p;
  }
}

// A two-rank schedule built by hand: rank 0 sends in[0+n] to rank 1, which reduces it
// into out after copying its own input.
Schedule TwoRankSum(int64_t n) {
  Schedule s;
  s.spec = Ring(2, n);
  s.spec.collective = Collective::kReduce;
  s.spec.algorithm = Algorithm::kBinomial;
  s.spec.root = 1;
  RankSchedule r0{0, 0, {}};
  Step send;
  send.kind = StepKind::kSend;
  send.peer = 1;
  send.tag = 7;
  send.src = InputRegion(0, n);
  r0.steps.push_back(send);
  RankSchedule r1{1, n, {}};
  Step copy;
  copy.kind = StepKind::kCopy;
  copy.src = InputRegion(0, n);
  copy.dst = OutputRegion(0, n);
  Step recv;
  recv.kind = StepKind::kRecv;
  recv.peer = 0;
  recv.tag = 7;
  recv.dst = Region{BufferId::kScratch, 0, n};
  Step reduce;
  reduce.kind = StepKind::kReduce;
  reduce.src = Region{BufferId::kScratch, 0, n};
  reduce.dst = OutputRegion(0, n);
  reduce.deps = {0, 1};
  r1.steps = {copy, recv, reduce};
  s.ranks = {r0, r1};
  return s;
}

TEST(VerifierTest, HandWrittenScheduleIsAccepted) {
  EXPECT_TRUE(VerifySchedule(TwoRankSum(4)).ok()) << VerifySchedule(TwoRankSum(4));
}

TEST(VerifierTest, RejectsMissingReceive) {
  Schedule s = TwoRankSum(4);
  s.ranks[1].steps[1].tag = 8;
  Status st = VerifySchedule(s);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("no matching receive"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsSizeMismatch) {
  Schedule s = TwoRankSum(4);
  s.ranks[0].steps[0].src.count = 3;
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("sends 3 elements"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsDoubleCounting) {
  Schedule s = TwoRankSum(4);
  // Reduce rank 1's own input again instead of the received data.
  s.ranks[1].steps[2].src = InputRegion(0, 4);
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("counts rank 1 twice"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsRace) {
  Schedule s = TwoRankSum(4);
  s.ranks[1].steps[2].deps = {0};  // the reduce no longer waits for the receive
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("without a dependency"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsWriteToInput) {
  Schedule s = TwoRankSum(4);
  s.ranks[1].steps[1].dst = InputRegion(0, 4);
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("read-only"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsWrongPostcondition) {
  Schedule s = TwoRankSum(4);
  s.ranks[1].steps.pop_back();  // never reduce the received data
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("must be"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsDeadlock) {
  Schedule s = TwoRankSum(4);
  // Rank 0 now also waits for a message that rank 1 only sends after receiving.
  Step recv;
  recv.kind = StepKind::kRecv;
  recv.peer = 1;
  recv.tag = 9;
  recv.dst = Region{BufferId::kScratch, 0, 1};
  s.ranks[0].scratch_count = 1;
  s.ranks[0].steps.insert(s.ranks[0].steps.begin(), recv);
  s.ranks[0].steps[1].deps = {0};
  Step send;
  send.kind = StepKind::kSend;
  send.peer = 0;
  send.tag = 9;
  send.src = OutputRegion(0, 1);
  send.deps = {2};
  s.ranks[1].steps.push_back(send);
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("cannot finish"), std::string::npos) << st;
}

TEST(VerifierTest, RejectsForwardDependency) {
  Schedule s = TwoRankSum(4);
  s.ranks[1].steps[0].deps = {2};
  Status st = VerifySchedule(s);
  EXPECT_NE(st.message().find("earlier steps"), std::string::npos) << st;
}

}  // namespace
}  // namespace gyre::algo
