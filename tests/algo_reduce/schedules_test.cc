// Every reducing schedule over the shapes that break schedules: p = 1..9 (non-powers of two
// included), count 0, 1, p-1, p, 13, 1000, every root, with and without segments. Checked by
// the verifier (matching, races, progress, postcondition, in place for allreduce), by an
// in-place race check that treats input and output as one memory, and by a symbolic run
// that pins each algorithm's documented reduction order.
#include <gtest/gtest.h>

#include <initializer_list>
#include <set>

#include "core/algo/builders.h"
#include "core/algo/verifier.h"
#include "tests/algo_reduce/reduce_test_util.h"

namespace gyre::algo {
namespace {

using testing::AlgoCase;
using testing::MakeSpec;
using testing::ReducingCases;

std::string CaseName(const AlgoCase& c) {
  return std::string(CollectiveName(c.collective)) + "_" + AlgorithmName(c.algorithm);
}

class ReducingScheduleTest : public ::testing::TestWithParam<AlgoCase> {};

std::vector<int64_t> CountsFor(int p) {
  std::set<int64_t> counts = {0, 1, 13, 1000};
  counts.insert(p - 1);
  counts.insert(p);
  return {counts.begin(), counts.end()};
}

TEST_P(ReducingScheduleTest, VerifiesForEveryShape) {
  const AlgoCase c = GetParam();
  for (int p = 1; p <= 9; ++p) {
    for (int64_t count : CountsFor(p)) {
      for (int64_t segment : {int64_t{0}, int64_t{3}, int64_t{400}}) {
        const bool rooted = c.collective == Collective::kReduce;
        for (int root = 0; root < (rooted ? p : 1); ++root) {
          const CollectiveSpec spec = MakeSpec(c.collective, c.algorithm, p, count, root, segment);
          SCOPED_TRACE(spec.ToString());
          StatusOr<Schedule> s = BuildSchedule(spec);
          ASSERT_TRUE(s.ok()) << s.status().ToString();
          const Status v = VerifySchedule(*s);
          ASSERT_TRUE(v.ok()) << v.ToString();
        }
      }
    }
  }
}

TEST_P(ReducingScheduleTest, DeterministicFlagSelectsCanonical) {
  const AlgoCase c = GetParam();
  CollectiveSpec spec = MakeSpec(c.collective, c.algorithm, 5, 13, 2);
  spec.deterministic = true;
  StatusOr<Schedule> s = BuildSchedule(spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->spec.algorithm, Algorithm::kCanonical);
  CollectiveSpec canonical = spec;
  canonical.algorithm = Algorithm::kCanonical;
  canonical.deterministic = false;
  StatusOr<Schedule> direct = BuildSchedule(canonical);
  ASSERT_TRUE(direct.ok());
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(FormatRankSchedule(s->ranks[r]), FormatRankSchedule(direct->ranks[r]));
  }
}

// The verifier runs in-place calls in one simulated order; this checks every order: with
// input and output as one memory, conflicting accesses must be ordered. Applies to every
// allreduce rank and to the root of a reduce (whose output may be its input);
// reduce_scatter's output is a different size and never aliases. The ring and canonical
// allreduce receive an allgather chunk over an input chunk they sent during the
// reduce-scatter; that is ordered by the messages in between, not by the rank's own
// dependencies, so they are held to the causal check only.
class InPlaceScheduleTest : public ::testing::TestWithParam<AlgoCase> {};

TEST_P(InPlaceScheduleTest, HasNoUnorderedAccesses) {
  const AlgoCase c = GetParam();
  const bool causal_only =
      c.collective == Collective::kAllreduce &&
      (c.algorithm == Algorithm::kRing || c.algorithm == Algorithm::kCanonical);
  for (int p = 1; p <= 9; ++p) {
    for (int64_t count : {int64_t{1}, int64_t{p - 1}, int64_t{13}}) {
      for (int64_t segment : {int64_t{0}, int64_t{4}}) {
        for (int root = 0; root < p; ++root) {
          const CollectiveSpec spec = MakeSpec(c.collective, c.algorithm, p, count, root, segment);
          SCOPED_TRACE(spec.ToString());
          StatusOr<Schedule> s = BuildSchedule(spec);
          ASSERT_TRUE(s.ok()) << s.status().ToString();
          for (int r = 0; r < p; ++r) {
            if (c.collective == Collective::kReduce && r != root) continue;
            EXPECT_EQ(testing::AliasedRace(*s, r, /*causal=*/true), "");
            if (!causal_only) {
              EXPECT_EQ(testing::AliasedRace(*s, r, /*causal=*/false), "");
            }
          }
          if (c.collective == Collective::kAllreduce) break;  // no root
        }
      }
    }
  }
}

// Only the root of a reduce writes an output; no rank touches memory outside its buffers
// (the verifier checks the bounds, this checks the non-roots have nothing to write to).
class ReduceScheduleTest : public ::testing::TestWithParam<AlgoCase> {};

TEST_P(ReduceScheduleTest, NonRootsHaveNoOutput) {
  const AlgoCase c = GetParam();
  for (int root : {0, 4, 6}) {
    StatusOr<Schedule> s = BuildSchedule(MakeSpec(c.collective, c.algorithm, 7, 20, root));
    ASSERT_TRUE(s.ok());
    for (int r = 0; r < 7; ++r) {
      if (r == root) continue;
      for (const Step& st : s->ranks[r].steps) {
        const bool reads = st.kind != StepKind::kRecv && st.src.buffer == BufferId::kOutput;
        const bool writes = st.kind != StepKind::kSend && st.dst.buffer == BufferId::kOutput;
        EXPECT_FALSE(reads || writes) << "root " << root << ", rank " << r;
      }
    }
  }
}

std::vector<AlgoCase> CasesOf(std::initializer_list<Collective> collectives) {
  std::vector<AlgoCase> out;
  for (const AlgoCase& c : ReducingCases()) {
    for (Collective want : collectives) {
      if (c.collective == want) out.push_back(c);
    }
  }
  return out;
}

std::string ParamName(const ::testing::TestParamInfo<AlgoCase>& info) {
  return CaseName(info.param);
}

INSTANTIATE_TEST_SUITE_P(All, ReducingScheduleTest, ::testing::ValuesIn(ReducingCases()),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(
    AllreduceAndReduce, InPlaceScheduleTest,
    ::testing::ValuesIn(CasesOf({Collective::kAllreduce, Collective::kReduce})), ParamName);
INSTANTIATE_TEST_SUITE_P(Reduce, ReduceScheduleTest,
                         ::testing::ValuesIn(CasesOf({Collective::kReduce})), ParamName);

std::vector<std::vector<std::string>> Outputs(const CollectiveSpec& spec) {
  StatusOr<Schedule> s = BuildSchedule(spec);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  auto outs = testing::SymbolicOutputs(*s);
  EXPECT_EQ(static_cast<int>(outs.size()), spec.world_size) << "symbolic run did not finish";
  return outs;
}

// Canonical schedules, direct allreduce, the tree allreduce and the binomial reduce all sum
// each element exactly as ((r0+r1)+(r2+r3))+... (over ranks relative to the root for
// reduce), operand order included, on every rank.
TEST(ReductionOrder, CanonicalOrderExactly) {
  for (int p = 1; p <= 9; ++p) {
    for (int64_t count : {int64_t{1}, int64_t{p + 2}}) {
      for (Algorithm a : {Algorithm::kCanonical, Algorithm::kDirect, Algorithm::kTree}) {
        const CollectiveSpec spec = MakeSpec(Collective::kAllreduce, a, p, count, 0, 2);
        SCOPED_TRACE(spec.ToString());
        const std::string want = testing::CanonicalOrder(0, p, 0, p);
        for (const auto& out : Outputs(spec)) {
          for (const std::string& e : out) ASSERT_EQ(e, want);
        }
      }
      for (int root = 0; root < p; ++root) {
        for (Algorithm a : {Algorithm::kCanonical, Algorithm::kBinomial}) {
          const CollectiveSpec spec = MakeSpec(Collective::kReduce, a, p, count, root, 2);
          SCOPED_TRACE(spec.ToString());
          // Canonical is over absolute ranks, binomial over ranks relative to the root.
          const int base = a == Algorithm::kCanonical ? 0 : root;
          const std::string want = testing::CanonicalOrder(0, p, base, p);
          const auto outs = Outputs(spec);
          ASSERT_EQ(static_cast<int>(outs.size()), p);
          for (const std::string& e : outs[root]) ASSERT_EQ(e, want);
        }
      }
      const CollectiveSpec rs =
          MakeSpec(Collective::kReduceScatter, Algorithm::kCanonical, p, count);
      for (const auto& out : Outputs(rs)) {
        for (const std::string& e : out) ASSERT_EQ(e, testing::CanonicalOrder(0, p, 0, p));
      }
    }
  }
}

// Every allreduce gives all ranks the same expression up to swapped operands, so with
// gyre's commutative ops every rank ends with the same bits.
TEST(ReductionOrder, AllreduceRanksAgree) {
  for (Algorithm a : AlgorithmsFor(Collective::kAllreduce)) {
    for (int p = 1; p <= 9; ++p) {
      const CollectiveSpec spec = MakeSpec(Collective::kAllreduce, a, p, 2 * p + 1, 0, 2);
      SCOPED_TRACE(spec.ToString());
      const auto outs = Outputs(spec);
      ASSERT_EQ(static_cast<int>(outs.size()), p);
      for (int64_t x = 0; x < spec.count; ++x) {
        const std::string want = testing::UpToCommutation(outs[0][x]);
        for (int r = 1; r < p; ++r) EXPECT_EQ(testing::UpToCommutation(outs[r][x]), want);
      }
    }
  }
}

// The orders docs/algorithms_reducing.md states for the non-canonical algorithms.
TEST(ReductionOrder, DocumentedOrders) {
  // Recursive doubling and Rabenseifner at p = 8: pairs at distance 1 first, like the
  // canonical tree (up to operand order).
  const std::string canonical8 = testing::UpToCommutation(testing::CanonicalOrder(0, 8, 0, 8));
  for (Algorithm a : {Algorithm::kRecursiveDoubling}) {
    for (const auto& out : Outputs(MakeSpec(Collective::kAllreduce, a, 8, 3))) {
      for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), canonical8);
    }
  }
  // Rabenseifner and recursive halving pair ranks p2/2 apart first.
  const std::string halving4 = testing::UpToCommutation("((r0+r2)+(r1+r3))");
  for (const auto& out :
       Outputs(MakeSpec(Collective::kAllreduce, Algorithm::kRabenseifner, 4, 4))) {
    for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), halving4);
  }
  for (const auto& out :
       Outputs(MakeSpec(Collective::kReduceScatter, Algorithm::kRecursiveHalving, 4, 2))) {
    for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), halving4);
  }
  const std::string halving8 = testing::UpToCommutation("(((r0+r4)+(r2+r6))+((r1+r5)+(r3+r7)))");
  for (const auto& out :
       Outputs(MakeSpec(Collective::kAllreduce, Algorithm::kRabenseifner, 8, 8))) {
    for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), halving8);
  }
  // With a fold, a pair's sum (r0+r1) is the leaf of its new rank: p = 6 has new ranks
  // (r0+r1), (r2+r3), r4, r5.
  const std::string halving6 = testing::UpToCommutation("(((r0+r1)+r4)+((r2+r3)+r5))");
  for (const auto& out :
       Outputs(MakeSpec(Collective::kReduceScatter, Algorithm::kRecursiveHalving, 6, 1))) {
    for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), halving6);
  }
  // Folded ranks: the odd rank of a pair combines its even neighbour first.
  const std::string rd5 = testing::UpToCommutation("(((r0+r1)+r2)+(r3+r4))");
  for (const auto& out :
       Outputs(MakeSpec(Collective::kAllreduce, Algorithm::kRecursiveDoubling, 5, 2))) {
    for (const std::string& e : out) EXPECT_EQ(testing::UpToCommutation(e), rd5);
  }
  // Ring: chunk c is a chain around the ring that starts at rank c (allreduce, k = 1) or at
  // rank c + 1 (reduce_scatter, k = 0), the last rank's contribution on the left.
  const auto ring = Outputs(MakeSpec(Collective::kAllreduce, Algorithm::kRing, 4, 4));
  ASSERT_EQ(ring.size(), 4u);
  EXPECT_EQ(ring[0][0], "(r3+((r0+r1)+r2))");
  EXPECT_EQ(ring[0][2], "(r1+((r2+r3)+r0))");
  const auto rs = Outputs(MakeSpec(Collective::kReduceScatter, Algorithm::kRing, 4, 1));
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0][0], "(r0+((r1+r2)+r3))");
}

}  // namespace
}  // namespace gyre::algo
