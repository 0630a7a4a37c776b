// Which physical device each logical rank runs on. A collective's rings and trees are over
// logical ranks, so the mapping decides how many links a "neighbour" message crosses:
// identity, snake (boustrophedon over the topology's rows), a seeded random permutation,
// or a file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/sim/topology.h"

namespace gyre::sim {

// mapping[rank] = device. `spec` is one of
//   identity | snake | random | random:SEED | file:PATH
// A file holds one device number per rank (whitespace separated, '#' starts a comment)
// and must be a permutation of 0 .. num_devices-1; one with a line over 4096 bytes, over
// 16 MiB in all, or more devices than the topology's is refused as soon as it shows it.
StatusOr<std::vector<int>> MakeMapping(const std::string& spec, const Topology& topology);

struct HopStats {
  double mean = 0;
  int max = 0;
  int64_t pairs = 0;
};

// Links crossed between logical ring neighbours r -> r+1 (mod p) under `mapping`.
HopStats RingHops(const Topology& topology, const std::vector<int>& mapping);
// The same over explicit (from rank, to rank) pairs.
HopStats PairHops(const Topology& topology, const std::vector<int>& mapping,
                  const std::vector<std::pair<int, int>>& pairs);

}  // namespace gyre::sim
