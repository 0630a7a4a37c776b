// Data-parallel SGD on a toy linear model, y = w.x + b, with gyre averaging the gradient.
// Every rank holds its own shard of a synthetic data set, computes the gradient of the mean
// squared error on that shard, and allreduces it (sum, then divide by the global sample
// count). Rank 0 also trains the same model on the whole data set in one process and checks,
// every step, that the averaged gradient and the weights match it.
//
//   build/bin/gyrerun -n 4 -- build/bin/gyre-example-sgd [--steps 50] [--samples_per_rank 256]
#include <gflags/gflags.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "client/include/gyre/gyre.h"
#include "core/base/tool_flags.h"

DEFINE_int32(steps, 50, "training steps, one gradient allreduce each (1 to 1000000)");
DEFINE_int32(samples_per_rank, 256, "samples in each rank's shard of the data set (1 to 100000)");

namespace {

constexpr int kFeatures = 8;
constexpr double kLearningRate = 0.05;
constexpr int kMaxSteps = 1000000;
// Rank 0 also trains on the whole data set, p shards, every step: at a million per shard and
// a few hundred ranks that took longer than the others wait for a call.
constexpr int kMaxSamplesPerRank = 100000;

// The flags are checked before the job is joined, so a bad value costs no rank a job.
// Returns what is wrong ("" when nothing is).
std::string BadFlag() {
  if (FLAGS_steps < 1 || FLAGS_steps > kMaxSteps) {
    return "--steps " + std::to_string(FLAGS_steps) + ": want a number of steps from 1 to " +
           std::to_string(kMaxSteps);
  }
  if (FLAGS_samples_per_rank < 1 || FLAGS_samples_per_rank > kMaxSamplesPerRank) {
    return "--samples_per_rank " + std::to_string(FLAGS_samples_per_rank) +
           ": want a number of samples from 1 to " + std::to_string(kMaxSamplesPerRank);
  }
  return "";
}

// Sample i of the global data set: deterministic, so every rank can rebuild any shard.
void Sample(int64_t i, double* x, double* y) {
  double target = 0.5;
  for (int f = 0; f < kFeatures; ++f) {
    x[f] = std::sin(0.37 * i + 1.3 * f);
    target += (f + 1) * 0.25 * x[f];
  }
  *y = target + 0.01 * std::cos(11.0 * i);
}

// Gradient of sum((w.x + b - y)^2) / 2 over samples [begin, end), written to g (w then b).
void Gradient(const std::vector<double>& w, int64_t begin, int64_t end, std::vector<double>* g) {
  g->assign(kFeatures + 1, 0.0);
  double x[kFeatures], y;
  for (int64_t i = begin; i < end; ++i) {
    Sample(i, x, &y);
    double pred = w[kFeatures];
    for (int f = 0; f < kFeatures; ++f) pred += w[f] * x[f];
    const double err = pred - y;
    for (int f = 0; f < kFeatures; ++f) (*g)[f] += err * x[f];
    (*g)[kFeatures] += err;
  }
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "one rank of a data-parallel SGD example, checked against single-process "
                       "training; run it under gyrerun:\n"
                       "  gyrerun -n 4 -- gyre-example-sgd [--steps 50] [--samples_per_rank 256]");
  const std::string bad = argc > 1 ? std::string("unexpected argument '") + argv[1] +
                                         "': gyre-example-sgd takes flags only"
                                   : BadFlag();
  if (!bad.empty()) {
    std::fprintf(stderr, "gyre-example-sgd: %s\n", bad.c_str());
    return 2;
  }
  auto comm_or = gyre::Comm::FromEnvironment();
  if (!comm_or.ok()) {
    std::fprintf(stderr, "sgd: %s\n", comm_or.status().ToString().c_str());
    return 2;
  }
  gyre::Comm& comm = **comm_or;
  const int p = comm.size();
  const int r = comm.rank();
  const int64_t per_rank = FLAGS_samples_per_rank;
  const int64_t total = per_rank * p;
  std::vector<double> w(kFeatures + 1, 0.0), w_single(kFeatures + 1, 0.0);
  std::vector<double> grad, grad_sum(kFeatures + 1), grad_single;
  double worst = 0;
  for (int step = 0; step < FLAGS_steps; ++step) {
    Gradient(w, r * per_rank, (r + 1) * per_rank, &grad);
    gyre::Status s = comm.Allreduce(grad.data(), grad_sum.data(), kFeatures + 1,
                                    gyre::DataType::kFloat64, gyre::ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "sgd rank %d step %d: %s\n", r, step, s.ToString().c_str());
      return 1;
    }
    for (int f = 0; f <= kFeatures; ++f) w[f] -= kLearningRate * grad_sum[f] / total;
    if (r == 0) {
      // The same step on the whole data set, in this process alone.
      Gradient(w_single, 0, total, &grad_single);
      for (int f = 0; f <= kFeatures; ++f) {
        w_single[f] -= kLearningRate * grad_single[f] / total;
        worst = std::max(worst, std::fabs(w_single[f] - w[f]));
      }
    }
  }
  double x[kFeatures], y, loss = 0;
  for (int64_t i = 0; i < total; ++i) {
    Sample(i, x, &y);
    double pred = w[kFeatures];
    for (int f = 0; f < kFeatures; ++f) pred += w[f] * x[f];
    loss += (pred - y) * (pred - y) / total;
  }
  // The end of this rank's part: a barrier that would also report a last call the ranks made
  // differently (Comm::Close).
  if (gyre::Status closed = comm.Close(); !closed.ok()) {
    std::fprintf(stderr, "sgd: rank %d: %s\n", r, closed.ToString().c_str());
    return 1;
  }
  if (r == 0) {
    // Sums of p partial gradients in another order than the single process: the weights
    // may differ only by rounding, bounded here by 1e-9.
    const bool ok = worst <= 1e-9;
    std::printf(
        "sgd: %d ranks x %lld samples, %d steps, loss %.6f, max |w - w_single| = %.3g: %s\n", p,
        static_cast<long long>(per_rank), FLAGS_steps, loss, worst,
        ok ? "matches single-process training" : "MISMATCH");
    return ok ? 0 : 1;
  }
  return 0;
}
