#include "core/algo/select.h"

namespace gyre::algo {

Algorithm SelectAlgorithm(const CollectiveSpec& spec, const SelectionThresholds& t) {
  const int64_t bytes = spec.count * static_cast<int64_t>(DataTypeSize(spec.dtype));
  const int p = spec.world_size;
  switch (spec.collective) {
    case Collective::kAllreduce:
      if (spec.local_size > 1 && spec.local_size < p && p % spec.local_size == 0 &&
          bytes >= t.hierarchical_min_bytes && spec.count >= p) {
        return Algorithm::kHierarchical;
      }
      if (bytes < t.allreduce_small_bytes || spec.count < p) return Algorithm::kRecursiveDoubling;
      if (bytes < t.allreduce_large_bytes) return Algorithm::kRabenseifner;
      return Algorithm::kRing;
    case Collective::kBroadcast:
      // Across hosts below the bandwidth-bound sizes: every host gets exactly one copy over
      // the inter-host links whatever the root, where a flat binomial tree numbered from an
      // arbitrary root crosses hosts on most of its edges.
      if (spec.local_size > 1 && spec.local_size < p && p % spec.local_size == 0 &&
          bytes < t.broadcast_large_bytes) {
        return Algorithm::kHierarchical;
      }
      return bytes >= t.broadcast_large_bytes && spec.count >= p ? Algorithm::kScatterAllgather
                                                                 : Algorithm::kBinomial;
    case Collective::kReduce:
      return bytes >= t.allreduce_large_bytes && spec.count >= p ? Algorithm::kRingGather
                                                                 : Algorithm::kBinomial;
    case Collective::kAllgather:
      return bytes * p < t.allgather_small_bytes ? Algorithm::kBruck : Algorithm::kRing;
    case Collective::kReduceScatter:
      return bytes * p < t.allreduce_small_bytes ? Algorithm::kRecursiveHalving : Algorithm::kRing;
    case Collective::kAlltoall:
      return bytes * p < t.allgather_small_bytes ? Algorithm::kBruck : Algorithm::kPairwise;
    case Collective::kGather:
    case Collective::kScatter:
      return Algorithm::kBinomial;
    case Collective::kBarrier:
      return Algorithm::kDissemination;
  }
  return Algorithm::kRing;
}

}  // namespace gyre::algo
