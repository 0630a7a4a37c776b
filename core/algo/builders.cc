#include "core/algo/builders.h"

#include "core/algo/builders_internal.h"

namespace gyre::algo {

StatusOr<RankSchedule> BuildRankSchedule(const CollectiveSpec& spec, int rank) {
  GYRE_RETURN_IF_ERROR(ValidateSpec(spec));
  if (spec.algorithm == Algorithm::kAuto) {
    return InvalidArgumentError("BuildRankSchedule needs a concrete algorithm, not auto (" +
                                spec.ToString() + ")");
  }
  if (rank < 0 || rank >= spec.world_size) {
    return InvalidArgumentError("rank " + std::to_string(rank) +
                                " is out of range for world size " +
                                std::to_string(spec.world_size));
  }
  CollectiveSpec s = spec;
  if (!IsReducing(s.collective)) s.deterministic = false;
  if (s.deterministic) s.algorithm = Algorithm::kCanonical;
  RankBuilder b(rank, s.world_size);
  Status st;
  switch (s.collective) {
    case Collective::kAllreduce:
      st = internal::BuildAllreduce(s, &b);
      break;
    case Collective::kBroadcast:
      st = internal::BuildBroadcast(s, &b);
      break;
    case Collective::kReduce:
      st = internal::BuildReduce(s, &b);
      break;
    case Collective::kAllgather:
      st = internal::BuildAllgather(s, &b);
      break;
    case Collective::kReduceScatter:
      st = internal::BuildReduceScatter(s, &b);
      break;
    case Collective::kAlltoall:
      st = internal::BuildAlltoall(s, &b);
      break;
    case Collective::kGather:
      st = internal::BuildGather(s, &b);
      break;
    case Collective::kScatter:
      st = internal::BuildScatter(s, &b);
      break;
    case Collective::kBarrier:
      st = internal::BuildBarrier(s, &b);
      break;
  }
  GYRE_RETURN_IF_ERROR(st.WithContext(s.ToString()));
  return std::move(b).Finish();
}

StatusOr<Schedule> BuildSchedule(const CollectiveSpec& spec) {
  Schedule s;
  s.spec = spec;
  if (!IsReducing(s.spec.collective)) s.spec.deterministic = false;
  if (s.spec.deterministic) s.spec.algorithm = Algorithm::kCanonical;
  s.ranks.reserve(spec.world_size > 0 ? spec.world_size : 0);
  for (int r = 0; r < spec.world_size; ++r) {
    GYRE_ASSIGN_OR_RETURN(RankSchedule rs, BuildRankSchedule(spec, r));
    s.ranks.push_back(std::move(rs));
  }
  if (spec.world_size < 1) GYRE_RETURN_IF_ERROR(ValidateSpec(spec));
  return s;
}

}  // namespace gyre::algo
