#include "core/algo/estimate.h"

#include <algorithm>
#include <vector>

#include "core/algo/builders.h"

namespace gyre::algo {

StatusOr<Estimate> EstimateAlgorithm(const CollectiveSpec& spec, const CostParams& params,
                                     const SharedCosts& shared) {
  GYRE_RETURN_IF_ERROR(ValidateSpec(spec));
  GYRE_ASSIGN_OR_RETURN(Schedule schedule, BuildSchedule(spec));
  GYRE_ASSIGN_OR_RETURN(ScheduleCost cost, CostOf(schedule, params));
  const int64_t elem = static_cast<int64_t>(DataTypeSize(spec.dtype));
  Estimate e;
  e.algorithm = spec.algorithm;
  e.walk_s = cost.time_s;
  // Each core's share of the work: ranks sit on core r mod cores (how gyre-bench --pin
  // places them), so a pattern that keeps only even ranks busy runs on one core.
  const int p = static_cast<int>(cost.ranks.size());
  const int cores = shared.cores > 0 ? std::min(shared.cores, p) : p;
  std::vector<double> core_work(std::max(1, cores), 0.0);
  std::vector<int64_t> core_msgs(core_work.size(), 0);
  for (int q = 0; q < p; ++q) {
    const RankCost& r = cost.ranks[q];
    // A byte costs CPU on both sides; the rate was measured with every rank sending and
    // receiving the same bytes, so each side is charged half.
    const double moved =
        0.5 * static_cast<double>((r.traffic.elems_sent + r.traffic.elems_recv) * elem);
    core_work[q % core_work.size()] +=
        moved * shared.beta_all_s_per_byte +
        static_cast<double>(r.elems_reduced * elem) * shared.gamma_all_s_per_byte +
        static_cast<double>(r.elems_copied * elem) * shared.delta_all_s_per_byte;
    e.rounds = std::max(e.rounds, r.rounds);
    e.max_msgs = std::max(e.max_msgs, r.traffic.msgs_sent + r.traffic.msgs_recv);
    core_msgs[q % core_msgs.size()] += r.traffic.msgs_sent + r.traffic.msgs_recv;
    e.max_bytes = std::max(e.max_bytes, (r.traffic.elems_sent + r.traffic.elems_recv) * elem);
    e.max_reduced_bytes = std::max(e.max_reduced_bytes, r.elems_reduced * elem);
  }
  // The per-message overhead was measured with every rank as busy as every other, so with
  // ceil(p / cores) ranks taking turns on the busiest core: one rank's message cost that many
  // messages' CPU. What a core really spends is its own ranks' messages, so a schedule
  // that leaves some ranks idle (a root-centred one) is charged the busiest core's count at
  // the single-message cost; a symmetric one is charged as before.
  const int64_t n_cores = static_cast<int64_t>(core_msgs.size());
  const int64_t per_core = std::max<int64_t>(1, (p + n_cores - 1) / n_cores);
  const int64_t busiest_msgs = *std::max_element(core_msgs.begin(), core_msgs.end());
  e.overhead_s =
      shared.overhead_s_per_msg * static_cast<double>(busiest_msgs) / static_cast<double>(per_core);
  // The busiest core's work, at rates measured with p/cores ranks per core; the shared work
  // cannot hide the critical path's waits: every round still waits alpha.
  const double busiest = *std::max_element(core_work.begin(), core_work.end());
  e.throughput_s = p == 0 ? 0
                          : busiest * static_cast<double>(core_work.size()) / p +
                                params.alpha_s * static_cast<double>(e.rounds);
  e.seconds = std::max(e.walk_s, e.throughput_s) + e.overhead_s;
  return e;
}

std::vector<Estimate> EstimateAlgorithms(const CollectiveSpec& spec, const CostParams& params,
                                         const SharedCosts& shared) {
  std::vector<Estimate> out;
  for (Algorithm a : AlgorithmsFor(spec.collective)) {
    CollectiveSpec s = spec;
    s.algorithm = a;
    StatusOr<Estimate> e = EstimateAlgorithm(s, params, shared);
    if (e.ok()) out.push_back(*e);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Estimate& x, const Estimate& y) { return x.seconds < y.seconds; });
  return out;
}

}  // namespace gyre::algo
