// Automatic algorithm choice: picks an algorithm for a collective from the message size
// and the world size. The thresholds are measured (see docs/algorithms.md and gyre-bench);
// a caller can always name an algorithm instead.
#pragma once

#include <cstdint>

#include "core/algo/collective.h"

namespace gyre::algo {

struct SelectionThresholds {
  // allreduce: recursive doubling below small_bytes (latency-bound), Rabenseifner below
  // large_bytes, ring above (bandwidth-bound, and pipelined).
  int64_t allreduce_small_bytes = 16 << 10;
  int64_t allreduce_large_bytes = 1 << 20;
  int64_t broadcast_large_bytes = 512 << 10;
  int64_t allgather_small_bytes = 64 << 10;
};

// The concrete algorithm for `spec` (spec.algorithm is ignored). `bytes` is the size of
// each rank's buffer in the BENCH.md convention.
Algorithm SelectAlgorithm(const CollectiveSpec& spec,
                          const SelectionThresholds& t = SelectionThresholds());

}  // namespace gyre::algo
