// Allreduce schedules: ring, tree, recursive doubling, Rabenseifner, direct, canonical.
// docs/algorithms_reducing.md gives each one's steps, traffic, formula and reduction order.
//
// In-place calls pass the same memory as input and output, so apart from ranks that sit out
// a fold (whose writes are ordered after their reads explicitly), every schedule starts
// with Copy(out = in), which the executor skips when the two alias, and then reads and
// writes only the output and scratch.
#include <algorithm>
#include <vector>

#include "core/algo/builders_internal.h"
#include "core/algo/builders_topo.h"

namespace gyre::algo::internal {
namespace {

constexpr uint32_t kPhaseReduceScatter = 1;
constexpr uint32_t kPhaseAllgather = 2;
// Tree.
constexpr uint32_t kPhaseTreeReduce = 1;
constexpr uint32_t kPhaseTreeBroadcast = 2;
// Recursive doubling and Rabenseifner: fold in, the power-of-two part, fold out.
constexpr uint32_t kPhaseFoldIn = 1;
constexpr uint32_t kPhaseExchange = 2;
constexpr uint32_t kPhaseHalving = 2;
constexpr uint32_t kPhaseDoubling = 3;
constexpr uint32_t kPhaseFoldOut = 4;
// Direct.
constexpr uint32_t kPhaseDirect = 1;

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

// Binomial broadcast of `buf` from rank 0, segment by segment: receive from the parent,
// then forward to the children, largest subtree first.
void TreeBroadcast(RankBuilder* b, Region buf, int64_t segment, uint32_t phase) {
  const int p = b->world_size();
  const int v = b->rank();
  const int parent = BinomialParent(v);
  const std::vector<int> children = BinomialChildren(p, v);
  auto level_of = [](int mask) {
    uint32_t k = 0;
    while ((1 << k) < mask) ++k;
    return k;
  };
  const std::vector<Region> segs = SplitSegments(buf, segment);
  for (size_t g = 0; g < segs.size(); ++g) {
    const uint32_t seg = static_cast<uint32_t>(g);
    if (parent >= 0) b->Recv(parent, MakeTag(phase, level_of(v - parent), seg), segs[g]);
    for (int c : children) b->Send(c, MakeTag(phase, level_of(c - v), seg), segs[g]);
  }
}

// Tree: binomial reduce to rank 0, then binomial broadcast from it. Each segment is its own
// reduce + broadcast, so a segment's broadcast overlaps the next one's reduction.
Status Tree(const CollectiveSpec& spec, RankBuilder* b) {
  const Region in = InputRegion(0, spec.count);
  const Region out = OutputRegion(0, spec.count);
  BinomialReduce(b, /*root=*/0, in, &out, spec.segment_elems, kPhaseTreeReduce);
  TreeBroadcast(b, out, spec.segment_elems, kPhaseTreeBroadcast);
  return Status::Ok();
}

// A rank that sits out the fold: hand the whole input to the odd neighbour, get the result
// back into the output. Each result piece is ordered after the send of the same piece, so
// an in-place call never overwrites data still being sent.
void SitOut(const CollectiveSpec& spec, RankBuilder* b) {
  const int partner = b->rank() + 1;
  const std::vector<int> sends =
      SendSegments(b, partner, InputRegion(0, spec.count), spec.segment_elems, kPhaseFoldIn, 0);
  const std::vector<int> recvs =
      RecvSegments(b, partner, OutputRegion(0, spec.count), spec.segment_elems, kPhaseFoldOut, 0);
  for (size_t g = 0; g < recvs.size(); ++g) b->AddDep(recvs[g], sends[g]);
}

// The odd rank of a fold pair: out op= the even neighbour's input, piece by piece into
// `slot` (a scratch region of the buffer's size).
void FoldIn(const CollectiveSpec& spec, RankBuilder* b, Region slot) {
  const Region out = OutputRegion(0, spec.count);
  const std::vector<Region> segs = SplitSegments(slot, spec.segment_elems);
  for (size_t g = 0; g < segs.size(); ++g) {
    b->Recv(b->rank() - 1, MakeTag(kPhaseFoldIn, 0, static_cast<uint32_t>(g)), segs[g]);
    b->Reduce(out.Sub(segs[g].offset - slot.offset, segs[g].count), segs[g]);
  }
}

// Recursive doubling: log2(p2) steps, each exchanging the whole buffer with new rank
// g ^ mask and folding it in; the fold around it handles any p.
Status RecursiveDoubling(const CollectiveSpec& spec, RankBuilder* b) {
  const Fold fold(spec.world_size);
  const int r = b->rank();
  if (fold.SitsOut(r)) {
    SitOut(spec, b);
    return Status::Ok();
  }
  const Region in = InputRegion(0, spec.count);
  const Region out = OutputRegion(0, spec.count);
  b->Copy(out, in);
  const int64_t seg = spec.segment_elems;
  const int64_t pieces_per_round = NumSegments(spec.count, seg);
  int rounds = 0;
  for (int mask = 1; mask < fold.p2; mask *= 2) ++rounds;
  // Unsegmented, every round lands the whole buffer in one slot. Segmented, the pieces land
  // in two segment-sized slots in turn (a folded rank keeps the whole slot for its fold).
  const bool pooled = seg > 0 && 2 * seg < spec.count && !fold.Folded(r);
  const Region slot = pooled ? Region{} : b->Scratch(spec.count);
  if (fold.Folded(r)) FoldIn(spec, b, slot);
  SlotPool pool(b, pooled ? pieces_per_round * rounds : 0, std::min(seg, spec.count));
  const int g = fold.NewRank(r);
  const std::vector<Region> segs = SplitSegments(out, seg);
  uint32_t round = 0;
  for (int mask = 1; mask < fold.p2; mask *= 2, ++round) {
    const int peer = fold.OldRank(g ^ mask);
    SendSegments(b, peer, out, seg, kPhaseExchange, round);
    for (size_t s = 0; s < segs.size(); ++s) {
      const Region into =
          pooled ? pool.Next(segs[s].count) : slot.Sub(segs[s].offset - out.offset, segs[s].count);
      b->Recv(peer, MakeTag(kPhaseExchange, round, static_cast<uint32_t>(s)), into);
      b->Reduce(segs[s], into);
    }
  }
  if (fold.Folded(r)) SendSegments(b, r - 1, out, spec.segment_elems, kPhaseFoldOut, 0);
  return Status::Ok();
}

// Rabenseifner: recursive-halving reduce-scatter over p2 balanced chunks, then
// recursive-doubling allgather, inside the same fold as recursive doubling.
Status Rabenseifner(const CollectiveSpec& spec, RankBuilder* b) {
  const Fold fold(spec.world_size);
  const int r = b->rank();
  if (fold.SitsOut(r)) {
    SitOut(spec, b);
    return Status::Ok();
  }
  const Region in = InputRegion(0, spec.count);
  const Region out = OutputRegion(0, spec.count);
  b->Copy(out, in);
  if (fold.Folded(r)) FoldIn(spec, b, b->Scratch(spec.count));
  std::vector<int64_t> bounds(fold.p2 + 1);
  for (int i = 0; i <= fold.p2; ++i) bounds[i] = ChunkOffset(spec.count, fold.p2, i);
  HalvingReduceScatter(b, fold, bounds, out, out, /*acc_ready=*/true, spec.segment_elems,
                       kPhaseHalving);
  DoublingAllgather(b, fold, bounds, out, spec.segment_elems, kPhaseDoubling);
  if (fold.Folded(r)) SendSegments(b, r - 1, out, spec.segment_elems, kPhaseFoldOut, 0);
  return Status::Ok();
}

// Direct: every rank sends its whole buffer to every other rank and reduces the p buffers
// itself. All ranks use the same canonical tree over the same p buffers, so every rank ends
// with the same bits.
Status Direct(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const Region in = InputRegion(0, spec.count);
  const Region out = OutputRegion(0, spec.count);
  b->Copy(out, in);
  // Sent from the output so that the reduction, which writes there, waits for the sends.
  for (int d = 1; d < p; ++d) {
    SendSegments(b, Mod(r + d, p), out, spec.segment_elems, kPhaseDirect, 0);
  }
  std::vector<Region> slots(p);
  for (int q = 0; q < p; ++q) slots[q] = (q == r) ? out : b->Scratch(spec.count);
  for (int d = 1; d < p; ++d) {
    const int q = Mod(r - d, p);
    RecvSegments(b, q, slots[q], spec.segment_elems, kPhaseDirect, 0);
  }
  // One tree per segment, so a segment is reduced once it has arrived from everyone.
  for (const Region& seg : SplitSegments(out, spec.segment_elems)) {
    std::vector<Region> piece(p);
    for (int q = 0; q < p; ++q) piece[q] = slots[q].Sub(seg.offset - out.offset, seg.count);
    CanonicalTree(b, piece, 0, p);
    if (r != 0) b->Copy(seg, piece[0]);
  }
  return Status::Ok();
}

}  // namespace

Status BuildAllreduce(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  if (spec.world_size == 1 && spec.algorithm != Algorithm::kRing &&
      spec.algorithm != Algorithm::kCanonical) {
    b->Copy(OutputRegion(0, spec.count), InputRegion(0, spec.count));
    return Status::Ok();
  }
  switch (spec.algorithm) {
    case Algorithm::kRing:
      return Ring(spec, b);
    case Algorithm::kTree:
      return Tree(spec, b);
    case Algorithm::kRecursiveDoubling:
      return RecursiveDoubling(spec, b);
    case Algorithm::kRabenseifner:
      return Rabenseifner(spec, b);
    case Algorithm::kDirect:
      return Direct(spec, b);
    case Algorithm::kCanonical:
      return Canonical(spec, b);
    case Algorithm::kTwoD:
      return TwoDAllreduce(spec, b);
    case Algorithm::kHierarchical:
      return HierarchicalAllreduce(spec, b);
    default:
      break;
  }
  return InternalError(std::string("allreduce algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

}  // namespace gyre::algo::internal
