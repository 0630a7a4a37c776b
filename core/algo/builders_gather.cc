// Allgather, gather, scatter, alltoall and barrier schedules (docs/algorithms_data.md).
// None of them reduces, so every output element is written by exactly one receive or copy
// of a block that some rank contributed.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {
namespace {

constexpr uint32_t kPhaseRing = 1;
constexpr uint32_t kPhaseFold = 2;
constexpr uint32_t kPhaseDoubling = 3;
constexpr uint32_t kPhaseUnfold = 4;
constexpr uint32_t kPhaseBruck = 5;
constexpr uint32_t kPhaseTree = 6;
constexpr uint32_t kPhaseLinear = 7;
constexpr uint32_t kPhasePairwise = 8;
constexpr uint32_t kPhaseDissemination = 9;
constexpr uint32_t kPhaseFanIn = 10;
constexpr uint32_t kPhaseFanOut = 11;

uint32_t EdgeRound(int parent, int child) {
  return static_cast<uint32_t>(Log2Ceil(child - parent));
}

// Copies each (dst, src) pair, merging neighbours whose sources and destinations both
// continue each other, so a run of adjacent blocks costs one step.
void CopyBlocks(RankBuilder* b, const std::vector<std::pair<Region, Region>>& pairs) {
  size_t i = 0;
  while (i < pairs.size()) {
    Region dst = pairs[i].first;
    Region src = pairs[i].second;
    size_t j = i + 1;
    while (j < pairs.size() && pairs[j].first.buffer == dst.buffer &&
           pairs[j].first.offset == dst.offset + dst.count &&
           pairs[j].second.buffer == src.buffer &&
           pairs[j].second.offset == src.offset + src.count) {
      dst.count += pairs[j].first.count;
      src.count += pairs[j].second.count;
      ++j;
    }
    b->Copy(dst, src);
    i = j;
  }
}

// ---- allgather ----

// Ring: own block into place, then p-1 steps passing blocks to r+1.
Status AllgatherRing(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const Chunked out{OutputRegion(0, p * m), p};
  b->Copy(out.Chunk(b->rank()), InputRegion(0, m));
  RingAllgather(b, out, /*k=*/0, spec.segment_elems, kPhaseRing);
  return Status::Ok();
}

// Recursive doubling over p' = 2^floor(log2 p) virtual ranks. For p not a power of two the
// first 2(p - p') ranks fold in pairs: 2i+1 hands its block to 2i, which then acts as
// virtual rank i owning blocks [2i, 2i+2); rank r >= 2(p - p') is virtual rank r - (p - p')
// owning block r. Virtual ranks own contiguous, increasing block ranges, so the blocks of
// any aligned group of virtual ranks form one region and every message is one region.
// At the end 2i sends 2i+1 the blocks it lacks (two regions, around its own block).
Status AllgatherRecursiveDoubling(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t m = spec.count;
  const int pp = static_cast<int>(PowerOfTwoFloor(p));
  const int extra = p - pp;
  b->Copy(OutputRegion(r * m, m), InputRegion(0, m));
  // First block owned by virtual rank u (u == pp gives p).
  auto first_block = [&](int u) -> int64_t { return u + std::min(u, extra); };
  auto group = [&](int base, int size) {
    const int64_t lo = first_block(base);
    return OutputRegion(lo * m, (first_block(base + size) - lo) * m);
  };
  auto real_rank = [&](int u) { return u < extra ? 2 * u : u + extra; };

  if (r < 2 * extra && r % 2 == 1) {
    b->Send(r - 1, MakeTag(kPhaseFold, 0, 0), InputRegion(0, m));
    b->Recv(r - 1, MakeTag(kPhaseUnfold, 0, 0), OutputRegion(0, r * m));
    b->Recv(r - 1, MakeTag(kPhaseUnfold, 0, 1), OutputRegion((r + 1) * m, (p - r - 1) * m));
    return Status::Ok();
  }
  if (r < 2 * extra) b->Recv(r + 1, MakeTag(kPhaseFold, 0, 0), OutputRegion((r + 1) * m, m));
  const int v = (r < 2 * extra) ? r / 2 : r - extra;
  for (int dist = 1, k = 0; dist < pp; dist *= 2, ++k) {
    const int partner = v ^ dist;
    const int mine = v & ~(dist - 1);
    const int theirs = partner & ~(dist - 1);
    const uint64_t tag = MakeTag(kPhaseDoubling, static_cast<uint32_t>(k), 0);
    b->Send(real_rank(partner), tag, group(mine, dist));
    b->Recv(real_rank(partner), tag, group(theirs, dist));
  }
  if (r < 2 * extra) {
    b->Send(r + 1, MakeTag(kPhaseUnfold, 0, 0), OutputRegion(0, (r + 1) * m));
    b->Send(r + 1, MakeTag(kPhaseUnfold, 0, 1), OutputRegion((r + 2) * m, (p - r - 2) * m));
  }
  return Status::Ok();
}

// Bruck: in scratch, rank r collects blocks r, r+1, ... (mod p). Round k sends the first
// min(2^k, p - 2^k) collected blocks to r - 2^k and appends as many from r + 2^k; a final
// rotation (two copies) puts block r+i at its absolute place. A short last round may need
// only blocks that arrived rounds ago; it still goes out after the previous round's send,
// the order one send port imposes anyway, which keeps the time one closed form.
Status AllgatherBruck(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t m = spec.count;
  if (p == 1) {
    b->Copy(OutputRegion(0, m), InputRegion(0, m));
    return Status::Ok();
  }
  const Region collected = b->Scratch(p * m);
  b->Copy(collected.Sub(0, m), InputRegion(0, m));
  int previous_send = -1;
  for (int64_t dist = 1, k = 0; dist < p; dist *= 2, ++k) {
    const int64_t blocks = std::min<int64_t>(dist, p - dist);
    const uint64_t tag = MakeTag(kPhaseBruck, static_cast<uint32_t>(k), 0);
    const int send = b->Send(Mod(r - dist, p), tag, collected.Sub(0, blocks * m));
    b->AddDep(send, previous_send);
    previous_send = send;
    b->Recv(Mod(r + dist, p), tag, collected.Sub(dist * m, blocks * m));
  }
  const int64_t head = p - r;  // blocks r..p-1 come first
  b->Copy(OutputRegion(r * m, head * m), collected.Sub(0, head * m));
  b->Copy(OutputRegion(0, r * m), collected.Sub(head * m, r * m));
  return Status::Ok();
}

// ---- gather / scatter ----

// The absolute blocks of the relative block range [lo, hi): one region, or two when the
// range wraps past rank p-1.
std::vector<Region> AbsoluteBlocks(const CollectiveSpec& spec, BufferId buffer, int lo, int hi) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const int first = Mod(lo + spec.root, p);
  const int len = hi - lo;
  if (first + len <= p) return {Region{buffer, first * m, len * m}};
  return {Region{buffer, first * m, (p - first) * m}, Region{buffer, 0, (first + len - p) * m}};
}

// Binomial gather over relative ranks: a rank collects its subtree's blocks (relative
// order) in scratch and sends them to its parent in one message; leaves send their input
// directly. The root receives each child's range straight into its output unless the
// range wraps, in which case it lands in scratch and two copies rotate it into place.
Status GatherBinomial(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const int v = Mod(b->rank() - spec.root, p);
  auto absolute = [&](int u) { return Mod(u + spec.root, p); };
  const std::vector<int> children = BinomialChildren(p, v);
  if (v == 0) {
    b->Copy(OutputRegion(spec.root * m, m), InputRegion(0, m));
    for (int c : children) {
      const int ext = BinomialExtent(p, c);
      const uint64_t tag = MakeTag(kPhaseTree, EdgeRound(0, c), 0);
      const std::vector<Region> dst = AbsoluteBlocks(spec, BufferId::kOutput, c, c + ext);
      if (dst.size() == 1) {
        b->Recv(absolute(c), tag, dst[0]);
        continue;
      }
      const Region landing = b->Scratch(ext * m);
      b->Recv(absolute(c), tag, landing);
      b->Copy(dst[0], landing.Sub(0, dst[0].count));
      b->Copy(dst[1], landing.Sub(dst[0].count, dst[1].count));
    }
    return Status::Ok();
  }
  const int parent = BinomialParent(v);
  const uint64_t up = MakeTag(kPhaseTree, EdgeRound(parent, v), 0);
  if (children.empty()) {
    b->Send(absolute(parent), up, InputRegion(0, m));
    return Status::Ok();
  }
  const Region subtree = b->Scratch(BinomialExtent(p, v) * m);
  b->Copy(subtree.Sub(0, m), InputRegion(0, m));
  for (int c : children) {
    b->Recv(absolute(c), MakeTag(kPhaseTree, EdgeRound(v, c), 0),
            subtree.Sub((c - v) * m, BinomialExtent(p, c) * m));
  }
  b->Send(absolute(parent), up, subtree);
  return Status::Ok();
}

// Binomial scatter: the mirror of the gather. The root sends each child its subtree's
// blocks largest subtree first, from its input, packing a wrapping range into scratch with
// two copies; inner ranks receive their subtree into scratch and forward the parts.
Status ScatterBinomial(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const int v = Mod(b->rank() - spec.root, p);
  auto absolute = [&](int u) { return Mod(u + spec.root, p); };
  const std::vector<int> children = BinomialChildren(p, v);
  const Region out = OutputRegion(0, m);
  if (v == 0) {
    b->Copy(out, InputRegion(spec.root * m, m));
    for (int c : children) {
      const int ext = BinomialExtent(p, c);
      const uint64_t tag = MakeTag(kPhaseTree, EdgeRound(0, c), 0);
      const std::vector<Region> src = AbsoluteBlocks(spec, BufferId::kInput, c, c + ext);
      if (src.size() == 1) {
        b->Send(absolute(c), tag, src[0]);
        continue;
      }
      const Region packed = b->Scratch(ext * m);
      b->Copy(packed.Sub(0, src[0].count), src[0]);
      b->Copy(packed.Sub(src[0].count, src[1].count), src[1]);
      b->Send(absolute(c), tag, packed);
    }
    return Status::Ok();
  }
  const int parent = BinomialParent(v);
  const uint64_t down = MakeTag(kPhaseTree, EdgeRound(parent, v), 0);
  if (children.empty()) {
    b->Recv(absolute(parent), down, out);
    return Status::Ok();
  }
  const Region subtree = b->Scratch(BinomialExtent(p, v) * m);
  b->Recv(absolute(parent), down, subtree);
  b->Copy(out, subtree.Sub(0, m));
  for (int c : children) {
    b->Send(absolute(c), MakeTag(kPhaseTree, EdgeRound(v, c), 0),
            subtree.Sub((c - v) * m, BinomialExtent(p, c) * m));
  }
  return Status::Ok();
}

// Linear gather: every rank sends its block to the root, which receives them all at once.
Status GatherLinear(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const uint64_t tag = MakeTag(kPhaseLinear, 0, 0);
  if (b->rank() != spec.root) {
    b->Send(spec.root, tag, InputRegion(0, m));
    return Status::Ok();
  }
  b->Copy(OutputRegion(spec.root * m, m), InputRegion(0, m));
  for (int d = 1; d < p; ++d) {
    const int q = Mod(spec.root + d, p);
    b->Recv(q, tag, OutputRegion(q * m, m));
  }
  return Status::Ok();
}

// Linear scatter: the root sends each rank its block, in relative rank order.
Status ScatterLinear(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t m = spec.count;
  const uint64_t tag = MakeTag(kPhaseLinear, 0, 0);
  if (b->rank() != spec.root) {
    b->Recv(spec.root, tag, OutputRegion(0, m));
    return Status::Ok();
  }
  b->Copy(OutputRegion(0, m), InputRegion(spec.root * m, m));
  for (int d = 1; d < p; ++d) {
    const int q = Mod(spec.root + d, p);
    b->Send(q, tag, InputRegion(q * m, m));
  }
  return Status::Ok();
}

// ---- alltoall ----

// Pairwise: step s sends the block for r+s and receives the block from r-s. The steps touch
// disjoint blocks, so they carry no dependencies and the executor overlaps them; the
// staggered peers spread the load so no rank is everyone's target at once.
Status AlltoallPairwise(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t m = spec.count;
  b->Copy(OutputRegion(r * m, m), InputRegion(r * m, m));
  for (int s = 1; s < p; ++s) {
    const int to = Mod(r + s, p);
    const int from = Mod(r - s, p);
    const uint64_t tag = MakeTag(kPhasePairwise, static_cast<uint32_t>(s), 0);
    b->Send(to, tag, InputRegion(to * m, m));
    b->Recv(from, tag, OutputRegion(from * m, m));
  }
  return Status::Ok();
}

// Bruck: slot i of rank r starts as the block for rank r+i. Round k moves every slot whose
// index has bit k set to rank r + 2^k (same slot), so after all rounds slot i holds the
// block that rank r-i sent to r. A round packs its slots into one scratch region with
// copies, sends it, receives the same slots from r - 2^k and unpacks them. A slot whose
// round k is its highest set bit has arrived for good, so it is unpacked straight into its
// final place out[r - i]: that is the inverse rotation, with no extra pass.
Status AlltoallBruck(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const int64_t m = spec.count;
  b->Copy(OutputRegion(r * m, m), InputRegion(r * m, m));
  if (p == 1) return Status::Ok();
  int64_t max_slots = 0;
  for (int64_t bit = 1; bit < p; bit *= 2) {
    int64_t n = 0;
    for (int i = 1; i < p; ++i) n += (i & bit) ? 1 : 0;
    max_slots = std::max(max_slots, n);
  }
  const Region pack = b->Scratch(max_slots * m);
  const Region unpack = b->Scratch(max_slots * m);
  const Region held = b->Scratch(p * m);  // slot i while it still has hops to make
  std::vector<Region> where(p);
  for (int i = 0; i < p; ++i) where[i] = InputRegion(Mod(r + i, p) * m, m);
  for (int64_t bit = 1, k = 0; bit < p; bit *= 2, ++k) {
    std::vector<int> slots;
    for (int i = 1; i < p; ++i) {
      if (i & bit) slots.push_back(i);
    }
    std::vector<std::pair<Region, Region>> packing;
    for (size_t j = 0; j < slots.size(); ++j) {
      packing.emplace_back(pack.Sub(j * m, m), where[slots[j]]);
    }
    CopyBlocks(b, packing);
    const int64_t count = static_cast<int64_t>(slots.size()) * m;
    const uint64_t tag = MakeTag(kPhaseBruck, static_cast<uint32_t>(k), 0);
    b->Send(Mod(r + bit, p), tag, pack.Sub(0, count));
    b->Recv(Mod(r - bit, p), tag, unpack.Sub(0, count));
    std::vector<std::pair<Region, Region>> unpacking;
    for (size_t j = 0; j < slots.size(); ++j) {
      const int i = slots[j];
      const bool last_hop = i < 2 * bit;
      where[i] = last_hop ? OutputRegion(Mod(r - i, p) * m, m) : held.Sub(i * m, m);
      unpacking.emplace_back(where[i], unpack.Sub(j * m, m));
    }
    CopyBlocks(b, unpacking);
  }
  return Status::Ok();
}

}  // namespace

Status BuildAllgather(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kRing:
      return AllgatherRing(spec, b);
    case Algorithm::kRecursiveDoubling:
      return AllgatherRecursiveDoubling(spec, b);
    case Algorithm::kBruck:
      return AllgatherBruck(spec, b);
    default:
      break;
  }
  return InternalError(std::string("allgather algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

Status BuildGather(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
      return GatherBinomial(spec, b);
    case Algorithm::kLinear:
      return GatherLinear(spec, b);
    default:
      break;
  }
  return InternalError(std::string("gather algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

Status BuildScatter(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
      return ScatterBinomial(spec, b);
    case Algorithm::kLinear:
      return ScatterLinear(spec, b);
    default:
      break;
  }
  return InternalError(std::string("scatter algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

Status BuildAlltoall(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kPairwise:
      return AlltoallPairwise(spec, b);
    case Algorithm::kBruck:
      return AlltoallBruck(spec, b);
    default:
      break;
  }
  return InternalError(std::string("alltoall algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

// Dissemination: in round k every rank signals r + 2^k and waits for r - 2^k. Round k's
// signal goes out only after round k-1's arrived and after round k-1's signal (so, by
// induction, after every earlier arrival), so after ceil(log2 p) rounds each rank has
// heard, transitively, from every rank. The messages carry no data, so the ordering is
// explicit rather than derived from regions.
namespace {

Status DisseminationBarrier(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const Region nothing = b->Scratch(0);
  int previous_send = -1;
  int previous_recv = -1;
  for (int64_t dist = 1, k = 0; dist < p; dist *= 2, ++k) {
    const uint64_t tag = MakeTag(kPhaseDissemination, static_cast<uint32_t>(k), 0);
    const int send = b->Send(Mod(r + dist, p), tag, nothing);
    b->AddDep(send, previous_recv);
    b->AddDep(send, previous_send);
    previous_send = send;
    previous_recv = b->Recv(Mod(r - dist, p), tag, nothing);
  }
  return Status::Ok();
}

// Binomial tree rooted at rank 0: a rank tells its parent once every child has told it
// (fan-in), and releases its children once its parent released it (fan-out); rank 0 turns
// the fan-in into the fan-out. Twice dissemination's rounds on the critical path, but half
// its messages (2(p-1) in all), and ranks leave in tree order from rank 0, the root of most
// rooted calls and of the release, rather than in an order set by the scheduler.
Status BinomialBarrier(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const Region nothing = b->Scratch(0);
  const int parent = BinomialParent(r);
  const std::vector<int> children = BinomialChildren(p, r);
  std::vector<int> arrivals;
  for (int c : children) arrivals.push_back(b->Recv(c, MakeTag(kPhaseFanIn, 0, 0), nothing));
  int released = -1;
  if (parent >= 0) {
    const int up = b->Send(parent, MakeTag(kPhaseFanIn, 0, 0), nothing);
    for (int a : arrivals) b->AddDep(up, a);
    released = b->Recv(parent, MakeTag(kPhaseFanOut, 0, 0), nothing);
    b->AddDep(released, up);
  }
  for (int c : children) {
    const int down = b->Send(c, MakeTag(kPhaseFanOut, 0, 0), nothing);
    if (released >= 0) {
      b->AddDep(down, released);
    } else {
      for (int a : arrivals) b->AddDep(down, a);
    }
  }
  return Status::Ok();
}

// Linear: every rank signals rank 0, which releases them all once every signal is in. The
// fewest messages (2(p-1)) and two hops deep, but rank 0 handles p-1 of each.
Status LinearBarrier(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int r = b->rank();
  const Region nothing = b->Scratch(0);
  if (r != 0) {
    const int up = b->Send(0, MakeTag(kPhaseFanIn, 0, 0), nothing);
    const int released = b->Recv(0, MakeTag(kPhaseFanOut, 0, 0), nothing);
    b->AddDep(released, up);
    return Status::Ok();
  }
  std::vector<int> arrivals;
  for (int q = 1; q < p; ++q) arrivals.push_back(b->Recv(q, MakeTag(kPhaseFanIn, 0, 0), nothing));
  for (int q = 1; q < p; ++q) {
    const int down = b->Send(q, MakeTag(kPhaseFanOut, 0, 0), nothing);
    for (int a : arrivals) b->AddDep(down, a);
  }
  return Status::Ok();
}

}  // namespace

Status BuildBarrier(const CollectiveSpec& spec, RankBuilder* b) {
  switch (spec.algorithm) {
    case Algorithm::kDissemination:
      return DisseminationBarrier(spec, b);
    case Algorithm::kBinomial:
      return BinomialBarrier(spec, b);
    case Algorithm::kLinear:
      return LinearBarrier(spec, b);
    default:
      return InternalError(std::string("barrier algorithm ") + AlgorithmName(spec.algorithm) +
                           " is not built");
  }
}

}  // namespace gyre::algo::internal
