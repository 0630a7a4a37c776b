#include <algorithm>
#include <memory>
#include <vector>

#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {

int64_t PowerOfTwoFloor(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

int Log2Ceil(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}

SlotPool::SlotPool(RankBuilder* b, int64_t pieces, int64_t slot_count, int slots) {
  const int64_t k = std::min<int64_t>(slots, pieces);
  for (int64_t i = 0; i < k; ++i) slots_.push_back(b->Scratch(slot_count));
}

Region SlotPool::Next(int64_t count) {
  const Region slot = slots_[next_ % slots_.size()];
  ++next_;
  return slot.Sub(0, count);
}

void RingReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst, int k,
                       int64_t segment, uint32_t phase) {
  const int p = b->world_size();
  const int r = b->rank();
  if (p == 1) {
    b->Copy(dst.Chunk(0), src.Chunk(0));
    return;
  }
  const int next = Mod(r + 1, p);
  const int prev = Mod(r - 1, p);
  int64_t max_chunk = 0;
  for (int c = 0; c < p; ++c) max_chunk = std::max(max_chunk, src.Chunk(c).count);
  int64_t pieces = 0;
  for (int s = 0; s < p - 1; ++s) {
    const int64_t mine = src.Chunk(Mod(r + k - 2 - s, p)).count;
    if (mine > 0) pieces += NumSegments(mine, segment);
  }
  // Received pieces land in two slots in turn; a partial sum stays in its slot until the next
  // step has sent it on.
  SlotPool slots(b, pieces, segment > 0 ? std::min(segment, max_chunk) : max_chunk);

  // Step s sends the partial sum of chunk (r + k - 1 - s) and receives chunk
  // (r + k - 2 - s), which it folds its own contribution into. The partial sum travels as
  // the received data: acc = received; acc op= mine. Step s >= 1 sends each piece of what
  // step s - 1 received right after reducing it, so in program order (from which RankBuilder
  // derives the dependencies) a slot is refilled only after its partial sum was sent.
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = Mod(r + k - 1 - s, p);
    const int recv_chunk = Mod(r + k - 2 - s, p);
    if (s == 0 && src.Chunk(send_chunk).count > 0) {
      const std::vector<Region> send_segs = SplitSegments(src.Chunk(send_chunk), segment);
      for (size_t g = 0; g < send_segs.size(); ++g) {
        b->Send(next, MakeTag(phase, s, static_cast<uint32_t>(g)), send_segs[g]);
      }
    }
    const Region mine = src.Chunk(recv_chunk);
    if (mine.count == 0) continue;
    const bool last = (s == p - 2);
    const std::vector<Region> pieces_of_mine = SplitSegments(mine, segment);
    if (last) {
      // The final sum lands in dst. dst may alias src (in-place), so start from a copy of
      // this rank's contribution (skipped when aliased) and fold the received sum into it.
      const Region out = dst.Chunk(recv_chunk);
      b->Copy(out, mine);
      for (size_t g = 0; g < pieces_of_mine.size(); ++g) {
        const Region piece = pieces_of_mine[g];
        const Region slot = slots.Next(piece.count);
        b->Recv(prev, MakeTag(phase, s, static_cast<uint32_t>(g)), slot);
        b->Reduce(out.Sub(piece.offset - mine.offset, piece.count), slot);
      }
    } else {
      for (size_t g = 0; g < pieces_of_mine.size(); ++g) {
        const Region slot = slots.Next(pieces_of_mine[g].count);
        b->Recv(prev, MakeTag(phase, s, static_cast<uint32_t>(g)), slot);
        b->Reduce(slot, pieces_of_mine[g]);
        b->Send(next, MakeTag(phase, s + 1, static_cast<uint32_t>(g)), slot);
      }
    }
  }
}

void RingAllgather(RankBuilder* b, const Chunked& buf, int k, int64_t segment, uint32_t phase) {
  const int p = b->world_size();
  const int r = b->rank();
  if (p == 1) return;
  const int next = Mod(r + 1, p);
  const int prev = Mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const Region send = buf.Chunk(Mod(r + k - s, p));
    const Region recv = buf.Chunk(Mod(r + k - s - 1, p));
    if (send.count > 0) {
      const std::vector<Region> segs = SplitSegments(send, segment);
      for (size_t g = 0; g < segs.size(); ++g) {
        b->Send(next, MakeTag(phase, s, static_cast<uint32_t>(g)), segs[g]);
      }
    }
    if (recv.count > 0) {
      const std::vector<Region> segs = SplitSegments(recv, segment);
      for (size_t g = 0; g < segs.size(); ++g) {
        b->Recv(prev, MakeTag(phase, s, static_cast<uint32_t>(g)), segs[g]);
      }
    }
  }
}

void CanonicalTree(RankBuilder* b, const std::vector<Region>& slots, int lo, int hi) {
  if (hi - lo <= 1) return;
  const int mid = lo + static_cast<int>(PowerOfTwoFloor(hi - lo - 1));
  CanonicalTree(b, slots, lo, mid);
  CanonicalTree(b, slots, mid, hi);
  b->Reduce(slots[lo], slots[mid]);
}

void CanonicalReduceScatter(RankBuilder* b, const Chunked& src, const Chunked& dst,
                            uint32_t phase) {
  const int p = b->world_size();
  const int r = b->rank();
  // Send my piece of every other rank's chunk.
  for (int d = 1; d < p; ++d) {
    const int q = Mod(r + d, p);
    const Region piece = src.Chunk(q);
    if (piece.count > 0) b->Send(q, MakeTag(phase, 0, static_cast<uint32_t>(r)), piece);
  }
  const Region own = src.Chunk(r);
  if (own.count == 0) return;
  std::vector<Region> slots(p);
  for (int q = 0; q < p; ++q) slots[q] = b->Scratch(own.count);
  b->Copy(slots[r], own);
  for (int d = 1; d < p; ++d) {
    const int q = Mod(r - d, p);
    b->Recv(q, MakeTag(phase, 0, static_cast<uint32_t>(q)), slots[q]);
  }
  CanonicalTree(b, slots, 0, p);
  b->Copy(dst.Chunk(r), slots[0]);
}

}  // namespace gyre::algo::internal

namespace gyre::algo::internal {

int BinomialParent(int v) { return v == 0 ? -1 : (v & (v - 1)); }

int BinomialExtent(int p, int v) {
  if (v == 0) return p;
  return std::min(v & -v, p - v);
}

std::vector<int> BinomialChildren(int p, int v) {
  std::vector<int> children;
  const int64_t limit = (v == 0) ? p : (v & -v);
  int64_t mask = 1;
  while (mask * 2 < limit) mask *= 2;
  for (; mask >= 1; mask /= 2) {
    if (mask < limit && v + mask < p) children.push_back(v + static_cast<int>(mask));
  }
  return children;
}

}  // namespace gyre::algo::internal

namespace gyre::algo::internal {

std::vector<int> SendSegments(RankBuilder* b, int peer, Region src, int64_t segment, uint32_t phase,
                              uint32_t round) {
  std::vector<int> steps;
  if (src.count <= 0) return steps;
  const std::vector<Region> segs = SplitSegments(src, segment);
  for (size_t g = 0; g < segs.size(); ++g) {
    steps.push_back(b->Send(peer, MakeTag(phase, round, static_cast<uint32_t>(g)), segs[g]));
  }
  return steps;
}

std::vector<int> RecvSegments(RankBuilder* b, int peer, Region dst, int64_t segment, uint32_t phase,
                              uint32_t round) {
  std::vector<int> steps;
  if (dst.count <= 0) return steps;
  const std::vector<Region> segs = SplitSegments(dst, segment);
  for (size_t g = 0; g < segs.size(); ++g) {
    steps.push_back(b->Recv(peer, MakeTag(phase, round, static_cast<uint32_t>(g)), segs[g]));
  }
  return steps;
}

void BinomialReduce(RankBuilder* b, int root, Region src, const Region* acc, int64_t segment,
                    uint32_t phase) {
  if (src.count <= 0) return;
  const int p = b->world_size();
  const int v = Mod(b->rank() - root, p);
  auto rank_of = [&](int rel) { return Mod(rel + root, p); };
  auto level_of = [](int mask) {  // round number of the edge whose mask is `mask`
    uint32_t k = 0;
    while ((1 << k) < mask) ++k;
    return k;
  };
  std::vector<int> children = BinomialChildren(p, v);
  std::reverse(children.begin(), children.end());
  const int parent = BinomialParent(v);
  const bool accumulates = acc != nullptr || !children.empty();
  const Region work = acc ? *acc : (children.empty() ? src : b->Scratch(src.count));
  Region slots[2];
  for (size_t i = 0; i < std::min<size_t>(children.size(), 2); ++i) {
    slots[i] = b->Scratch(src.count);
  }
  const std::vector<Region> segs = SplitSegments(src, segment);
  for (size_t g = 0; g < segs.size(); ++g) {
    const int64_t off = segs[g].offset - src.offset;
    const int64_t len = segs[g].count;
    const Region mine = work.Sub(off, len);
    if (accumulates) b->Copy(mine, segs[g]);
    for (size_t i = 0; i < children.size(); ++i) {
      const Region slot = slots[i % 2].Sub(off, len);
      b->Recv(rank_of(children[i]),
              MakeTag(phase, level_of(children[i] - v), static_cast<uint32_t>(g)), slot);
      b->Reduce(mine, slot);
    }
    if (parent >= 0) {
      b->Send(rank_of(parent), MakeTag(phase, level_of(v - parent), static_cast<uint32_t>(g)),
              mine);
    }
  }
}

void HalvingReduceScatter(RankBuilder* b, const Fold& fold, const std::vector<int64_t>& bounds,
                          Region src, Region acc, bool acc_ready, int64_t segment, uint32_t phase) {
  const int g = fold.NewRank(b->rank());
  Region slot;
  int64_t slot_origin = -1;  // buffer offset that slot's element 0 mirrors
  int lo = 0;                // current range of groups: [lo, lo + 2m)
  uint32_t round = 0;
  // Unsegmented, one slot of the first kept range holds every round's landing (each later
  // range nests inside it). Segmented, the pieces land in two segment-sized slots in turn.
  std::unique_ptr<SlotPool> pool;
  if (acc_ready && segment > 0) {
    int64_t pieces = 0, largest = 0, first_kept = -1;
    int at = 0;
    for (int m = fold.p2 / 2; m >= 1; m /= 2) {
      const int keep_lo = at + ((g & m) ? m : 0);
      const int64_t keep_n = bounds[keep_lo + m] - bounds[keep_lo];
      if (keep_n > 0) {
        if (first_kept < 0) first_kept = keep_n;
        pieces += NumSegments(keep_n, segment);
        largest = std::max(largest, std::min(segment, keep_n));
      }
      at = keep_lo;
    }
    if (std::min<int64_t>(pieces, 2) * largest < first_kept) {
      pool = std::make_unique<SlotPool>(b, pieces, largest);
    }
  }
  for (int m = fold.p2 / 2; m >= 1; m /= 2, ++round) {
    const int keep_lo = lo + ((g & m) ? m : 0);
    const int send_lo = lo + ((g & m) ? 0 : m);
    const int64_t keep_off = bounds[keep_lo];
    const int64_t keep_n = bounds[keep_lo + m] - keep_off;
    const int64_t send_off = bounds[send_lo];
    const int64_t send_n = bounds[send_lo + m] - send_off;
    const int peer = fold.OldRank(g ^ m);
    SendSegments(b, peer, (acc_ready ? acc : src).Sub(send_off, send_n), segment, phase, round);
    if (keep_n > 0) {
      // A piece is reduced as soon as it lands, so the next piece's transfer overlaps it.
      if (acc_ready && pool == nullptr && slot_origin < 0) {
        slot = b->Scratch(keep_n);
        slot_origin = keep_off;
      }
      const Region kept = acc.Sub(keep_off, keep_n);
      const Region land = !acc_ready ? kept
                          : pool     ? kept  // only cut into pieces; each lands in the pool
                                     : slot.Sub(keep_off - slot_origin, keep_n);
      const std::vector<Region> segs = SplitSegments(land, segment);
      for (size_t s = 0; s < segs.size(); ++s) {
        const int64_t at = keep_off + (segs[s].offset - land.offset);
        const Region into = (acc_ready && pool) ? pool->Next(segs[s].count) : segs[s];
        b->Recv(peer, MakeTag(phase, round, static_cast<uint32_t>(s)), into);
        if (acc_ready) {
          b->Reduce(acc.Sub(at, segs[s].count), into);
        } else {
          b->Reduce(segs[s], src.Sub(at, segs[s].count));
        }
      }
    }
    // Every later range lies inside the kept one, which acc now holds.
    acc_ready = true;
    lo = keep_lo;
  }
}

void DoublingAllgather(RankBuilder* b, const Fold& fold, const std::vector<int64_t>& bounds,
                       Region buf, int64_t segment, uint32_t phase) {
  const int g = fold.NewRank(b->rank());
  uint32_t round = 0;
  for (int m = 1; m < fold.p2; m *= 2, ++round) {
    const int h = g ^ m;
    const int mine = (g / m) * m;
    const int theirs = (h / m) * m;
    const int peer = fold.OldRank(h);
    SendSegments(b, peer, buf.Sub(bounds[mine], bounds[mine + m] - bounds[mine]), segment, phase,
                 round);
    RecvSegments(b, peer, buf.Sub(bounds[theirs], bounds[theirs + m] - bounds[theirs]), segment,
                 phase, round);
  }
}

}  // namespace gyre::algo::internal
