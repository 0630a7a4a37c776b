// The allreduce schedules that follow a network's shape: 2-D (dimension-wise) on an a x b
// grid and hierarchical (nodes of G ranks). Both are rings inside rows and columns of a
// grid, so they share one builder and one closed form; this header also says which grid a
// spec runs on, for the simulator and the docs.
#pragma once

#include "core/algo/collective.h"
#include "core/algo/formulas.h"
#include "core/algo/rank_builder.h"

namespace gyre::algo {

// A grid of rows x cols ranks, row-major: rank r sits at row r / cols, column r % cols.
struct GridShape {
  int rows = 1;
  int cols = 1;
};

// kTwoD's grid: spec.grid_rows rows of p / grid_rows, or (grid_rows 0) the most square
// a x b with a <= b (a prime p gives 1 x p, which is the ring).
GridShape TwoDGrid(const CollectiveSpec& spec);
// kHierarchical's grid: one row per node of spec.local_size ranks, or (local_size 0) rows
// of the largest divisor of p not above sqrt(p).
GridShape HierarchicalGrid(const CollectiveSpec& spec);
// The grid of either algorithm (kTwoD or kHierarchical).
GridShape AllreduceGrid(const CollectiveSpec& spec);

namespace internal {

// Row reduce-scatter, column reduce-scatter, column allgather, row allgather
// (builders_topo.cc). For kHierarchical the rows are nodes: intra-node reduce-scatter,
// inter-node ring allreduce of each 1/G shard on G parallel column rings, intra-node
// allgather.
Status TwoDAllreduce(const CollectiveSpec& spec, RankBuilder* b);
Status HierarchicalAllreduce(const CollectiveSpec& spec, RankBuilder* b);

// Their closed forms (formulas_topo.cc): 2(a-1) + 2(b-1) steps,
// T = (2(a-1) + 2(b-1)) alpha + (2(b-1) n/b + 2(a-1) n/p) beta.
StatusOr<ClosedForm> GridAllreduceTheory(const CollectiveSpec& spec, int rank);
bool GridAllreduceFormulaIsExact(const CollectiveSpec& spec);

}  // namespace internal
}  // namespace gyre::algo
