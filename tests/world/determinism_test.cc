// Reduction order. Floating-point addition is not associative, so algorithms that sum in
// different orders return different bits; deterministic mode sums every element in the one
// canonical order ((r0+r1)+(r2+r3))+... whatever the algorithm.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/world/world.h"

namespace gyre::testing {
namespace {

using algo::Algorithm;

// Each rank contributes one double; returns rank 0's result of the allreduce.
double AllreduceOne(const std::vector<double>& values, Algorithm algorithm, bool deterministic) {
  const int p = static_cast<int>(values.size());
  auto world = MakeWorld(LoopbackFactory(), p);
  EXPECT_TRUE(world.ok());
  std::vector<double> results(p, std::nan(""));
  auto statuses = RunOnRanks(p, [&](int r) {
    CallOptions opts;
    opts.algorithm = algorithm;
    opts.deterministic = deterministic ? 1 : 0;
    return (*world)[r]->Allreduce(&values[r], &results[r], 1, DataType::kFloat64, ReduceOp::kSum,
                                  opts);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(std::memcmp(&results[r], &results[0], sizeof(double)), 0) << "ranks disagree";
  }
  return results[0];
}

TEST(DeterminismTest, FloatAssociativityCase) {
  const std::vector<double> x = {1e16, 1.0, -1e16, 3.0};
  // The documented orders (docs/algorithms.md): the ring passes the partial sum of the one
  // non-empty chunk from rank 0 around to rank 3; the binomial tree pairs neighbours.
  const double ring_order = ((x[0] + x[1]) + x[2]) + x[3];
  const double tree_order = (x[0] + x[1]) + (x[2] + x[3]);
  ASSERT_NE(ring_order, tree_order) << "the inputs must expose non-associativity";

  const double ring = AllreduceOne(x, Algorithm::kRing, false);
  const double tree = AllreduceOne(x, Algorithm::kTree, false);
  const double rd = AllreduceOne(x, Algorithm::kRecursiveDoubling, false);
  const double raben = AllreduceOne(x, Algorithm::kRabenseifner, false);
  std::printf(
      "[1e16, 1, -1e16, 3] on 4 ranks: ring=%.17g tree=%.17g recursive_doubling=%.17g "
      "rabenseifner=%.17g exact=5\n",
      ring, tree, rd, raben);
  EXPECT_EQ(ring, ring_order);
  EXPECT_EQ(tree, tree_order);
  EXPECT_NE(ring, tree);

  for (Algorithm a : algo::AlgorithmsFor(algo::Collective::kAllreduce)) {
    const double det = AllreduceOne(x, a, true);
    EXPECT_EQ(det, tree_order) << "deterministic " << algo::AlgorithmName(a);
  }
}

// The canonical order, computed sequentially.
void CanonicalSum(std::vector<std::vector<float>>& v, int lo, int hi) {
  if (hi - lo <= 1) return;
  int half = 1;
  while (half * 2 < hi - lo) half *= 2;
  const int mid = lo + half;
  CanonicalSum(v, lo, mid);
  CanonicalSum(v, mid, hi);
  for (size_t i = 0; i < v[lo].size(); ++i) v[lo][i] += v[mid][i];
}

TEST(DeterminismTest, DeterministicModeIsBitwiseEqualAcrossAlgorithmsAndMatchesCanonicalOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int p : {2, 3, 4, 5, 7, 8}) {
    for (int64_t n : {1, 5, 1000, 4099}) {
      std::vector<std::vector<float>> in(p, std::vector<float>(n));
      for (auto& row : in) {
        for (auto& v : row) v = dist(rng) * std::pow(10.0f, static_cast<float>(rng() % 8));
      }
      std::vector<std::vector<float>> canon = in;
      CanonicalSum(canon, 0, p);
      auto world = MakeWorld(LoopbackFactory(), p);
      ASSERT_TRUE(world.ok());
      for (Algorithm a : algo::AlgorithmsFor(algo::Collective::kAllreduce)) {
        std::vector<std::vector<float>> out(p, std::vector<float>(n));
        auto st = RunOnRanks(p, [&](int r) {
          CallOptions o;
          o.algorithm = a;
          o.deterministic = 1;
          return (*world)[r]->Allreduce(in[r].data(), out[r].data(), n, DataType::kFloat32,
                                        ReduceOp::kSum, o);
        });
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r];
          ASSERT_EQ(std::memcmp(out[r].data(), canon[0].data(), n * sizeof(float)), 0)
              << "p=" << p << " n=" << n << " algo " << algo::AlgorithmName(a) << " rank " << r;
        }
      }
    }
  }
}

// Without deterministic mode, random floats agree with the exact sum within the bound
// (p-1) * eps * sum(|x|) for every algorithm (the worst case of any summation order).
TEST(DeterminismTest, FloatResultsWithinStatedBound) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int p = 6;
  const int64_t n = 3001;
  std::vector<std::vector<float>> in(p, std::vector<float>(n));
  for (auto& row : in) {
    for (auto& v : row) v = dist(rng);
  }
  auto world = MakeWorld(LoopbackFactory(), p);
  ASSERT_TRUE(world.ok());
  for (Algorithm a : algo::AlgorithmsFor(algo::Collective::kAllreduce)) {
    std::vector<std::vector<float>> out(p, std::vector<float>(n));
    auto st = RunOnRanks(p, [&](int r) {
      CallOptions o;
      o.algorithm = a;
      return (*world)[r]->Allreduce(in[r].data(), out[r].data(), n, DataType::kFloat32,
                                    ReduceOp::kSum, o);
    });
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      for (int64_t i = 0; i < n; ++i) {
        double exact = 0, mag = 0;
        for (int q = 0; q < p; ++q) {
          exact += in[q][i];
          mag += std::fabs(in[q][i]);
        }
        const double bound = (p - 1) * std::numeric_limits<float>::epsilon() * mag;
        ASSERT_LE(std::fabs(out[r][i] - exact), bound)
            << algo::AlgorithmName(a) << " rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gyre::testing
