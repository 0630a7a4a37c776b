// Gradient fusion and overlap, measured under gyrerun:
//   build/bin/gyrerun -n 2 --mode embedded -- build/bin/gyre-example-fusion
// Part 1: 1000 tensors of 4 KiB reduced one call each, then through a Bucketer (25 MiB
// buckets); both results checked exactly. Part 2: a "backward pass" of L layers, each some
// real arithmetic and then a gradient of G bytes; reduced after the pass (no overlap) or
// bucket by bucket while later layers compute (overlap). Rank 0 prints medians.
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "client/include/gyre/buckets.h"
#include "client/include/gyre/gyre.h"
#include "core/base/tool_flags.h"

DEFINE_int32(tensors, 1000, "part 1: number of small tensors");
DEFINE_int64(tensor_bytes, 4096, "part 1: bytes per tensor");
DEFINE_int64(bucket_bytes, gyre::Bucketer::kDefaultBucketBytes, "part 1: bucket size");
DEFINE_int32(layers, 16, "part 2: layers in the backward pass");
DEFINE_int64(grad_bytes, 1 << 20, "part 2: gradient bytes per layer");
DEFINE_int64(overlap_bucket_bytes, 4 << 20, "part 2: bucket size");
DEFINE_int32(compute_passes, 40, "part 2: arithmetic passes over the gradient per layer");
DEFINE_int32(iters, 7, "timed repetitions of each variant (median reported)");

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Values whose sum over ranks is exact in float32: small integers.
void Fill(std::vector<float>& t, int rank, int index) {
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>((rank + 1) * (index + i % 7));
}

bool Check(const std::vector<float>& t, int p, int index) {
  const float scale = static_cast<float>(p * (p + 1) / 2);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != scale * static_cast<float>(index + i % 7)) return false;
  }
  return true;
}

// Stands in for a layer's backward computation: real arithmetic over the gradient.
void Compute(std::vector<float>& g, int passes) {
  for (int k = 0; k < passes; ++k) {
    for (float& x : g) x = x * 0.999f + 0.001f;
  }
}

// The flags are checked before anything is allocated or joined: a negative count would size
// a vector with a huge number, and 0 bytes or 0 iterations would report a meaningless ratio.
// Returns what is wrong ("" when nothing is).
std::string BadFlag() {
  constexpr int64_t kMaxBytes = int64_t{1} << 30;  // per tensor, gradient or bucket
  constexpr int64_t kMaxHeld = int64_t{4} << 30;   // all of part 1's tensors, or part 2's
  auto count = [](const char* flag, int64_t v, int64_t most, const char* what) -> std::string {
    if (v >= 1 && v <= most) return "";
    return std::string("--") + flag + " " + std::to_string(v) + ": want a number of " + what +
           " from 1 to " + std::to_string(most);
  };
  auto bytes = [](const char* flag, int64_t v) -> std::string {
    if (v >= 4 && v <= kMaxBytes && v % 4 == 0) return "";
    return std::string("--") + flag + " " + std::to_string(v) + ": want a byte count from 4 to " +
           std::to_string(kMaxBytes) + ", a multiple of 4 (the elements are float32)";
  };
  for (const std::string& e :
       {count("tensors", FLAGS_tensors, 1000000, "tensors"),
        bytes("tensor_bytes", FLAGS_tensor_bytes), bytes("bucket_bytes", FLAGS_bucket_bytes),
        count("layers", FLAGS_layers, 100000, "layers"), bytes("grad_bytes", FLAGS_grad_bytes),
        bytes("overlap_bucket_bytes", FLAGS_overlap_bucket_bytes),
        count("iters", FLAGS_iters, 1000000, "repetitions")}) {
    if (!e.empty()) return e;
  }
  if (FLAGS_compute_passes < 0 || FLAGS_compute_passes > 1000000) {
    return "--compute_passes " + std::to_string(FLAGS_compute_passes) +
           ": want a number of passes from 0 to 1000000";
  }
  if (FLAGS_tensors * FLAGS_tensor_bytes > kMaxHeld) {
    return "--tensors " + std::to_string(FLAGS_tensors) + " of --tensor_bytes " +
           std::to_string(FLAGS_tensor_bytes) + " hold more than " + std::to_string(kMaxHeld) +
           " bytes";
  }
  if (FLAGS_layers * FLAGS_grad_bytes > kMaxHeld) {
    return "--layers " + std::to_string(FLAGS_layers) + " of --grad_bytes " +
           std::to_string(FLAGS_grad_bytes) + " hold more than " + std::to_string(kMaxHeld) +
           " bytes";
  }
  return "";
}

int Fail(int rank, const gyre::Status& s) {
  std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "one rank of the gradient fusion and overlap measurement; run it under "
                       "gyrerun:\n"
                       "  gyrerun -n 2 --mode embedded -- gyre-example-fusion [--tensors 1000] "
                       "[--layers 16]");
  const std::string bad = argc > 1 ? std::string("unexpected argument '") + argv[1] +
                                         "': gyre-example-fusion takes flags only"
                                   : BadFlag();
  if (!bad.empty()) {
    std::fprintf(stderr, "gyre-example-fusion: %s\n", bad.c_str());
    return 2;
  }
  auto comm_or = gyre::Comm::FromEnvironment();
  if (!comm_or.ok()) return Fail(-1, comm_or.status());
  gyre::Comm& comm = **comm_or;
  const int p = comm.size(), r = comm.rank();
  const int64_t n = FLAGS_tensor_bytes / 4;

  // Part 1: fusion.
  std::vector<std::vector<float>> tensors(FLAGS_tensors, std::vector<float>(n));
  std::vector<double> single, fused;
  int64_t fused_calls = 0;
  bool exact = true;
  // As in a training loop, one Bucketer serves every step: its bucket memory is allocated
  // in the first step and reused after.
  gyre::Bucketer bucketer(&comm, gyre::DataType::kFloat32, gyre::ReduceOp::kSum,
                          FLAGS_bucket_bytes);
  for (int it = 0; it < FLAGS_iters; ++it) {
    for (int t = 0; t < FLAGS_tensors; ++t) Fill(tensors[t], r, t);
    gyre::Status b = comm.Barrier();
    if (!b.ok()) return Fail(r, b);
    auto t0 = Clock::now();
    for (int t = 0; t < FLAGS_tensors; ++t) {
      gyre::Status s = comm.Allreduce(tensors[t].data(), tensors[t].data(), n,
                                      gyre::DataType::kFloat32, gyre::ReduceOp::kSum);
      if (!s.ok()) return Fail(r, s);
    }
    single.push_back(Ms(t0, Clock::now()));
    for (int t = 0; t < FLAGS_tensors; ++t) exact = exact && Check(tensors[t], p, t);

    for (int t = 0; t < FLAGS_tensors; ++t) Fill(tensors[t], r, t);
    b = comm.Barrier();
    if (!b.ok()) return Fail(r, b);
    t0 = Clock::now();
    const int64_t calls_before = bucketer.calls();
    for (int t = 0; t < FLAGS_tensors; ++t) {
      gyre::Status s = bucketer.Add(tensors[t].data(), n);
      if (!s.ok()) return Fail(r, s);
    }
    gyre::Status s = bucketer.Flush();
    if (!s.ok()) return Fail(r, s);
    fused.push_back(Ms(t0, Clock::now()));
    fused_calls = bucketer.calls() - calls_before;
    for (int t = 0; t < FLAGS_tensors; ++t) exact = exact && Check(tensors[t], p, t);
  }

  // Part 2: overlap.
  const int64_t gn = FLAGS_grad_bytes / 4;
  std::vector<std::vector<float>> grads(FLAGS_layers, std::vector<float>(gn));
  std::vector<double> serial, overlapped;
  gyre::Bucketer layer_buckets(&comm, gyre::DataType::kFloat32, gyre::ReduceOp::kSum,
                               FLAGS_overlap_bucket_bytes);
  for (int it = 0; it < FLAGS_iters; ++it) {
    for (int variant = 0; variant < 2; ++variant) {
      for (int l = 0; l < FLAGS_layers; ++l) Fill(grads[l], r, l);
      gyre::Status b = comm.Barrier();
      if (!b.ok()) return Fail(r, b);
      const auto t0 = Clock::now();
      gyre::Bucketer& bucketer = layer_buckets;
      // The arithmetic runs on a copy so the values reduced stay checkable.
      std::vector<float> work(gn);
      for (int l = FLAGS_layers - 1; l >= 0; --l) {
        std::copy(grads[l].begin(), grads[l].end(), work.begin());
        Compute(work, FLAGS_compute_passes);
        if (variant == 1) {
          gyre::Status s = bucketer.Add(grads[l].data(), gn);
          if (!s.ok()) return Fail(r, s);
        }
      }
      if (variant == 0) {
        for (int l = FLAGS_layers - 1; l >= 0; --l) {
          gyre::Status s = bucketer.Add(grads[l].data(), gn);
          if (!s.ok()) return Fail(r, s);
        }
      }
      gyre::Status s = bucketer.Flush();
      if (!s.ok()) return Fail(r, s);
      (variant == 0 ? serial : overlapped).push_back(Ms(t0, Clock::now()));
      for (int l = 0; l < FLAGS_layers; ++l) exact = exact && Check(grads[l], p, l);
    }
  }

  if (r == 0) {
    std::printf(
        "fusion: %d tensors of %lld B on %d ranks (%s): one allreduce each %.2f ms, "
        "bucketed into %lld calls %.2f ms: %.1fx\n",
        FLAGS_tensors, static_cast<long long>(FLAGS_tensor_bytes), p, comm.mode().c_str(),
        Median(single), static_cast<long long>(fused_calls), Median(fused),
        Median(single) / Median(fused));
    std::printf(
        "overlap: %d layers of %lld B gradient: reduce after the backward pass %.2f ms, "
        "buckets while computing %.2f ms: %.2fx\n",
        FLAGS_layers, static_cast<long long>(FLAGS_grad_bytes), Median(serial), Median(overlapped),
        Median(serial) / Median(overlapped));
  }
  if (gyre::Status closed = comm.Close(); !closed.ok()) return Fail(r, closed);
  std::printf("rank %d: %s\n", r, exact ? "fusion results exact" : "WRONG RESULTS");
  return exact ? 0 : 1;
}
