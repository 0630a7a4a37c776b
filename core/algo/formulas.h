// Closed-form traffic and alpha-beta time of every algorithm, as documented in
// docs/algorithms.md. Tests hold the executor's counted bytes and messages and the cost
// model's critical path against these formulas.
#pragma once

#include <cstdint>

#include "core/algo/collective.h"

namespace gyre::algo {

struct Traffic {
  int64_t msgs_sent = 0;
  int64_t msgs_recv = 0;
  int64_t elems_sent = 0;
  int64_t elems_recv = 0;
  bool operator==(const Traffic& o) const {
    return msgs_sent == o.msgs_sent && msgs_recv == o.msgs_recv && elems_sent == o.elems_sent &&
           elems_recv == o.elems_recv;
  }
};

struct ClosedForm {
  Traffic traffic;  // of the given rank
  // Alpha-beta time of the whole operation: alpha_terms * alpha + beta_elems * (element
  // size in bytes) * beta, under the cost model of cost.h (one send port per rank, no
  // reduction cost).
  double alpha_terms = 0;
  double beta_elems = 0;
};

// The formula for `spec` at `rank`. Exact when the count splits evenly: count divisible by
// p (and by the power of two below p for Rabenseifner and recursive halving) and
// segment_elems == 0; docs/algorithms.md states each algorithm's condition, and
// FormulaIsExact tells it in code.
StatusOr<ClosedForm> Theory(const CollectiveSpec& spec, int rank);
bool FormulaIsExact(const CollectiveSpec& spec);

namespace internal {
// One per builder file, same split as the builders.
StatusOr<ClosedForm> AllreduceTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> ReduceTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> ReduceScatterTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> BroadcastTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> AllgatherTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> GatherTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> ScatterTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> AlltoallTheory(const CollectiveSpec& spec, int rank);
StatusOr<ClosedForm> BarrierTheory(const CollectiveSpec& spec, int rank);
bool AllreduceFormulaIsExact(const CollectiveSpec& spec);
bool ReduceFormulaIsExact(const CollectiveSpec& spec);
bool ReduceScatterFormulaIsExact(const CollectiveSpec& spec);
bool BroadcastFormulaIsExact(const CollectiveSpec& spec);
bool GatherFamilyFormulaIsExact(
    const CollectiveSpec& spec);  // allgather gather scatter alltoall barrier
}  // namespace internal

}  // namespace gyre::algo
