// Google Benchmark of the reduction kernels: GB/s of dst[i] = op(dst[i], src[i]) against a
// plain memcpy of the same size. Bytes counted are the output buffer's (one pass).
//   build/tests/gyre-kernel-bench --benchmark_filter=64M
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/base/dtype.h"

namespace {

constexpr size_t kBytes = size_t{64} << 20;

void BM_Memcpy(benchmark::State& state) {
  std::vector<unsigned char> a(kBytes, 1), b(kBytes, 2);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), kBytes);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}
BENCHMARK(BM_Memcpy)->Name("memcpy/64M")->Unit(benchmark::kMillisecond);

void BM_Reduce(benchmark::State& state, gyre::DataType dtype, gyre::ReduceOp op) {
  const size_t n = kBytes / gyre::DataTypeSize(dtype);
  std::vector<unsigned char> a(kBytes, 1), b(kBytes, 1);
  gyre::ReduceFn fn = *gyre::GetReduceFn(dtype, op);
  for (auto _ : state) {
    fn(a.data(), b.data(), n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}
BENCHMARK_CAPTURE(BM_Reduce, float32_sum, gyre::DataType::kFloat32, gyre::ReduceOp::kSum)
    ->Name("reduce/float32/sum/64M")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, float32_max, gyre::DataType::kFloat32, gyre::ReduceOp::kMax)
    ->Name("reduce/float32/max/64M")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, float64_sum, gyre::DataType::kFloat64, gyre::ReduceOp::kSum)
    ->Name("reduce/float64/sum/64M")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, int32_sum, gyre::DataType::kInt32, gyre::ReduceOp::kSum)
    ->Name("reduce/int32/sum/64M")
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_sum, gyre::DataType::kBfloat16, gyre::ReduceOp::kSum)
    ->Name("reduce/bfloat16/sum/64M")
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
