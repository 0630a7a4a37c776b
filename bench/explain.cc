#include "bench/explain.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/algo/estimate.h"
#include "core/base/dtype.h"

namespace gyre::bench {
namespace {

double MedianSeconds(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Log2Ceil(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

}  // namespace

StatusOr<algo::CostParams> Calibrate(Comm& comm) {
  using Clock = std::chrono::steady_clock;
  const int p = comm.size();
  algo::CostParams params;
  if (p > 1) {
    // alpha: a dissemination barrier is ceil(log2 p) rounds of one empty message each.
    std::vector<double> t;
    for (int i = 0; i < 205; ++i) {
      const auto t0 = Clock::now();
      GYRE_RETURN_IF_ERROR(comm.Barrier());
      if (i >= 5) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    params.alpha_s = MedianSeconds(t) / Log2Ceil(p);
    // beta: a ring allgather of m bytes per rank is p-1 steps of alpha + m beta.
    const int64_t m = int64_t{4} << 20;
    std::vector<unsigned char> in(m, 1), out(m * p);
    Options ring;
    ring.algorithm = "ring";
    t.clear();
    for (int i = 0; i < 7; ++i) {
      const auto t0 = Clock::now();
      GYRE_RETURN_IF_ERROR(comm.Allgather(in.data(), out.data(), m, DataType::kUint8, ring));
      if (i >= 2) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double step = MedianSeconds(t) / (p - 1);
    params.beta_s_per_byte = std::max(1e-12, (step - params.alpha_s) / static_cast<double>(m));
  }
  // gamma: this rank's reduce kernel on 16 MiB of float32.
  const int64_t n = int64_t{4} << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  GYRE_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(DataType::kFloat32, ReduceOp::kSum));
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    fn(a.data(), b.data(), n);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  params.gamma_s_per_byte = MedianSeconds(t) / (static_cast<double>(n) * sizeof(float));
  return params;
}

std::string DescribeParams(const algo::CostParams& params) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "alpha %.1f us, beta %.2f GB/s, reduce %.2f GB/s",
                params.alpha_s * 1e6, 1e-9 / std::max(1e-15, params.beta_s_per_byte),
                params.gamma_s_per_byte > 0 ? 1e-9 / params.gamma_s_per_byte : 0.0);
  return buf;
}

std::string Explain(const algo::CollectiveSpec& spec, const algo::CostParams& params,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran) {
  const std::vector<algo::Estimate> est = algo::EstimateAlgorithms(spec, params);
  std::ostringstream os;
  char line[200];
  for (const algo::Estimate& e : est) {
    const std::string name = algo::AlgorithmName(e.algorithm);
    auto it = measured_us.find(name);
    if (it != measured_us.end()) {
      std::snprintf(line, sizeof(line),
                    "# explain %lld B  %-20s model %10.1f us  measured %10.1f us\n",
                    static_cast<long long>(spec.count * DataTypeSize(spec.dtype)), name.c_str(),
                    e.seconds * 1e6, it->second);
    } else {
      std::snprintf(line, sizeof(line), "# explain %lld B  %-20s model %10.1f us\n",
                    static_cast<long long>(spec.count * DataTypeSize(spec.dtype)), name.c_str(),
                    e.seconds * 1e6);
    }
    os << line;
  }
  if (est.empty()) return os.str();
  const std::string pick = algo::AlgorithmName(est.front().algorithm);
  std::string best;
  double best_us = 0;
  for (const auto& [name, us] : measured_us) {
    if (name.rfind("auto", 0) == 0) continue;
    if (best.empty() || us < best_us) {
      best = name;
      best_us = us;
    }
  }
  os << "# explain model picks " << pick;
  auto it = measured_us.find(pick);
  if (!best.empty() && it != measured_us.end()) {
    std::snprintf(line, sizeof(line), " (measured %.2fx the best, %s)", it->second / best_us,
                  best.c_str());
    os << line;
  }
  if (!auto_ran.empty()) {
    os << "; auto ran " << auto_ran;
    auto a = measured_us.find("auto");
    if (!best.empty() && a != measured_us.end()) {
      std::snprintf(line, sizeof(line), " (%.2fx the best)", a->second / best_us);
      os << line;
    }
  }
  os << "\n";
  return os.str();
}

}  // namespace gyre::bench
