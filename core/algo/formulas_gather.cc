#include "core/algo/formulas.h"

namespace gyre::algo::internal {

StatusOr<ClosedForm> AllgatherTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("AllgatherTheory is not written yet");
}

StatusOr<ClosedForm> GatherTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("GatherTheory is not written yet");
}

StatusOr<ClosedForm> ScatterTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("ScatterTheory is not written yet");
}

StatusOr<ClosedForm> AlltoallTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("AlltoallTheory is not written yet");
}

StatusOr<ClosedForm> BarrierTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("BarrierTheory is not written yet");
}

bool GatherFamilyFormulaIsExact(const CollectiveSpec& spec) { return false; }

}  // namespace gyre::algo::internal
