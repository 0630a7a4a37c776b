#include "core/algo/formulas.h"

namespace gyre::algo::internal {

StatusOr<ClosedForm> ReduceTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("ReduceTheory is not written yet");
}

StatusOr<ClosedForm> ReduceScatterTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("ReduceScatterTheory is not written yet");
}

bool ReduceFormulaIsExact(const CollectiveSpec& spec) { return false; }

bool ReduceScatterFormulaIsExact(const CollectiveSpec& spec) { return false; }

}  // namespace gyre::algo::internal
