#include "core/algo/formulas.h"

namespace gyre::algo::internal {

StatusOr<ClosedForm> BroadcastTheory(const CollectiveSpec& spec, int rank) {
  return InternalError("BroadcastTheory is not written yet");
}

bool BroadcastFormulaIsExact(const CollectiveSpec& spec) { return false; }

}  // namespace gyre::algo::internal
