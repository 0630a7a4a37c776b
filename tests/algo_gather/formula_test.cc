// The closed forms of formulas_bcast.cc and formulas_gather.cc against the cost model's
// count and discrete-event walk of the built schedules: per-rank traffic, and the
// critical-path time for several alpha/beta ratios (a single alpha-beta pair can only match
// all of them if the formula is exact, not just close for one machine).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/algo/builders.h"
#include "core/algo/cost.h"
#include "core/algo/formulas.h"

namespace gyre::algo {
namespace {

const Collective kCollectives[] = {Collective::kBroadcast, Collective::kAllgather,
                                   Collective::kGather,    Collective::kScatter,
                                   Collective::kAlltoall,  Collective::kBarrier};

bool Rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kGather || c == Collective::kScatter;
}

CollectiveSpec Spec(Collective c, Algorithm a, int p, int64_t n, int root = 0,
                    int64_t segment = 0) {
  CollectiveSpec s;
  s.collective = c;
  s.algorithm = a;
  s.world_size = p;
  s.count = n;
  s.root = root;
  s.segment_elems = segment;
  return s;
}

// Traffic is exact in more cases than time: segmenting and the recursive-doubling fold
// change when messages go, not what is sent (docs/algorithms_data.md).
bool TrafficIsExact(const CollectiveSpec& s) {
  if (FormulaIsExact(s)) return true;
  if (s.collective == Collective::kAllgather) {
    return s.algorithm == Algorithm::kRing || s.algorithm == Algorithm::kRecursiveDoubling;
  }
  if (s.collective == Collective::kBroadcast && s.algorithm == Algorithm::kHierarchical) {
    return true;
  }
  return s.collective == Collective::kBroadcast && s.algorithm == Algorithm::kScatterAllgather &&
         s.count % s.world_size == 0;
}

// Every spec the tests sweep: p = 1..9, awkward counts, every root, three segment sizes.
std::vector<CollectiveSpec> Sweep() {
  std::vector<CollectiveSpec> specs;
  for (Collective c : kCollectives) {
    for (Algorithm a : AlgorithmsFor(c)) {
      for (int p = 1; p <= 9; ++p) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{p - 1}, int64_t{p}, int64_t{13},
                          int64_t{1000}, int64_t{2520}}) {
          for (int root = 0; root < (Rooted(c) ? p : 1); ++root) {
            for (int64_t seg : {0, 3, 64}) specs.push_back(Spec(c, a, p, n, root, seg));
          }
        }
      }
    }
  }
  return specs;
}

struct Machine {
  double alpha;
  double beta;  // per byte
};
const Machine kMachines[] = {{1e-6, 1e-9}, {1.0, 0.0}, {0.0, 1.0}, {1e-3, 1.0}, {1.0, 1e-3}};

TEST(NonReducingFormulaTest, TrafficMatchesCountedTrafficPerRank) {
  int checked = 0;
  for (const CollectiveSpec& spec : Sweep()) {
    if (!TrafficIsExact(spec)) continue;
    StatusOr<Schedule> s = BuildSchedule(spec);
    ASSERT_TRUE(s.ok()) << s.status();
    StatusOr<ScheduleCost> cost = CostOf(*s);
    ASSERT_TRUE(cost.ok()) << spec.ToString() << ": " << cost.status();
    for (int r = 0; r < spec.world_size; ++r) {
      StatusOr<ClosedForm> f = Theory(spec, r);
      ASSERT_TRUE(f.ok()) << spec.ToString() << ": " << f.status();
      const Traffic& got = cost->ranks[r].traffic;
      const Traffic& want = f->traffic;
      ASSERT_TRUE(got == want) << spec.ToString() << " rank " << r << ": counted msgs "
                               << got.msgs_sent << "/" << got.msgs_recv << " elems "
                               << got.elems_sent << "/" << got.elems_recv << ", formula msgs "
                               << want.msgs_sent << "/" << want.msgs_recv << " elems "
                               << want.elems_sent << "/" << want.elems_recv;
      ++checked;
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(NonReducingFormulaTest, CriticalPathMatchesClosedFormWhenExact) {
  int checked = 0;
  for (const CollectiveSpec& base : Sweep()) {
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
      CollectiveSpec spec = base;
      spec.dtype = dtype;
      if (!FormulaIsExact(spec)) continue;
      StatusOr<Schedule> s = BuildSchedule(spec);
      ASSERT_TRUE(s.ok()) << s.status();
      StatusOr<ClosedForm> f = Theory(spec, 0);
      ASSERT_TRUE(f.ok()) << f.status();
      const double bytes = static_cast<double>(DataTypeSize(dtype));
      for (const Machine& m : kMachines) {
        CostParams params;
        params.alpha_s = m.alpha;
        params.beta_s_per_byte = m.beta;
        StatusOr<ScheduleCost> cost = CostOf(*s, params);
        ASSERT_TRUE(cost.ok()) << cost.status();
        const double want = f->alpha_terms * m.alpha + f->beta_elems * bytes * m.beta;
        ASSERT_NEAR(cost->time_s, want, 1e-9 * std::max(1.0, want))
            << spec.ToString() << " alpha=" << m.alpha << " beta=" << m.beta
            << ": formula alpha_terms=" << f->alpha_terms << " beta_elems=" << f->beta_elems;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// A few values worked out by hand from the formulas in docs/algorithms_data.md, so a
// builder and its formula cannot drift together unnoticed.
struct Expected {
  Collective c;
  Algorithm a;
  int p;
  int64_t n;
  int64_t segment;
  double alpha_terms;
  double beta_elems;
};

TEST(NonReducingFormulaTest, HandComputedValues) {
  const Expected cases[] = {
      // binomial: floor(log2 p) alpha + ceil(log2 p) n beta, segmented or not.
      {Collective::kBroadcast, Algorithm::kBinomial, 5, 100, 0, 2, 300},
      {Collective::kBroadcast, Algorithm::kBinomial, 8, 100, 7, 3, 300},
      // chain: (p-1) alpha + (n + (p-2) segment) beta.
      {Collective::kBroadcast, Algorithm::kChain, 4, 13, 3, 3, 19},
      {Collective::kBroadcast, Algorithm::kChain, 4, 13, 0, 3, 39},
      // Linear: one hop; the root's port sends p-1 copies, segmented or not.
      {Collective::kBroadcast, Algorithm::kLinear, 4, 13, 0, 1, 39},
      {Collective::kBroadcast, Algorithm::kLinear, 5, 100, 30, 1, 400},
      // scatter + ring: (floor(log2 p) + p - 1) alpha + 2 (p-1)/p n beta.
      {Collective::kBroadcast, Algorithm::kScatterAllgather, 4, 100, 0, 5, 150},
      {Collective::kAllgather, Algorithm::kRing, 5, 10, 0, 4, 40},
      {Collective::kAllgather, Algorithm::kRecursiveDoubling, 8, 10, 0, 3, 70},
      // Bruck: p=5 has a short last round (one block), sharing round 1's alpha.
      {Collective::kAllgather, Algorithm::kBruck, 5, 10, 0, 2, 40},
      {Collective::kAllgather, Algorithm::kBruck, 7, 10, 0, 3, 60},
      // binomial gather, p=7: the child 4 (subtree 4..6, itself a gather of 3) dominates.
      {Collective::kGather, Algorithm::kBinomial, 7, 10, 0, 2, 40},
      {Collective::kGather, Algorithm::kBinomial, 5, 10, 0, 2, 30},
      {Collective::kGather, Algorithm::kLinear, 9, 10, 0, 1, 10},
      {Collective::kScatter, Algorithm::kBinomial, 7, 10, 0, 2, 60},
      {Collective::kScatter, Algorithm::kLinear, 9, 10, 0, 1, 80},
      {Collective::kAlltoall, Algorithm::kPairwise, 6, 10, 0, 1, 50},
      // Bruck alltoall, p=6: rounds move 3, 2, 2 slots; the last round is short.
      {Collective::kAlltoall, Algorithm::kBruck, 6, 10, 0, 2, 70},
      {Collective::kAlltoall, Algorithm::kBruck, 8, 10, 0, 3, 120},
      {Collective::kBarrier, Algorithm::kDissemination, 9, 0, 0, 4, 0},
      // Linear: every rank signals rank 0, which releases them all: two hops, whatever p.
      {Collective::kBarrier, Algorithm::kLinear, 9, 0, 0, 2, 0},
      {Collective::kBarrier, Algorithm::kLinear, 2, 0, 0, 2, 0},
  };
  for (const Expected& e : cases) {
    const CollectiveSpec spec = Spec(e.c, e.a, e.p, e.n, /*root=*/e.p - 1, e.segment);
    ASSERT_TRUE(FormulaIsExact(spec)) << spec.ToString();
    StatusOr<ClosedForm> f = Theory(spec, 0);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_DOUBLE_EQ(f->alpha_terms, e.alpha_terms) << spec.ToString();
    EXPECT_DOUBLE_EQ(f->beta_elems, e.beta_elems) << spec.ToString();
  }
}

TEST(NonReducingFormulaTest, ExactnessConditions) {
  // Uneven chunks or multi-segment ring steps make scatter + ring inexact.
  EXPECT_TRUE(FormulaIsExact(Spec(Collective::kBroadcast, Algorithm::kScatterAllgather, 4, 8)));
  EXPECT_FALSE(FormulaIsExact(Spec(Collective::kBroadcast, Algorithm::kScatterAllgather, 4, 9)));
  EXPECT_FALSE(
      FormulaIsExact(Spec(Collective::kBroadcast, Algorithm::kScatterAllgather, 4, 80, 0, 3)));
  EXPECT_TRUE(FormulaIsExact(Spec(Collective::kBroadcast, Algorithm::kChain, 7, 13, 0, 3)));
  EXPECT_TRUE(FormulaIsExact(Spec(Collective::kAllgather, Algorithm::kRing, 5, 10, 0, 10)));
  EXPECT_FALSE(FormulaIsExact(Spec(Collective::kAllgather, Algorithm::kRing, 5, 10, 0, 3)));
  EXPECT_TRUE(FormulaIsExact(Spec(Collective::kAllgather, Algorithm::kRecursiveDoubling, 8, 3)));
  EXPECT_FALSE(FormulaIsExact(Spec(Collective::kAllgather, Algorithm::kRecursiveDoubling, 6, 3)));

  // Where the formula is not exact the time really is not one alpha-beta pair: the
  // alpha-only and beta-only times do not add up to the time of the combined machine.
  for (const CollectiveSpec& spec :
       {Spec(Collective::kAllgather, Algorithm::kRecursiveDoubling, 5, 100),
        Spec(Collective::kAllgather, Algorithm::kRing, 4, 100, 0, 10)}) {
    StatusOr<Schedule> s = BuildSchedule(spec);
    ASSERT_TRUE(s.ok()) << s.status();
    auto time = [&](double alpha, double beta) {
      CostParams params;
      params.alpha_s = alpha;
      params.beta_s_per_byte = beta;
      return CostOf(*s, params)->time_s;
    };
    EXPECT_GT(time(1, 0) + time(0, 1), time(1, 1) + 1e-9) << spec.ToString();
  }
}

TEST(NonReducingFormulaTest, TheoryOfEveryAlgorithmIsImplemented) {
  for (Collective c : kCollectives) {
    for (Algorithm a : AlgorithmsFor(c)) {
      for (int p : {1, 2, 3, 6, 9}) {
        const CollectiveSpec spec = Spec(c, a, p, 12, /*root=*/p / 2);
        for (int r = 0; r < p; ++r) {
          StatusOr<ClosedForm> f = Theory(spec, r);
          ASSERT_TRUE(f.ok()) << spec.ToString() << ": " << f.status();
        }
      }
    }
  }
}

}  // namespace
}  // namespace gyre::algo
