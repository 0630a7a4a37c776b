#include "bench/explain.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "core/algo/estimate.h"
#include "core/base/dtype.h"

namespace gyre::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MedianSeconds(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Log2Ceil(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

// Median over `iters` timed calls (after `warmup`) of the slowest rank's time: every
// iteration starts from a barrier and the per-rank times are maxed over ranks at the end.
// With `until_all_done` the clock stops after a second barrier, so a rank that waited for
// a core is counted (the caller subtracts one barrier).
StatusOr<double> TimeCollective(Comm& comm, int warmup, int iters,
                                const std::function<Status()>& call, bool until_all_done = false) {
  std::vector<double> t;
  for (int i = 0; i < warmup + iters; ++i) {
    GYRE_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = Clock::now();
    GYRE_RETURN_IF_ERROR(call());
    if (until_all_done) GYRE_RETURN_IF_ERROR(comm.Barrier());
    if (i >= warmup) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  GYRE_RETURN_IF_ERROR(comm.Allreduce(t.data(), t.data(), static_cast<int64_t>(t.size()),
                                      DataType::kFloat64, ReduceOp::kMax));
  return MedianSeconds(t);
}

std::string Us(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s * 1e6);
  return buf;
}

}  // namespace

namespace {

StatusOr<algo::MachinePoint> CalibrateOnce(Comm& comm) {
  const int p = comm.size();
  algo::MachinePoint m;
  m.world_size = p;
  double barrier_s = 0;
  if (p > 1) {
    // A dissemination barrier is L = ceil(log2 p) rounds of one send and one receive per
    // rank: L alpha + 2L o. A direct allreduce of 4 B is one round of p-1 sends and p-1
    // receives per rank: alpha + 2(p-1) o. Two ranks cannot tell o from alpha (o = 0).
    const int L = Log2Ceil(p);
    // Named: `auto` may choose another barrier, and these formulas are dissemination's.
    Options dissemination;
    dissemination.algorithm = "dissemination";
    GYRE_ASSIGN_OR_RETURN(const double barrier, TimeCollective(comm, 20, 300, [&] {
                            return comm.Barrier(dissemination);
                          }));
    barrier_s = barrier;
    const double round = barrier / L;
    double overhead = 0;
    if (p > 2) {
      float in = 1, out = 0;
      Options direct;
      direct.algorithm = "direct";
      GYRE_ASSIGN_OR_RETURN(const double d, TimeCollective(comm, 20, 300, [&] {
                              return comm.Allreduce(&in, &out, 1, DataType::kFloat32,
                                                    ReduceOp::kSum, direct);
                            }));
      overhead = std::clamp((d - round) / (2.0 * (p - 2)), 0.0, 0.4 * round);
    }
    m.overhead_s = overhead;
    m.alpha_s = round - 2 * overhead;
    // Bandwidth from slopes between two sizes, so latency and overhead drop out. One rank
    // sending while the others wait: an unsegmented chain broadcast is p-1 hops one after
    // the other. Every rank sending at once: a ring allgather is p-1 steps of one message
    // from every rank.
    const int64_t small = 256 << 10, large = 2 << 20;
    std::vector<unsigned char> in(large, 1), out(large * p);
    auto slope = [&](const char* algorithm, bool broadcast) -> StatusOr<double> {
      Options o;
      o.algorithm = algorithm;
      double t[2];
      for (int i = 0; i < 2; ++i) {
        const int64_t bytes = i == 0 ? small : large;
        GYRE_ASSIGN_OR_RETURN(
            t[i], TimeCollective(comm, 3, 15, [&]() -> Status {
              if (broadcast) {
                return comm.Broadcast(out.data(), out.data(), bytes, DataType::kUint8, 0, o);
              }
              return comm.Allgather(in.data(), out.data(), bytes, DataType::kUint8, o);
            }));
      }
      // A load spike can leave the slope meaningless; the large size's mean rate bounds it.
      const double s = (t[1] - t[0]) / ((p - 1) * static_cast<double>(large - small));
      const double mean = t[1] / ((p - 1) * static_cast<double>(large));
      return s > 0.2 * mean && s < mean ? s : mean;
    };
    GYRE_ASSIGN_OR_RETURN(m.beta_s_per_byte, slope("chain", true));
    GYRE_ASSIGN_OR_RETURN(m.beta_all_s_per_byte, slope("ring", false));
  } else {
    m.alpha_s = 0;
    m.beta_s_per_byte = 1e-12;
  }
  // Reduction and copy rates on chunk-sized buffers (2 MiB), by rank 0 alone and by every
  // rank at once (the ranks share the cores).
  const int64_t n = int64_t{512} << 10;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  GYRE_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(DataType::kFloat32, ReduceOp::kSum));
  const int rank = comm.rank();
  const double bytes = static_cast<double>(n) * sizeof(float);
  auto rate = [&](bool alone, bool reduce) {
    return TimeCollective(
        comm, 3, 15,
        [&] {
          if (alone && rank != 0) return Status::Ok();
          if (reduce) {
            fn(a.data(), b.data(), n);
          } else {
            std::memcpy(a.data(), b.data(), n * sizeof(float));
          }
          return Status::Ok();
        },
        !alone);
  };
  GYRE_ASSIGN_OR_RETURN(const double reduce_alone, rate(true, true));
  GYRE_ASSIGN_OR_RETURN(const double copy_alone, rate(true, false));
  GYRE_ASSIGN_OR_RETURN(const double reduce_all, rate(false, true));
  GYRE_ASSIGN_OR_RETURN(const double copy_all, rate(false, false));
  m.gamma_s_per_byte = reduce_alone / bytes;
  m.delta_s_per_byte = copy_alone / bytes;
  m.gamma_all_s_per_byte = std::max(reduce_alone, reduce_all - barrier_s) / bytes;
  m.delta_all_s_per_byte = std::max(copy_alone, copy_all - barrier_s) / bytes;
  return m;
}

}  // namespace

StatusOr<algo::MachinePoint> Calibrate(Comm& comm, int runs) {
  std::vector<algo::MachinePoint> all;
  for (int i = 0; i < std::max(1, runs); ++i) {
    GYRE_ASSIGN_OR_RETURN(algo::MachinePoint m, CalibrateOnce(comm));
    all.push_back(m);
  }
  // Each parameter's median over the runs: one load spike moves one run, not the result.
  algo::MachinePoint out = all.front();
  for (double algo::MachinePoint::*field :
       {&algo::MachinePoint::alpha_s, &algo::MachinePoint::overhead_s,
        &algo::MachinePoint::beta_s_per_byte, &algo::MachinePoint::gamma_s_per_byte,
        &algo::MachinePoint::delta_s_per_byte, &algo::MachinePoint::beta_all_s_per_byte,
        &algo::MachinePoint::gamma_all_s_per_byte, &algo::MachinePoint::delta_all_s_per_byte}) {
    std::vector<double> v;
    for (const algo::MachinePoint& m : all) v.push_back(m.*field);
    out.*field = MedianSeconds(v);
  }
  return out;
}

std::string DescribeParams(const algo::CostParams& params) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "alpha %.1f us, beta %.2f GB/s, reduce %.2f GB/s",
                params.alpha_s * 1e6, 1e-9 / std::max(1e-15, params.beta_s_per_byte),
                params.gamma_s_per_byte > 0 ? 1e-9 / params.gamma_s_per_byte : 0.0);
  return buf;
}

std::string Explain(const algo::CollectiveSpec& spec, const algo::MachineModel& model,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran) {
  const std::vector<algo::Estimate> est = algo::RankCandidates(spec, model);
  const long long bytes = static_cast<long long>(spec.count * DataTypeSize(spec.dtype));
  std::ostringstream os;
  char line[320];
  for (const algo::Estimate& e : est) {
    const std::string name = algo::AlgorithmName(e.algorithm);
    auto it = measured_us.find(name);
    std::snprintf(line, sizeof(line), "# explain %lld B  %-20s model %10.1f us", bytes,
                  name.c_str(), e.seconds * 1e6);
    os << line;
    if (it != measured_us.end()) {
      std::snprintf(line, sizeof(line), "  measured %10.1f us", it->second);
      os << line;
    }
    os << "  (max(walk " << Us(e.walk_s) << ", work " << Us(e.throughput_s) << ") + overhead "
       << Us(e.overhead_s) << " us; " << e.rounds << " rounds, " << e.max_msgs << " msgs, "
       << e.max_bytes << " B on the busiest rank)\n";
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
  os << "# explain why: " << algo::ExplainChoice(spec, model, est) << "\n";
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

std::string Explain(const algo::CollectiveSpec& spec, const algo::CostParams& params,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran) {
  algo::MachineModel model;
  model.source = "given parameters";
  model.points = {algo::MachinePoint{spec.world_size, params.alpha_s, 0, params.beta_s_per_byte,
                                     params.gamma_s_per_byte, params.delta_s_per_byte}};
  return Explain(spec, model, measured_us, auto_ran);
}

}  // namespace gyre::bench
