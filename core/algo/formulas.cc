#include "core/algo/formulas.h"

namespace gyre::algo {

StatusOr<ClosedForm> Theory(const CollectiveSpec& spec, int rank) {
  GYRE_RETURN_IF_ERROR(ValidateSpec(spec));
  CollectiveSpec s = spec;
  if (!IsReducing(s.collective)) s.deterministic = false;
  if (s.deterministic) s.algorithm = Algorithm::kCanonical;
  switch (s.collective) {
    case Collective::kAllreduce:
      return internal::AllreduceTheory(s, rank);
    case Collective::kReduce:
      return internal::ReduceTheory(s, rank);
    case Collective::kReduceScatter:
      return internal::ReduceScatterTheory(s, rank);
    case Collective::kBroadcast:
      return internal::BroadcastTheory(s, rank);
    case Collective::kAllgather:
      return internal::AllgatherTheory(s, rank);
    case Collective::kGather:
      return internal::GatherTheory(s, rank);
    case Collective::kScatter:
      return internal::ScatterTheory(s, rank);
    case Collective::kAlltoall:
      return internal::AlltoallTheory(s, rank);
    case Collective::kBarrier:
      return internal::BarrierTheory(s, rank);
  }
  return InternalError("unknown collective");
}

bool FormulaIsExact(const CollectiveSpec& spec) {
  CollectiveSpec s = spec;
  if (!IsReducing(s.collective)) s.deterministic = false;
  if (s.deterministic) s.algorithm = Algorithm::kCanonical;
  switch (s.collective) {
    case Collective::kAllreduce:
      return internal::AllreduceFormulaIsExact(s);
    case Collective::kReduce:
      return internal::ReduceFormulaIsExact(s);
    case Collective::kReduceScatter:
      return internal::ReduceScatterFormulaIsExact(s);
    case Collective::kBroadcast:
      return internal::BroadcastFormulaIsExact(s);
    default:
      return internal::GatherFamilyFormulaIsExact(s);
  }
}

}  // namespace gyre::algo
