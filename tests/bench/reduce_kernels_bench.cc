// Google Benchmark of the reduction kernels: GB/s of dst[i] = op(dst[i], src[i]) against a
// plain memcpy of the same size, in cache (64 KiB) and from memory (64 MiB), for each build
// of the kernels this CPU runs (baseline x86-64 and AVX2). Bytes counted are the output
// buffer's (one pass). The buffers hold ordinary values near 1 (no denormals, no NaN).
//   build/bin/gyre-kernel-bench --benchmark_filter=64M
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/reduce_kernels.h"

namespace {

constexpr size_t kSizes[] = {size_t{64} << 10, size_t{64} << 20};

std::string SizeName(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + "M"
                                    : std::to_string(bytes >> 10) + "K";
}

void BM_Memcpy(benchmark::State& state, size_t bytes) {
  std::vector<unsigned char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), bytes);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_Reduce(benchmark::State& state, gyre::DataType t, gyre::ReduceOp op, gyre::KernelIsa isa,
               size_t bytes) {
  const size_t n = bytes / gyre::DataTypeSize(t);
  std::vector<unsigned char> a(bytes), b(bytes);
  for (size_t i = 0; i < n; ++i) {
    gyre::StoreFromDouble(t, a.data(), i, 1.0 + static_cast<double>(i % 100) / 100);
    gyre::StoreFromDouble(t, b.data(), i, static_cast<double>(i % 7) / 1000);
  }
  gyre::ReduceFn fn = *gyre::GetReduceFnFor(t, op, isa);
  for (auto _ : state) {
    fn(a.data(), b.data(), n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

const int kRegistered = [] {
  using gyre::DataType;
  using gyre::ReduceOp;
  const std::pair<DataType, ReduceOp> cases[] = {
      {DataType::kFloat32, ReduceOp::kSum},  {DataType::kFloat32, ReduceOp::kMax},
      {DataType::kFloat64, ReduceOp::kSum},  {DataType::kInt32, ReduceOp::kSum},
      {DataType::kBfloat16, ReduceOp::kSum}, {DataType::kBfloat16, ReduceOp::kMax},
      {DataType::kFloat16, ReduceOp::kSum},  {DataType::kFloat16, ReduceOp::kMax}};
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("memcpy/" + SizeName(bytes)).c_str(), BM_Memcpy, bytes)
        ->Unit(benchmark::kMicrosecond);
    for (gyre::KernelIsa isa : {gyre::KernelIsa::kBaseline, gyre::KernelIsa::kAvx2}) {
      if (!gyre::KernelIsaAvailable(isa)) continue;
      for (const auto& [t, op] : cases) {
        const std::string name = std::string("reduce/") + gyre::DataTypeName(t) + "/" +
                                 gyre::ReduceOpName(op) + "/" + gyre::KernelIsaName(isa) + "/" +
                                 SizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), BM_Reduce, t, op, isa, bytes)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
