// Data-parallel SGD on a toy linear model, y = w.x + b, with gyre averaging the gradient.
// Every rank holds its own shard of a synthetic data set, computes the gradient of the mean
// squared error on that shard, and allreduces it (sum, then divide by the global sample
// count). Rank 0 also trains the same model on the whole data set in one process and checks,
// every step, that the averaged gradient and the weights match it.
//
//   build/bin/gyrerun -n 4 -- build/bin/gyre-example-sgd
#include <cmath>
#include <cstdio>
#include <vector>

#include "client/include/gyre/gyre.h"

namespace {

constexpr int kFeatures = 8;
constexpr int kSamplesPerRank = 256;
constexpr int kSteps = 50;
constexpr double kLearningRate = 0.05;

// Sample i of the global data set: deterministic, so every rank can rebuild any shard.
void Sample(int i, double* x, double* y) {
  double target = 0.5;
  for (int f = 0; f < kFeatures; ++f) {
    x[f] = std::sin(0.37 * i + 1.3 * f);
    target += (f + 1) * 0.25 * x[f];
  }
  *y = target + 0.01 * std::cos(11.0 * i);
}

// Gradient of sum((w.x + b - y)^2) / 2 over samples [begin, end), written to g (w then b).
void Gradient(const std::vector<double>& w, int begin, int end, std::vector<double>* g) {
  g->assign(kFeatures + 1, 0.0);
  double x[kFeatures], y;
  for (int i = begin; i < end; ++i) {
    Sample(i, x, &y);
    double pred = w[kFeatures];
    for (int f = 0; f < kFeatures; ++f) pred += w[f] * x[f];
    const double err = pred - y;
    for (int f = 0; f < kFeatures; ++f) (*g)[f] += err * x[f];
    (*g)[kFeatures] += err;
  }
}

}  // namespace

int main() {
  auto comm_or = gyre::Comm::FromEnvironment();
  if (!comm_or.ok()) {
    std::fprintf(stderr, "sgd: %s\n", comm_or.status().ToString().c_str());
    return 2;
  }
  gyre::Comm& comm = **comm_or;
  const int p = comm.size();
  const int r = comm.rank();
  const int total = kSamplesPerRank * p;
  std::vector<double> w(kFeatures + 1, 0.0), w_single(kFeatures + 1, 0.0);
  std::vector<double> grad, grad_sum(kFeatures + 1), grad_single;
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    Gradient(w, r * kSamplesPerRank, (r + 1) * kSamplesPerRank, &grad);
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
  for (int i = 0; i < total; ++i) {
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
    std::printf("sgd: %d ranks x %d samples, %d steps, loss %.6f, max |w - w_single| = %.3g: %s\n",
                p, kSamplesPerRank, kSteps, loss, worst,
                ok ? "matches single-process training" : "MISMATCH");
    return ok ? 0 : 1;
  }
  return 0;
}
