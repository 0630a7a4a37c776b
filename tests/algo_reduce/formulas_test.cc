// The closed forms of the reducing algorithms against the cost model's count of every
// schedule: per-rank traffic and critical-path time must match whenever FormulaIsExact, and
// a handful of values are worked out by hand so the formulas cannot merely echo the builders.
#include "core/algo/formulas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/algo/builders.h"
#include "core/algo/cost.h"
#include "tests/algo_reduce/reduce_test_util.h"

namespace gyre::algo {
namespace {

using testing::MakeSpec;

std::string Show(const Traffic& t) {
  return std::to_string(t.msgs_sent) + "/" + std::to_string(t.msgs_recv) + " msgs, " +
         std::to_string(t.elems_sent) + "/" + std::to_string(t.elems_recv) + " elems";
}

double FormulaTime(const ClosedForm& f, const CostParams& c, const CollectiveSpec& spec) {
  return f.alpha_terms * c.alpha_s +
         f.beta_elems * static_cast<double>(DataTypeSize(spec.dtype)) * c.beta_s_per_byte;
}

const CostParams kParamSets[] = {
    {1e-6, 1e-9, 0, 0},   // 1 us, 1 GB/s
    {2e-5, 3e-11, 0, 0},  // latency-heavy
    {1e-7, 5e-9, 0, 0},   // bandwidth-heavy
};

int64_t PowerOfTwoBelow(int p) {
  int64_t v = 1;
  while (v * 2 <= p) v *= 2;
  return v;
}

// Counts that split evenly (by p and by the power of two below it) and some that do not.
std::vector<int64_t> Counts(int p) {
  const int64_t even = p * PowerOfTwoBelow(p);
  return {0, 1, int64_t{p}, 13, even, 3 * even, 1000};
}

TEST(ReducingFormulas, MatchTheCostModelWhereExact) {
  std::map<std::string, int> exact_cases, exact_non_power;
  for (const testing::AlgoCase& c : testing::ReducingCases()) {
    const std::string name =
        std::string(CollectiveName(c.collective)) + " " + AlgorithmName(c.algorithm);
    for (int p = 1; p <= 9; ++p) {
      for (int64_t count : Counts(p)) {
        for (int64_t segment : {int64_t{0}, int64_t{5}, count}) {
          for (int root : {0, p - 1}) {
            const CollectiveSpec spec =
                MakeSpec(c.collective, c.algorithm, p, count, root, segment);
            if (!FormulaIsExact(spec)) continue;
            SCOPED_TRACE(spec.ToString());
            ++exact_cases[name];
            if ((p & (p - 1)) != 0 && count > 0) ++exact_non_power[name];
            StatusOr<Schedule> s = BuildSchedule(spec);
            ASSERT_TRUE(s.ok()) << s.status().ToString();
            for (const CostParams& params : kParamSets) {
              StatusOr<ScheduleCost> cost = CostOf(*s, params);
              ASSERT_TRUE(cost.ok()) << cost.status().ToString();
              for (int r = 0; r < p; ++r) {
                StatusOr<ClosedForm> f = Theory(spec, r);
                ASSERT_TRUE(f.ok()) << f.status().ToString();
                ASSERT_EQ(Show(f->traffic), Show(cost->ranks[r].traffic)) << "rank " << r;
                const double want = FormulaTime(*f, params, spec);
                ASSERT_NEAR(cost->time_s, want, 1e-9 * want) << "rank " << r;
              }
            }
            if (c.collective != Collective::kReduce) break;  // root only matters for reduce
          }
        }
      }
    }
    // Not vacuous: every algorithm is exact on many shapes, and all but recursive halving
    // (whose fold makes the groups unequal) on some non-power-of-two world.
    EXPECT_GE(exact_cases[name], 30) << name;
    if (c.algorithm != Algorithm::kRecursiveHalving) {
      EXPECT_GE(exact_non_power[name], 3) << name;
    }
  }
}

// The fold's traffic is exact for every p once the chunks split evenly, even where the
// critical path is not a single alpha-beta form; there the formula bounds it from above.
TEST(ReducingFormulas, FoldTrafficIsExactAndTimeBounded) {
  const testing::AlgoCase folds[] = {
      {Collective::kAllreduce, Algorithm::kRecursiveDoubling},
      {Collective::kAllreduce, Algorithm::kRabenseifner},
      {Collective::kReduceScatter, Algorithm::kRecursiveHalving},
  };
  for (const testing::AlgoCase& c : folds) {
    for (int p = 1; p <= 17; ++p) {
      for (int64_t count : {PowerOfTwoBelow(p), 5 * PowerOfTwoBelow(p)}) {
        const CollectiveSpec spec = MakeSpec(c.collective, c.algorithm, p, count);
        SCOPED_TRACE(spec.ToString());
        StatusOr<Schedule> s = BuildSchedule(spec);
        ASSERT_TRUE(s.ok());
        for (const CostParams& params : kParamSets) {
          StatusOr<ScheduleCost> cost = CostOf(*s, params);
          ASSERT_TRUE(cost.ok());
          for (int r = 0; r < p; ++r) {
            StatusOr<ClosedForm> f = Theory(spec, r);
            ASSERT_TRUE(f.ok());
            ASSERT_EQ(Show(f->traffic), Show(cost->ranks[r].traffic)) << "rank " << r;
            const double bound = FormulaTime(*f, params, spec);
            ASSERT_LE(cost->time_s, bound * (1 + 1e-9));
          }
        }
      }
    }
  }
}

struct HandCase {
  CollectiveSpec spec;
  std::map<int, Traffic> traffic;  // rank -> expected
  double alpha_terms;
  double beta_elems;
};

// Worked out on paper from each algorithm's description (docs/algorithms_reducing.md).
TEST(ReducingFormulas, HandComputedValues) {
  using C = Collective;
  using A = Algorithm;
  const HandCase cases[] = {
      // 6 steps of n/p = 2.
      {MakeSpec(C::kAllreduce, A::kRing, 4, 8), {{0, {6, 6, 12, 12}}}, 6, 12},
      // Rank 0 has children 1, 2, 4; rank 4 has child 5; rank 5 is a leaf.
      // T = 2*floor(log2 6) alpha + (2 + 3) n beta.
      {MakeSpec(C::kAllreduce, A::kTree, 6, 10),
       {{0, {3, 3, 30, 30}}, {4, {2, 2, 20, 20}}, {5, {1, 1, 10, 10}}},
       4,
       50},
      // p2 = 4, extra = 2 = p2/2: 3 alpha + 4 n beta.
      {MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 6, 10),
       {{0, {1, 1, 10, 10}}, {1, {3, 3, 30, 30}}, {4, {2, 2, 20, 20}}},
       3,
       40},
      // extra = 3 > p2/2: (log2 4 + 2)(alpha + n beta).
      {MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 7, 4), {{6, {2, 2, 8, 8}}}, 4, 16},
      // 8 + 4 + 2 elements each way, twice.
      {MakeSpec(C::kAllreduce, A::kRabenseifner, 8, 16), {{3, {6, 6, 28, 28}}}, 6, 28},
      {MakeSpec(C::kAllreduce, A::kDirect, 5, 3), {{2, {4, 4, 12, 12}}}, 1, 12},
      {MakeSpec(C::kAllreduce, A::kDirect, 3, 10, 0, 4), {{2, {6, 6, 20, 20}}}, 1, 20},
      {MakeSpec(C::kAllreduce, A::kCanonical, 4, 8), {{1, {6, 6, 12, 12}}}, 4, 12},
      // Root 2: relative ranks 0..4 are ranks 2, 3, 4, 0, 1; rank 4 (relative 2) has one
      // child, relative 3.
      {MakeSpec(C::kReduce, A::kBinomial, 5, 7, 2),
       {{2, {0, 3, 0, 21}}, {3, {1, 0, 7, 0}}, {4, {1, 1, 7, 7}}},
       2,
       14},
      {MakeSpec(C::kReduce, A::kRingGather, 4, 8, 1),
       {{1, {3, 6, 6, 12}}, {0, {4, 3, 8, 6}}},
       4,
       8},
      {MakeSpec(C::kReduce, A::kCanonical, 4, 8, 1), {{1, {3, 6, 6, 12}}, {3, {4, 3, 8, 6}}}, 2, 8},
      {MakeSpec(C::kReduceScatter, A::kRing, 4, 3), {{0, {3, 3, 9, 9}}}, 3, 9},
      {MakeSpec(C::kReduceScatter, A::kCanonical, 4, 3), {{0, {3, 3, 9, 9}}}, 1, 9},
      {MakeSpec(C::kReduceScatter, A::kRecursiveHalving, 4, 3), {{2, {2, 2, 9, 9}}}, 2, 9},
      // p = 6: groups of blocks {0,1} {2,3} {4} {5}. Rank 1 (group 0) sends 2 then 1 blocks
      // plus block 0 back to rank 0; it receives rank 0's whole input, then 2 and 1 blocks.
      // Not lockstep: the time is the bound 4 alpha + (6 fold-in + 4 + 2 + 1 fold-out) c beta.
      {MakeSpec(C::kReduceScatter, A::kRecursiveHalving, 6, 2),
       {{0, {1, 1, 12, 2}}, {1, {3, 3, 10, 24}}, {4, {2, 2, 10, 6}}},
       4,
       26},
  };
  for (const HandCase& h : cases) {
    SCOPED_TRACE(h.spec.ToString());
    StatusOr<Schedule> s = BuildSchedule(h.spec);
    ASSERT_TRUE(s.ok());
    StatusOr<ScheduleCost> cost = CostOf(*s);
    ASSERT_TRUE(cost.ok());
    for (const auto& [rank, want] : h.traffic) {
      StatusOr<ClosedForm> f = Theory(h.spec, rank);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(Show(f->traffic), Show(want)) << "formula, rank " << rank;
      EXPECT_EQ(Show(cost->ranks[rank].traffic), Show(want)) << "schedule, rank " << rank;
      EXPECT_DOUBLE_EQ(f->alpha_terms, h.alpha_terms);
      EXPECT_DOUBLE_EQ(f->beta_elems, h.beta_elems);
    }
  }
}

TEST(ReducingFormulas, ExactnessConditions) {
  using C = Collective;
  using A = Algorithm;
  // Chunked algorithms need even chunks and one segment per message.
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRing, 4, 8)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRing, 4, 9)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRing, 4, 8, 0, 1)));
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRing, 4, 8, 0, 2)));
  // Whole-buffer algorithms: any count, but a segmented tree pipelines (not the formula).
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kTree, 5, 13)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kTree, 5, 13, 0, 4)));
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kDirect, 5, 13, 0, 4)));
  // Recursive doubling's fold: exact unless extra <= p2/4 (p = 5, 9, 17, ...).
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 3, 13)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 5, 13)));
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 6, 13)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 9, 13)));
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRecursiveDoubling, 11, 13)));
  // Rabenseifner: count divisible by p2 and either no fold or extra > p2/2.
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRabenseifner, 7, 8)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRabenseifner, 6, 8)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kAllreduce, A::kRabenseifner, 8, 12)));
  // Recursive halving: only for powers of two.
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kReduceScatter, A::kRecursiveHalving, 8, 3)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kReduceScatter, A::kRecursiveHalving, 7, 3)));
  // Canonical reduce-scatter does not segment; it is always exact.
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kReduceScatter, A::kCanonical, 7, 3, 0, 1)));
  EXPECT_TRUE(FormulaIsExact(MakeSpec(C::kReduce, A::kBinomial, 7, 1000, 3)));
  EXPECT_FALSE(FormulaIsExact(MakeSpec(C::kReduce, A::kRingGather, 7, 1000, 3)));
}

// The deterministic flag maps every reducing call onto canonical, in the formulas too.
TEST(ReducingFormulas, DeterministicUsesCanonicalFormula) {
  CollectiveSpec spec = MakeSpec(Collective::kAllreduce, Algorithm::kRing, 4, 8);
  spec.deterministic = true;
  StatusOr<ClosedForm> f = Theory(spec, 0);
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(f->alpha_terms, 4);  // canonical: p alpha; ring would be 2(p-1)
}

}  // namespace
}  // namespace gyre::algo
