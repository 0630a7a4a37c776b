// The cost model: counts per rank (messages, elements sent and received, elements reduced
// and copied) and an alpha-beta time from a discrete-event walk of the schedule:
//  - a message of b bytes takes alpha + b * beta from the moment its send is issued and the
//    sender's port is free; each rank has one send port, busy for b * beta per message, and
//    sends are served in the order they become ready; receiving is unlimited;
//  - a reduce of b bytes takes b * gamma (0 by default), a copy b * delta (0 by default);
//  - a step starts when its dependencies are done.
// There is no link contention here: that is the network simulator's job.
#pragma once

#include <vector>

#include "core/algo/formulas.h"
#include "core/algo/schedule.h"

namespace gyre::algo {

struct CostParams {
  double alpha_s = 1e-6;          // latency per message
  double beta_s_per_byte = 1e-9;  // inverse bandwidth
  double gamma_s_per_byte = 0;    // reduction
  double delta_s_per_byte = 0;    // copy
};

struct RankCost {
  Traffic traffic;
  int64_t elems_reduced = 0;
  int64_t elems_copied = 0;
  int64_t steps = 0;
  int64_t rounds = 0;   // messages on the longest chain of receives ending at this rank
  double finish_s = 0;  // when this rank's last step ends
};

struct ScheduleCost {
  std::vector<RankCost> ranks;
  double time_s = 0;  // the last rank's finish
};

StatusOr<ScheduleCost> CostOf(const Schedule& schedule, const CostParams& params = {});

}  // namespace gyre::algo
