// Shared by the 2-D / hierarchical allreduce tests (simulated and on real ranks): the spec of
// one grid allreduce and every shape a world of p ranks can take.
#pragma once

#include <vector>

#include "core/algo/collective.h"

namespace gyre::testing {

// `shape` is the grid's rows (2-D) or the ranks per node (hierarchical); 0 lets gyre choose.
inline algo::CollectiveSpec GridSpec(algo::Algorithm a, int p, int shape, int64_t count) {
  algo::CollectiveSpec s = algo::MakeSpec(algo::Collective::kAllreduce, count, DataType::kFloat32);
  s.algorithm = a;
  s.world_size = p;
  if (a == algo::Algorithm::kTwoD) {
    s.grid_rows = shape;
  } else {
    s.local_size = shape;
  }
  return s;
}

// 0 (automatic) and every divisor of p.
inline std::vector<int> GridShapes(int p) {
  std::vector<int> out = {0};
  for (int d = 1; d <= p; ++d) {
    if (p % d == 0) out.push_back(d);
  }
  return out;
}

}  // namespace gyre::testing
