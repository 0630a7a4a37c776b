// Closed forms of the allreduce algorithms (docs/algorithms.md, "allreduce").
#include "core/algo/formulas.h"

namespace gyre::algo::internal {

StatusOr<ClosedForm> AllreduceTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  ClosedForm f;
  if (p == 1 || n == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kRing:
      // 2(p-1) steps, each sending and receiving one chunk of n/p.
      f.traffic = {2 * (p - 1), 2 * (p - 1), 2 * (p - 1) * n / p, 2 * (p - 1) * n / p};
      f.alpha_terms = 2.0 * (p - 1);
      f.beta_elems = 2.0 * (p - 1) * n / p;
      return f;
    default: break;
  }
  return InternalError(std::string("no formula for allreduce ") + AlgorithmName(spec.algorithm));
}

bool AllreduceFormulaIsExact(const CollectiveSpec& spec) {
  return spec.segment_elems == 0 && spec.count % spec.world_size == 0;
}

}  // namespace gyre::algo::internal
