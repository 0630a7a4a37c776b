// Shared pieces of the schedule builders and the per-collective entry points that
// builders.cc dispatches to. Not part of the algo layer's public surface.
#pragma once

#include <cstdint>
#include <vector>

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

// Landing slots for received pieces, handed out round-robin: the i-th piece lands in slot
// i mod K, with K = min(slots, pieces). RankBuilder orders each refill of a slot after the
// steps that read its previous piece (write-after-read), so a phase holds K pieces of
// scratch however many it receives: with segments that is O(segment), not O(buffer).
class SlotPool {
 public:
  // `pieces`: how many Next() calls will come; `slot_count`: the largest piece.
  SlotPool(RankBuilder* b, int64_t pieces, int64_t slot_count, int slots = 2);
  // The next slot, cut to `count` elements (at most slot_count).
  Region Next(int64_t count);

 private:
  std::vector<Region> slots_;
  size_t next_ = 0;
};

// Ring reduce-scatter. `src` is this rank's contribution (n elements, chunked into p) and
// `dst` a region of the same shape. Afterwards rank r holds, in dst.Chunk((r + k) mod p),
// the reduction of that chunk over all ranks; other chunks of dst are not written.
// Messages go to (r+1) mod p and come from (r-1) mod p, one per non-empty chunk per step
// (times segments); scratch: two landing slots of one segment each (of one chunk without
// segments; one slot when p = 2). Reduction order of chunk c: starting at
// rank c-k+1 ... around the ring. `phase` keeps its tags apart from other phases.
void RingReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst, int k,
                       int64_t segment, uint32_t phase);

// Ring allgather in place on `buf`: rank r starts owning buf.Chunk((r + k) mod p) and ends
// with every chunk. p-1 steps, one message per non-empty chunk per step (times segments).
void RingAllgather(RankBuilder* b, const Chunked& buf, int k, int64_t segment, uint32_t phase);

// Deterministic reduce-scatter: chunk c of every rank's `src` goes to rank c (direct), which
// reduces the p contributions in the canonical order CanonicalTree(0, p) and writes the
// result to dst.Chunk(c) (dst only written on the owner's chunk). p-1 messages each way.
void CanonicalReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst, uint32_t phase);

// Reduces slots[lo..hi) into slots[lo] in the canonical tree order: split at lo + the
// largest power of two below (hi - lo), reduce each side, then left op= right. For p ranks
// this is ((r0+r1)+(r2+r3))+... : the order of a binomial tree rooted at rank 0.
void CanonicalTree(RankBuilder* b, const std::vector<Region>& slots, int lo, int hi);

}  // namespace gyre::algo::internal

namespace gyre::algo::internal {

// Binomial tree over relative ranks 0..p-1 rooted at 0 (relative rank v = (rank - root)
// mod p). The parent of v is v with its lowest set bit cleared; its children are v + 2^j
// for every 2^j below v's lowest set bit (every 2^j < p for the root) with v + 2^j < p.
// The subtree of v is the contiguous range [v, v + BinomialExtent(p, v)), so a subtree's
// blocks in relative order form one region.
int BinomialParent(int v);  // -1 for the root
// Largest subtree first, the order that keeps the critical path shortest when the sender's
// port is the bottleneck.
std::vector<int> BinomialChildren(int p, int v);
int BinomialExtent(int p, int v);

}  // namespace gyre::algo::internal

namespace gyre::algo::internal {

// A Chunked view of n elements in p parts of which only chunk `c` has memory behind it:
// `backing` (ChunkCount(n, p, c) elements). Lets the shared reduce-scatter phases write the
// one chunk a rank keeps straight into a small scratch slot or into a count-sized output.
// The other chunks' offsets may be negative; they must never be touched.
inline Chunked SingleChunk(Region backing, int64_t n, int64_t p, int64_t c) {
  return Chunked{Region{backing.buffer, backing.offset - ChunkOffset(n, p, c), n}, p};
}

// The fold that lets recursive doubling and halving run on any p. With p2 the largest power
// of two <= p and extra = p - p2, each even rank below 2 * extra hands its data to the odd
// rank above it and sits out; the p2 others take part under a new rank:
//   old rank:  0  1  2  3 | 4  5  6      (p = 7, p2 = 4, extra = 3)
//   new rank:  -  0  -  1 | 2  3  ...     (odd r < 2*extra -> r / 2, r >= 2*extra -> r - extra)
struct Fold {
  explicit Fold(int p) : p2(static_cast<int>(PowerOfTwoFloor(p))), extra(p - p2) {}
  bool SitsOut(int r) const { return r < 2 * extra && r % 2 == 0; }
  bool Folded(int r) const { return r < 2 * extra && r % 2 == 1; }  // also serves r - 1
  int NewRank(int r) const { return r < 2 * extra ? r / 2 : r - extra; }
  int OldRank(int g) const { return g < extra ? 2 * g + 1 : g + extra; }
  int p2;
  int extra;
};

// Binomial-tree reduction of every rank's `src` towards `root`, one independent tree per
// segment so segments pipeline. Relative rank v receives from its children smallest first
// (v+1, v+2, v+4, ...), folds each into its accumulator in that order, then sends the
// accumulator to its parent; the root's result is therefore in the canonical order over
// relative ranks, ((v0+v1)+(v2+v3))+... With `acc` (src's size, writable, not src's memory
// unless in place) the rank first copies src there and works only on acc, so acc may alias
// src; the root must pass one, and it ends holding the result. Without it, a leaf sends src
// as is and an inner rank accumulates in scratch. Scratch: up to two child slots of
// src.count (the second lets a child's message land while the previous one is reduced).
void BinomialReduce(RankBuilder* b, int root, Region src, const Region* acc, int64_t segment,
                    uint32_t phase);

// Recursive-halving reduce-scatter among the fold's p2 ranks over a buffer cut into p2
// contiguous groups at `bounds` (p2 + 1 offsets, bounds[0] = 0, bounds[p2] = buffer size).
// At the step with mask m = p2/2, ..., 2, 1 new rank g exchanges with g ^ m: it keeps the
// half of its current group range that holds g, sends the other half and folds the partner's
// share of the kept half into acc, so every message is one contiguous region. Afterwards
// acc's group g holds the reduction over all participants. If `acc_ready`, acc already holds
// this rank's contribution; otherwise it is read from `src` and acc is written only on the
// ranges it keeps. Scratch: one slot of the first kept range.
void HalvingReduceScatter(RankBuilder* b, const Fold& fold, const std::vector<int64_t>& bounds,
                          Region src, Region acc, bool acc_ready, int64_t segment, uint32_t phase);

// Recursive-doubling allgather among the fold's p2 ranks, in place on `buf` cut at `bounds`:
// new rank g starts with group g; the step with mask m = 1, 2, ..., p2/2 sends its current
// m groups to g ^ m and receives the partner's adjacent m groups.
void DoublingAllgather(RankBuilder* b, const Fold& fold, const std::vector<int64_t>& bounds,
                       Region buf, int64_t segment, uint32_t phase);

// Sends `src` to `peer` (or receives into `dst` from it) as SplitSegments pieces tagged
// MakeTag(phase, round, piece). Returns the step indices. Empty regions send nothing.
std::vector<int> SendSegments(RankBuilder* b, int peer, Region src, int64_t segment, uint32_t phase,
                              uint32_t round);
std::vector<int> RecvSegments(RankBuilder* b, int peer, Region dst, int64_t segment, uint32_t phase,
                              uint32_t round);

}  // namespace gyre::algo::internal
