// Shared pieces of the schedule builders and the per-collective entry points that
// builders.cc dispatches to. Not part of the algo layer's public surface.
#pragma once

#include <cstdint>

#include "core/algo/collective.h"
#include "core/algo/rank_builder.h"

namespace gyre::algo::internal {

// Per-collective builders; each switches on spec.algorithm (validated, concrete) and emits
// the steps of b->rank().
Status BuildAllreduce(const CollectiveSpec& spec, RankBuilder* b);      // builders_allreduce.cc
Status BuildReduce(const CollectiveSpec& spec, RankBuilder* b);         // builders_reduce.cc
Status BuildReduceScatter(const CollectiveSpec& spec, RankBuilder* b);  // builders_reduce.cc
Status BuildBroadcast(const CollectiveSpec& spec, RankBuilder* b);      // builders_bcast.cc
Status BuildAllgather(const CollectiveSpec& spec, RankBuilder* b);      // builders_gather.cc
Status BuildGather(const CollectiveSpec& spec, RankBuilder* b);         // builders_gather.cc
Status BuildScatter(const CollectiveSpec& spec, RankBuilder* b);        // builders_gather.cc
Status BuildAlltoall(const CollectiveSpec& spec, RankBuilder* b);       // builders_gather.cc
Status BuildBarrier(const CollectiveSpec& spec, RankBuilder* b);        // builders_gather.cc

inline int Mod(int64_t a, int64_t p) { return static_cast<int>(((a % p) + p) % p); }
inline bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
// Largest power of two <= v (v >= 1).
int64_t PowerOfTwoFloor(int64_t v);
// ceil(log2(v)) for v >= 1.
int Log2Ceil(int64_t v);

// A buffer of n elements cut into p balanced chunks.
struct Chunked {
  Region base;  // offset/count of the whole buffer
  int64_t parts;
  Region Chunk(int64_t i) const {
    return base.Sub(ChunkOffset(base.count, parts, i), ChunkCount(base.count, parts, i));
  }
};

// Ring reduce-scatter. `src` is this rank's contribution (n elements, chunked into p) and
// `dst` a region of the same shape. Afterwards rank r holds, in dst.Chunk((r + k) mod p),
// the reduction of that chunk over all ranks; other chunks of dst are not written.
// Messages go to (r+1) mod p and come from (r-1) mod p, one per non-empty chunk per step
// (times segments); scratch: two chunk-sized slots. Reduction order of chunk c: starting at
// rank c-k+1 ... around the ring. `phase` keeps its tags apart from other phases.
void RingReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst, int k,
                       int64_t segment, uint32_t phase);

// Ring allgather in place on `buf`: rank r starts owning buf.Chunk((r + k) mod p) and ends
// with every chunk. p-1 steps, one message per non-empty chunk per step (times segments).
void RingAllgather(RankBuilder* b, const Chunked& buf, int k, int64_t segment, uint32_t phase);

// Deterministic reduce-scatter: chunk c of every rank's `src` goes to rank c (direct), which
// reduces the p contributions in the canonical order CanonicalTree(0, p) and writes the
// result to dst.Chunk(c) (dst only written on the owner's chunk). p-1 messages each way.
void CanonicalReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst,
                            uint32_t phase);

// Reduces slots[lo..hi) into slots[lo] in the canonical tree order: split at lo + the
// largest power of two below (hi - lo), reduce each side, then left op= right. For p ranks
// this is ((r0+r1)+(r2+r3))+... : the order of a binomial tree rooted at rank 0.
void CanonicalTree(RankBuilder* b, const std::vector<Region>& slots, int lo, int hi);

}  // namespace gyre::algo::internal
