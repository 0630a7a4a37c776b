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
  // allreduce across hosts (spec.local_size ranks per host, 1 < local_size < p):
  // hierarchical from this size up, so each host sends 1/local_size of the data over its
  // slower inter-host links (measured 1.4x over the flat ring at 1 MiB, 2 x 4 ranks behind
  // 1 Gbit/s links: bench/results/hierarchical_1gbit.md).
  int64_t hierarchical_min_bytes = 1 << 20;
};

// The concrete algorithm for `spec` (spec.algorithm is ignored). `bytes` is the size of
// each rank's buffer in the BENCH.md convention. spec.local_size, when set, is the number of
// ranks per host (host-major numbering); 0 means one host.
Algorithm SelectAlgorithm(const CollectiveSpec& spec,
                          const SelectionThresholds& t = SelectionThresholds());

}  // namespace gyre::algo
