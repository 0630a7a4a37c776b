#include "bench/bench_common.h"

#include <gtest/gtest.h>

#include <vector>

namespace gyre::bench {
namespace {

TEST(BenchCommonTest, ParsesSizesLikeNcclTests) {
  EXPECT_EQ(*ParseSize("4"), 4);
  EXPECT_EQ(*ParseSize("1K"), 1024);
  EXPECT_EQ(*ParseSize("64M"), 64 << 20);
  EXPECT_EQ(*ParseSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseSize("16kb"), 16 << 10);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("M").ok());
  EXPECT_FALSE(ParseSize("4X").ok());
  EXPECT_EQ(FormatSize(64 << 10), "64 KiB");
  EXPECT_EQ(FormatSize(1000), "1000 B");
}

TEST(BenchCommonTest, SizeSeriesAndLists) {
  EXPECT_EQ(SizeSeries(4, 64, 4), (std::vector<int64_t>{4, 16, 64}));
  EXPECT_EQ(SizeSeries(4, 63, 4), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(SizeSeries(8, 8, 1), (std::vector<int64_t>{8}));
  EXPECT_EQ(*SizesFromFlags("4,64K,1M", "", "", 0), (std::vector<int64_t>{4, 64 << 10, 1 << 20}));
  EXPECT_EQ(*SizesFromFlags("", "1K", "4K", 2), (std::vector<int64_t>{1024, 2048, 4096}));
  EXPECT_FALSE(SizesFromFlags("", "4K", "1K", 2).ok());
  EXPECT_FALSE(SizesFromFlags("4,,8", "", "", 0).ok());
}

TEST(BenchCommonTest, SizesThatOverflowAreRefused) {
  EXPECT_EQ(*ParseSize("1073741824G"), int64_t{1} << 60);  // the largest accepted
  EXPECT_FALSE(ParseSize("1073741825G").ok());
  EXPECT_FALSE(ParseSize("17179869184G").ok());  // 2^64: wrapped to 0 before
  EXPECT_FALSE(ParseSize("999999999999999G").ok());
  StatusOr<std::vector<int64_t>> e = SizesFromFlags("", "3", "999999999999999G", 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("-e 999999999999999G"), std::string::npos) << e.status();
  StatusOr<std::vector<int64_t>> list = SizesFromFlags("4,8589934596G", "", "", 0);
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("--sizes"), std::string::npos) << list.status();
  // A series up to the largest size stops without overflowing.
  EXPECT_EQ(SizeSeries(int64_t{1} << 59, int64_t{1} << 60, 4),
            (std::vector<int64_t>{int64_t{1} << 59}));
}

TEST(BenchCommonTest, SeriesThatCannotGrowIsRefused) {
  for (int64_t f : {1, 0, -2}) {
    StatusOr<std::vector<int64_t>> s = SizesFromFlags("", "4", "64", f);
    ASSERT_FALSE(s.ok()) << f;
    EXPECT_NE(s.status().message().find("-f " + std::to_string(f)), std::string::npos)
        << s.status();
  }
  EXPECT_FALSE(SizesFromFlags("", "0", "64", 4).ok());
  EXPECT_EQ(*SizesFromFlags("", "8", "8", 1), (std::vector<int64_t>{8}));
}

TEST(BenchCommonTest, ShapesFollowNcclConventions) {
  Shape s = ShapeFor(Op::kAllreduce, 1024, 4, 4);
  EXPECT_EQ(s.count, 256);
  EXPECT_EQ(s.bytes, 1024);
  s = ShapeFor(Op::kAllgather, 1024, 4, 4);  // bytes is the output; count each rank's part
  EXPECT_EQ(s.count, 64);
  EXPECT_EQ(s.in_elems, 64);
  EXPECT_EQ(s.out_elems, 256);
  s = ShapeFor(Op::kReduceScatter, 1024, 4, 4);  // bytes is the input
  EXPECT_EQ(s.in_elems, 256);
  EXPECT_EQ(s.out_elems, 64);
  s = ShapeFor(Op::kAllgather, 4, 8, 4);  // too small to split: one element per rank
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.bytes, 32);
  EXPECT_DOUBLE_EQ(BusFactor(Op::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusFactor(Op::kAllgather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Op::kBroadcast, 4), 1.0);
}

// Builds what a correct allreduce / allgather would leave on `rank`, from every rank's input.
std::vector<float> Inputs(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  FillInput(DataType::kFloat32, ReduceOp::kSum, rank, v.data(), n);
  return v;
}

TEST(BenchCommonTest, CheckAcceptsTheRightAnswerAndCountsWrongElements) {
  const int p = 3;
  Shape s = ShapeFor(Op::kAllreduce, 4000, p, 4);
  std::vector<float> sum(static_cast<size_t>(s.out_elems), 0.0f);
  for (int r = 0; r < p; ++r) {
    std::vector<float> in = Inputs(r, s.in_elems);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += in[i];
  }
  EXPECT_EQ(CountWrong(Op::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 1, p, 0, s, sum.data()),
            0);
  sum[7] += 1;
  sum[900] = -1;
  EXPECT_EQ(CountWrong(Op::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 1, p, 0, s, sum.data()),
            2);
  // A broadcast result must be the root's data, not this rank's.
  Shape b = ShapeFor(Op::kBroadcast, 400, p, 4);
  std::vector<float> mine = Inputs(2, b.in_elems);
  EXPECT_GT(CountWrong(Op::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 2, p, 1, b, mine.data()),
            0);
  std::vector<float> roots = Inputs(1, b.in_elems);
  EXPECT_EQ(
      CountWrong(Op::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 2, p, 1, b, roots.data()), 0);
  // Allgather: block q holds rank q's input.
  Shape g = ShapeFor(Op::kAllgather, 1200, p, 4);
  std::vector<float> gathered;
  for (int q = 0; q < p; ++q) {
    std::vector<float> in = Inputs(q, g.in_elems);
    gathered.insert(gathered.end(), in.begin(), in.end());
  }
  EXPECT_EQ(
      CountWrong(Op::kAllgather, DataType::kFloat32, ReduceOp::kSum, 0, p, 0, g, gathered.data()),
      0);
  std::swap(gathered[0], gathered[static_cast<size_t>(g.count)]);
  EXPECT_EQ(
      CountWrong(Op::kAllgather, DataType::kFloat32, ReduceOp::kSum, 0, p, 0, g, gathered.data()),
      2);
}

TEST(BenchCommonTest, InputFollowsItsClosedFormPastManyPeriods) {
  // Element i of rank r is ((7i + 1) mod 1021 + 3r) mod 1021 (8 for 2-byte types); the
  // fill walks the base instead of dividing, so check it well past one period.
  const int64_t n = 5000;
  for (int r : {0, 1, 5}) {
    std::vector<float> v = Inputs(r, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>(((7 * i + 1) % 1021 + 3 * r) % 1021))
          << "rank " << r << " element " << i;
    }
  }
  std::vector<int32_t> prod(100);
  FillInput(DataType::kInt32, ReduceOp::kProd, 2, prod.data(), 100);
  for (int64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(prod[static_cast<size_t>(i)], 1 + ((((7 * i + 1) % 1021) + 6) % 1021 & 1)) << i;
  }
}

TEST(BenchCommonTest, CheckKnowsWhereReduceScatterAndAlltoallBlocksStart) {
  const int p = 3, rank = 2;
  // Reduce-scatter: rank r ends with elements [r c, (r + 1) c) of the sum.
  Shape rs = ShapeFor(Op::kReduceScatter, 3000, p, 4);
  std::vector<float> sum(static_cast<size_t>(rs.in_elems), 0.0f);
  for (int q = 0; q < p; ++q) {
    std::vector<float> in = Inputs(q, rs.in_elems);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += in[i];
  }
  std::vector<float> mine(sum.begin() + rank * rs.count, sum.begin() + (rank + 1) * rs.count);
  EXPECT_EQ(CountWrong(Op::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, rank, p, 0, rs,
                       mine.data()),
            0);
  std::vector<float> first(sum.begin(), sum.begin() + rs.count);
  EXPECT_GT(CountWrong(Op::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, rank, p, 0, rs,
                       first.data()),
            0);
  // Alltoall: block q of rank r's output is block r of rank q's input.
  Shape a = ShapeFor(Op::kAlltoall, 3000, p, 4);
  std::vector<float> got;
  for (int q = 0; q < p; ++q) {
    std::vector<float> in = Inputs(q, a.in_elems);
    got.insert(got.end(), in.begin() + rank * a.count, in.begin() + (rank + 1) * a.count);
  }
  EXPECT_EQ(
      CountWrong(Op::kAlltoall, DataType::kFloat32, ReduceOp::kSum, rank, p, 0, a, got.data()), 0);
  got[static_cast<size_t>(a.count) + 3] += 1;
  EXPECT_EQ(
      CountWrong(Op::kAlltoall, DataType::kFloat32, ReduceOp::kSum, rank, p, 0, a, got.data()), 1);
}

TEST(BenchCommonTest, CheckKnowsWhatGatherAndScatterLeaveWhere) {
  const int p = 3, root = 1;
  // Gather: the root's output is every rank's input in rank order; the others have none.
  Shape g = ShapeFor(Op::kGather, 3000, p, 4);
  EXPECT_EQ(g.in_elems, g.count);
  EXPECT_EQ(g.out_elems, p * g.count);
  EXPECT_EQ(g.bytes, 4 * p * g.count);
  std::vector<float> gathered;
  for (int q = 0; q < p; ++q) {
    std::vector<float> in = Inputs(q, g.in_elems);
    gathered.insert(gathered.end(), in.begin(), in.end());
  }
  EXPECT_EQ(CountWrong(Op::kGather, DataType::kFloat32, ReduceOp::kSum, root, p, root, g,
                       gathered.data()),
            0);
  gathered[static_cast<size_t>(2 * g.count)] += 1;  // rank 2's first element
  EXPECT_EQ(CountWrong(Op::kGather, DataType::kFloat32, ReduceOp::kSum, root, p, root, g,
                       gathered.data()),
            1);
  EXPECT_EQ(
      CountWrong(Op::kGather, DataType::kFloat32, ReduceOp::kSum, 0, p, root, g, gathered.data()),
      0);
  // Scatter: rank r receives block r of the root's input.
  Shape sc = ShapeFor(Op::kScatter, 3000, p, 4);
  EXPECT_EQ(sc.in_elems, p * sc.count);
  EXPECT_EQ(sc.out_elems, sc.count);
  const std::vector<float> root_in = Inputs(root, sc.in_elems);
  for (int rank = 0; rank < p; ++rank) {
    std::vector<float> mine(root_in.begin() + rank * sc.count,
                            root_in.begin() + (rank + 1) * sc.count);
    EXPECT_EQ(CountWrong(Op::kScatter, DataType::kFloat32, ReduceOp::kSum, rank, p, root, sc,
                         mine.data()),
              0);
    // The same block of the rank's own input is wrong (unless the rank is the root).
    const std::vector<float> own = Inputs(rank, sc.in_elems);
    std::vector<float> wrong(own.begin() + rank * sc.count, own.begin() + (rank + 1) * sc.count);
    EXPECT_EQ(CountWrong(Op::kScatter, DataType::kFloat32, ReduceOp::kSum, rank, p, root, sc,
                         wrong.data()) > 0,
              rank != root);
  }
  EXPECT_DOUBLE_EQ(BusFactor(Op::kGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(Op::kScatter, 4), 0.75);
  EXPECT_EQ(*ParseOp("gather"), Op::kGather);
  EXPECT_EQ(*ParseOp("scatter"), Op::kScatter);
}

TEST(BenchCommonTest, IterationCountIsClamped) {
  EXPECT_EQ(IterationsFor(1e-6, 0.25), 1000);
  EXPECT_EQ(IterationsFor(0.01, 0.25), 25);
  EXPECT_EQ(IterationsFor(0.2, 0.25), 5);
  EXPECT_EQ(IterationsFor(0, 0.25), 1000);
  // N follows the typical warm-up, not an outlier: Gloo's bimodal small cells.
  EXPECT_DOUBLE_EQ(TypicalWarmup({3.6e-3, 62e-6, 3.5e-3, 3.7e-3, 3.6e-3}), 3.6e-3);
  EXPECT_DOUBLE_EQ(TypicalWarmup({0.2, 0.1}), 0.1);
  EXPECT_DOUBLE_EQ(TypicalWarmup({0.3}), 0.3);
  EXPECT_EQ(TypicalWarmup({}), 0);
  EXPECT_EQ(IterationsFor(TypicalWarmup({3.6e-3, 62e-6, 3.5e-3, 3.7e-3, 3.6e-3}), 0.25), 69);
  EXPECT_EQ(DefaultWarmups(1 << 20), 5);
  EXPECT_EQ(DefaultWarmups((1 << 20) + 1), 2);
}

TEST(BenchCommonTest, JsonLineHasBenchFormat) {
  Result r;
  r.impl = "gyre";
  r.algo = "ring";
  r.op = Op::kAllreduce;
  r.ranks = 4;
  r.bytes = 1048576;
  r.wrong = 0;
  Summarise({0.0015301, 0.0014901, 0.0017029, 0.0015307}, BusFactor(Op::kAllreduce, 4), &r);
  EXPECT_EQ(ToJsonLine(r),
            "{\"impl\": \"gyre\", \"algo\": \"ring\", \"op\": \"allreduce\", \"ranks\": 4, "
            "\"bytes\": 1048576, \"dtype\": \"float32\", \"iters\": 4, \"min_us\": 1490.1, "
            "\"median_us\": 1530.4, \"max_us\": 1702.9, \"algbw_GBps\": 0.685, "
            "\"busbw_GBps\": 1.028, \"ok\": true}");
  r.wrong = -1;
  EXPECT_NE(ToJsonLine(r).find("\"ok\": null}"), std::string::npos);
}

}  // namespace
}  // namespace gyre::bench
