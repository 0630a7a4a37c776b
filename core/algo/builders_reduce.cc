// Reduce schedules (binomial, ring + gather, canonical) and reduce_scatter schedules (ring,
// recursive halving, canonical). docs/algorithms_reducing.md gives each one's steps,
// traffic, formula and reduction order.
//
// Only the root of a reduce has an output. The root may pass the same memory as input and
// output (an in-place reduce), so it copies out = in first (skipped by the executor when they
// alias) and from then on reads only the output and scratch.
#include <algorithm>
#include <vector>

#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {
namespace {

constexpr uint32_t kPhaseReduce = 1;
constexpr uint32_t kPhaseReduceScatter = 1;
constexpr uint32_t kPhaseGather = 2;
// Recursive halving: fold in, halving, fold out.
constexpr uint32_t kPhaseFoldIn = 1;
constexpr uint32_t kPhaseHalving = 2;
constexpr uint32_t kPhaseFoldOut = 3;

// Binomial tree over ranks relative to the root, one tree per segment.
Status BinomialReduceToRoot(const CollectiveSpec& spec, RankBuilder* b) {
  const Region in = InputRegion(0, spec.count);
  if (b->rank() == spec.root) {
    const Region out = OutputRegion(0, spec.count);
    BinomialReduce(b, spec.root, in, &out, spec.segment_elems, kPhaseReduce);
  } else {
    BinomialReduce(b, spec.root, in, nullptr, spec.segment_elems, kPhaseReduce);
  }
  return Status::Ok();
}

// The last phase of ring_gather and canonical: every rank but the root sends the chunk it
// reduced (`mine`) to the root, which receives chunk q straight into its output.
void GatherChunks(const CollectiveSpec& spec, RankBuilder* b, Region mine) {
  const int p = spec.world_size;
  const int r = b->rank();
  if (r != spec.root) {
    SendSegments(b, spec.root, mine, spec.segment_elems, kPhaseGather, 0);
    return;
  }
  const Chunked out{OutputRegion(0, spec.count), p};
  for (int d = 1; d < p; ++d) {
    const int q = Mod(r + d, p);
    RecvSegments(b, q, out.Chunk(q), spec.segment_elems, kPhaseGather, 0);
  }
}

// Ring reduce-scatter (rank r ends with chunk r), then every rank sends its chunk to the
// root. The root runs the ring on its output after out = in; its own chunk lands in scratch
// first because the ring's last step must not read and write the same region.
Status RingGather(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t n = spec.count;
  const Region own = b->Scratch(ChunkCount(n, p, r));
  const Chunked dst = SingleChunk(own, n, p, r);
  if (r == spec.root) {
    const Chunked out{OutputRegion(0, n), p};
    b->Copy(out.base, InputRegion(0, n));
    RingReduceScatter(b, out, dst, /*k=*/0, spec.segment_elems, kPhaseReduceScatter);
    b->Copy(out.Chunk(r), own);
  } else {
    RingReduceScatter(b, Chunked{InputRegion(0, n), p}, dst, /*k=*/0, spec.segment_elems,
                      kPhaseReduceScatter);
  }
  GatherChunks(spec, b, own);
  return Status::Ok();
}

// Canonical (deterministic mode): CanonicalReduceScatter gives each rank its chunk reduced in
// the canonical order, then every rank sends its chunk to the root.
Status CanonicalReduce(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t n = spec.count;
  if (r == spec.root) {
    const Chunked out{OutputRegion(0, n), p};
    b->Copy(out.base, InputRegion(0, n));
    CanonicalReduceScatter(b, out, out, kPhaseReduceScatter);
    GatherChunks(spec, b, out.Chunk(r));
  } else {
    const Region own = b->Scratch(ChunkCount(n, p, r));
    CanonicalReduceScatter(b, Chunked{InputRegion(0, n), p}, SingleChunk(own, n, p, r),
                           kPhaseReduceScatter);
    GatherChunks(spec, b, own);
  }
  return Status::Ok();
}

// reduce_scatter: the input is p blocks of `count`, block q for rank q; the output of rank r
// is its block reduced. In all three the output is the backing of chunk r.
Chunked ScatterOutput(const CollectiveSpec& spec, int r) {
  return SingleChunk(OutputRegion(0, spec.count), spec.world_size * spec.count, spec.world_size, r);
}
Chunked ScatterInput(const CollectiveSpec& spec) {
  return Chunked{InputRegion(0, spec.world_size * spec.count), spec.world_size};
}

Status RingReduceScatterOnly(const CollectiveSpec& spec, RankBuilder* b) {
  RingReduceScatter(b, ScatterInput(spec), ScatterOutput(spec, b->rank()), /*k=*/0,
                    spec.segment_elems, kPhaseReduceScatter);
  return Status::Ok();
}

Status CanonicalReduceScatterOnly(const CollectiveSpec& spec, RankBuilder* b) {
  CanonicalReduceScatter(b, ScatterInput(spec), ScatterOutput(spec, b->rank()),
                         kPhaseReduceScatter);
  return Status::Ok();
}

// Recursive halving for any p. The fold's p2 ranks split the blocks into p2 groups: the odd
// rank of a fold pair stands for both its blocks (2g and 2g + 1), every other rank for its
// own, so each group is a contiguous run of blocks and each halving message one region.
// At the end the odd rank of a pair sends the even one its block.
Status RecursiveHalving(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t count = spec.count;
  const Region in = InputRegion(0, p * count);
  const Region out = OutputRegion(0, count);
  if (p == 1) {
    b->Copy(out, in);
    return Status::Ok();
  }
  const Fold fold(p);
  if (fold.SitsOut(r)) {
    SendSegments(b, r + 1, in, spec.segment_elems, kPhaseFoldIn, 0);
    RecvSegments(b, r + 1, out, spec.segment_elems, kPhaseFoldOut, 0);
    return Status::Ok();
  }
  const Region acc = b->Scratch(p * count);
  bool acc_ready = false;
  if (fold.Folded(r)) {
    // acc = the even neighbour's input op mine, piece by piece as it lands.
    const std::vector<Region> segs = SplitSegments(acc, spec.segment_elems);
    for (size_t g = 0; g < segs.size(); ++g) {
      b->Recv(r - 1, MakeTag(kPhaseFoldIn, 0, static_cast<uint32_t>(g)), segs[g]);
      b->Reduce(segs[g], in.Sub(segs[g].offset - acc.offset, segs[g].count));
    }
    acc_ready = true;
  }
  std::vector<int64_t> bounds(fold.p2 + 1);
  for (int g = 0; g <= fold.p2; ++g) bounds[g] = (g + std::min(g, fold.extra)) * count;
  HalvingReduceScatter(b, fold, bounds, in, acc, acc_ready, spec.segment_elems, kPhaseHalving);
  if (fold.Folded(r)) {
    SendSegments(b, r - 1, acc.Sub((r - 1) * count, count), spec.segment_elems, kPhaseFoldOut, 0);
  }
  b->Copy(out, acc.Sub(r * count, count));
  return Status::Ok();
}

}  // namespace

Status BuildReduce(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  if (spec.world_size == 1) {
    b->Copy(OutputRegion(0, spec.count), InputRegion(0, spec.count));
    return Status::Ok();
  }
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
      return BinomialReduceToRoot(spec, b);
    case Algorithm::kRingGather:
      return RingGather(spec, b);
    case Algorithm::kCanonical:
      return CanonicalReduce(spec, b);
    default:
      break;
  }
  return InternalError(std::string("reduce algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

Status BuildReduceScatter(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kRing:
      return RingReduceScatterOnly(spec, b);
    case Algorithm::kRecursiveHalving:
      return RecursiveHalving(spec, b);
    case Algorithm::kCanonical:
      return CanonicalReduceScatterOnly(spec, b);
    default:
      break;
  }
  return InternalError(std::string("reduce_scatter algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

}  // namespace gyre::algo::internal
