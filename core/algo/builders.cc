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

bool CutsMessagesIntoSegments(Collective c, Algorithm a) {
  CollectiveSpec s = MakeSpec(c, 4096, DataType::kFloat32, ReduceOp::kSum, 0);
  s.algorithm = a;
  s.world_size = 4;
  s.local_size = 2;  // hierarchical: two hosts of two
  s.grid_rows = 2;   // two-dimensional: a 2 x 2 grid
  s.segment_elems = 16;
  s.deterministic = a == Algorithm::kCanonical;
  StatusOr<Schedule> schedule = BuildSchedule(s);
  if (!schedule.ok()) return false;
  for (const RankSchedule& rank : schedule->ranks) {
    for (const Step& step : rank.steps) {
      if (step.kind == StepKind::kSend && step.src.count > s.segment_elems) return false;
    }
  }
  return true;
}

std::string OversizeMessageRemedy(Collective c, Algorithm a) {
  const std::string name = CollectiveName(c);
  if (CutsMessagesIntoSegments(c, a)) {
    // It cuts: the segment itself is over the cap (a --segment_bytes above it).
    return name + " " + AlgorithmName(a) +
           " sends one segment per message, so the call's segment is larger than that: give a "
           "smaller segment size (--segment_bytes, GYRE_SEGMENT_BYTES, or the call's "
           "segment_bytes), or make smaller calls";
  }
  std::string cutting, all;
  for (Algorithm other : AlgorithmsFor(c)) {
    all += std::string(all.empty() ? "" : ", ") + AlgorithmName(other);
    if (other != a && CutsMessagesIntoSegments(c, other)) {
      cutting += std::string(cutting.empty() ? "" : ", ") + AlgorithmName(other);
    }
  }
  if (!cutting.empty()) {
    const bool one = cutting.find(',') == std::string::npos;
    return name + " " + AlgorithmName(a) + " sends a block of that size as one message, and " +
           cutting + (one ? " cuts" : " cut") + " blocks into segments: choose " +
           (one ? "it" : "one of them") + " for this call, or make smaller calls";
  }
  return "every " + name + " algorithm (" + all +
         ") sends whole blocks as single messages, whatever the segment size, so no other "
         "algorithm helps: make smaller calls";
}

}  // namespace gyre::algo
