#include "core/algo/cost.h"

#include <algorithm>

#include "core/algo/walk.h"

namespace gyre::algo {

StatusOr<ScheduleCost> CostOf(const Schedule& schedule, const CostParams& params) {
  const int p = static_cast<int>(schedule.ranks.size());
  const size_t elem_bytes = DataTypeSize(schedule.spec.dtype);
  ScheduleCost cost;
  cost.ranks.assign(p, RankCost{});
  for (int r = 0; r < p; ++r) {
    RankCost& rc = cost.ranks[r];
    for (const Step& st : schedule.ranks[r].steps) {
      ++rc.steps;
      switch (st.kind) {
        case StepKind::kSend:
          ++rc.traffic.msgs_sent;
          rc.traffic.elems_sent += st.src.count;
          break;
        case StepKind::kRecv:
          ++rc.traffic.msgs_recv;
          rc.traffic.elems_recv += st.dst.count;
          break;
        case StepKind::kReduce:
          rc.elems_reduced += st.dst.count;
          break;
        case StepKind::kCopy:
          rc.elems_copied += st.dst.count;
          break;
      }
    }
  }
  internal::WalkTimes times;
  GYRE_RETURN_IF_ERROR(internal::WalkSchedule(
      schedule, params, elem_bytes,
      [](internal::StepRef, internal::StepRef) { return Status::Ok(); }, &times));
  for (int r = 0; r < p; ++r) {
    RankCost& rc = cost.ranks[r];
    for (size_t i = 0; i < times.finish[r].size(); ++i) {
      rc.finish_s = std::max(rc.finish_s, times.finish[r][i]);
      rc.rounds = std::max(rc.rounds, times.rounds[r][i]);
    }
    cost.time_s = std::max(cost.time_s, rc.finish_s);
  }
  return cost;
}

}  // namespace gyre::algo
