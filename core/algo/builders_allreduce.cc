// Allreduce schedules: ring, tree, recursive doubling, Rabenseifner, direct, canonical.
#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {
namespace {

constexpr uint32_t kPhaseReduceScatter = 1;
constexpr uint32_t kPhaseAllgather = 2;

// Ring: reduce-scatter then allgather around r -> r+1. 2(p-1) steps; each rank sends
// 2(p-1) chunks of n/p elements.
Status Ring(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const Chunked in{InputRegion(0, spec.count), p};
  const Chunked out{OutputRegion(0, spec.count), p};
  RingReduceScatter(b, in, out, /*k=*/1, spec.segment_elems, kPhaseReduceScatter);
  RingAllgather(b, out, /*k=*/1, spec.segment_elems, kPhaseAllgather);
  return Status::Ok();
}

// Canonical (deterministic mode): direct reduce-scatter with the fixed reduction tree,
// then ring allgather.
Status Canonical(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const Chunked in{InputRegion(0, spec.count), p};
  const Chunked out{OutputRegion(0, spec.count), p};
  CanonicalReduceScatter(b, in, out, kPhaseReduceScatter);
  RingAllgather(b, out, /*k=*/0, spec.segment_elems, kPhaseAllgather);
  return Status::Ok();
}

}  // namespace

Status BuildAllreduce(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kRing: return Ring(spec, b);
    case Algorithm::kCanonical: return Canonical(spec, b);
    default: break;
  }
  return InternalError(std::string("allreduce algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

}  // namespace gyre::algo::internal
