// The schedule walk shared by the verifier and the cost model: visits every step of every
// rank once, in simulated-time order under the cost model of cost.h, so each step is
// visited after its dependencies and each receive after its matching send.
#pragma once

#include <functional>
#include <vector>

#include "core/algo/cost.h"
#include "core/algo/schedule.h"

namespace gyre::algo::internal {

struct StepRef {
  int rank = -1;
  int index = -1;
};

// Called for each step; for a receive, `send` is the matching send (already visited).
using StepVisitor = std::function<Status(StepRef step, StepRef send)>;

struct WalkTimes {
  std::vector<std::vector<double>> finish;   // [rank][step]
  std::vector<std::vector<int64_t>> rounds;  // [rank][step]
};

// Checks that sends and receives match one to one (peer, tag, count) and walks the
// schedule. A schedule that cannot finish is Internal, listing the steps left waiting.
Status WalkSchedule(const Schedule& schedule, const CostParams& params, size_t elem_bytes,
                    const StepVisitor& visit, WalkTimes* times);

}  // namespace gyre::algo::internal
