#include "core/algo/estimate.h"

#include <algorithm>

#include "core/algo/builders.h"

namespace gyre::algo {

std::vector<Estimate> EstimateAlgorithms(const CollectiveSpec& spec, const CostParams& params) {
  std::vector<Estimate> out;
  for (Algorithm a : AlgorithmsFor(spec.collective)) {
    CollectiveSpec s = spec;
    s.algorithm = a;
    if (!ValidateSpec(s).ok()) continue;
    StatusOr<Schedule> schedule = BuildSchedule(s);
    if (!schedule.ok()) continue;
    StatusOr<ScheduleCost> cost = CostOf(*schedule, params);
    if (!cost.ok()) continue;
    out.push_back({a, cost->time_s});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Estimate& x, const Estimate& y) { return x.seconds < y.seconds; });
  return out;
}

}  // namespace gyre::algo
