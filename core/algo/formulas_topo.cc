// Closed forms of the 2-D and hierarchical allreduce (see builders_topo.cc). On an a x b
// grid every phase is a lockstep ring, so under the cost model of cost.h:
//   row phases:    2(b-1) steps of n/b elements
//   column phases: 2(a-1) steps of n/(ab) elements
//   T = (2(b-1) + 2(a-1)) alpha + (2(b-1) n/b + 2(a-1) n/p) beta
// exact when p divides n and each message is one segment.
#include "core/algo/builders_topo.h"

namespace gyre::algo::internal {

StatusOr<ClosedForm> GridAllreduceTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  ClosedForm f;
  if (p == 1 || n == 0) return f;
  const GridShape grid = AllreduceGrid(spec);
  const int64_t a = grid.rows;
  const int64_t b = grid.cols;
  const int64_t row_msgs = 2 * (b - 1) * NumSegments(n / b, spec.segment_elems);
  const int64_t col_msgs = 2 * (a - 1) * NumSegments(n / p, spec.segment_elems);
  const int64_t elems = 2 * (b - 1) * (n / b) + 2 * (a - 1) * (n / p);
  f.traffic = Traffic{row_msgs + col_msgs, row_msgs + col_msgs, elems, elems};
  f.alpha_terms = 2.0 * (b - 1) + 2.0 * (a - 1);
  f.beta_elems = 2.0 * (b - 1) * n / b + 2.0 * (a - 1) * n / p;
  return f;
}

bool GridAllreduceFormulaIsExact(const CollectiveSpec& spec) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  if (p == 1 || n == 0) return true;
  const GridShape grid = AllreduceGrid(spec);
  const int64_t largest = grid.cols > 1 ? n / grid.cols : n / p;
  return n % p == 0 && (spec.segment_elems == 0 || largest <= spec.segment_elems);
}

}  // namespace gyre::algo::internal
