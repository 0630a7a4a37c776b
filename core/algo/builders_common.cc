#include <algorithm>
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
  Region slots[2] = {b->Scratch(max_chunk), b->Scratch(max_chunk)};

  // Step s sends the partial sum of chunk (r + k - 1 - s) and receives chunk
  // (r + k - 2 - s), which it folds its own contribution into. The partial sum travels as
  // the received data: acc = received; acc op= mine.
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = Mod(r + k - 1 - s, p);
    const int recv_chunk = Mod(r + k - 2 - s, p);
    const Region send_src = (s == 0) ? src.Chunk(send_chunk) : slots[(s - 1) % 2];
    const int64_t send_count = src.Chunk(send_chunk).count;
    const std::vector<Region> send_segs =
        SplitSegments(send_src.Sub(0, send_count), segment);
    if (send_count > 0) {
      for (size_t g = 0; g < send_segs.size(); ++g) {
        b->Send(next, MakeTag(phase, s, static_cast<uint32_t>(g)), send_segs[g]);
      }
    }
    const Region mine = src.Chunk(recv_chunk);
    if (mine.count == 0) continue;
    const bool last = (s == p - 2);
    if (last) {
      // The final sum lands in dst. dst may alias src (in-place), so start from a copy of
      // this rank's contribution (skipped when aliased) and fold the received sum into it.
      const Region out = dst.Chunk(recv_chunk);
      b->Copy(out, mine);
      const Region slot = slots[s % 2].Sub(0, mine.count);
      const std::vector<Region> segs = SplitSegments(slot, segment);
      for (size_t g = 0; g < segs.size(); ++g) {
        b->Recv(prev, MakeTag(phase, s, static_cast<uint32_t>(g)), segs[g]);
        b->Reduce(out.Sub(segs[g].offset - slot.offset, segs[g].count), segs[g]);
      }
    } else {
      const Region slot = slots[s % 2].Sub(0, mine.count);
      const std::vector<Region> segs = SplitSegments(slot, segment);
      for (size_t g = 0; g < segs.size(); ++g) {
        b->Recv(prev, MakeTag(phase, s, static_cast<uint32_t>(g)), segs[g]);
        b->Reduce(segs[g], mine.Sub(segs[g].offset - slot.offset, segs[g].count));
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
