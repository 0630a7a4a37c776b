// 2-D and hierarchical allreduce. On an a x b grid (a rows of b ranks):
//
//   rank (i, j) = i*b + j        phase 1: ring reduce-scatter along row i, n in b chunks;
//   . . . . b . . .                       (i, j) keeps chunk j, reduced over the row
//   .  row i ---->  .            phase 2: ring reduce-scatter down column j, chunk j in a
//   .     |         .                     pieces; (i, j) keeps piece i, reduced over all
//   a     | col j   .            phase 3: ring allgather down column j (chunk j complete)
//   .     v         .            phase 4: ring allgather along row i (buffer complete)
//
// 2(b-1) + 2(a-1) steps instead of the ring's 2(ab-1), with the same bytes per rank,
// 2(ab-1)/(ab) n. With rows = nodes this is the hierarchical allreduce: the row phases run
// inside a node, and phases 2-3 are the inter-node ring allreduce of each 1/G shard, one
// ring per local index (one rail per ring on a rail-aligned cluster).
#include "core/algo/builders_topo.h"

#include <algorithm>
#include <vector>

#include "core/algo/builders_internal.h"

namespace gyre::algo {
namespace {

// Largest divisor of p that is at most sqrt(p).
int SquareDivisor(int p) {
  int best = 1;
  for (int d = 1; static_cast<int64_t>(d) * d <= p; ++d) {
    if (p % d == 0) best = d;
  }
  return best;
}

}  // namespace

GridShape TwoDGrid(const CollectiveSpec& spec) {
  const int p = std::max(spec.world_size, 1);
  const int rows = spec.grid_rows > 0 ? spec.grid_rows : SquareDivisor(p);
  return GridShape{rows, p / rows};
}

GridShape HierarchicalGrid(const CollectiveSpec& spec) {
  const int p = std::max(spec.world_size, 1);
  const int cols = spec.local_size > 0 ? spec.local_size : SquareDivisor(p);
  return GridShape{p / cols, cols};
}

GridShape AllreduceGrid(const CollectiveSpec& spec) {
  return spec.algorithm == Algorithm::kHierarchical ? HierarchicalGrid(spec) : TwoDGrid(spec);
}

namespace internal {
namespace {

constexpr uint32_t kPhaseRowReduceScatter = 1;
constexpr uint32_t kPhaseColumnReduceScatter = 2;
constexpr uint32_t kPhaseColumnAllgather = 3;
constexpr uint32_t kPhaseRowAllgather = 4;

// A ring among `size` ranks first, first + stride, ...; this rank is at position `pos`.
struct Group {
  int first;
  int stride;
  int size;
  int pos;
  int RankAt(int q) const { return first + stride * Mod(q, size); }
};

// Per chunk, the steps that read it (to order later writes of aliased memory after them).
using ChunkReaders = std::vector<std::vector<int>>;

// The pieces position g.pos receives in GroupReduceScatter, and the largest of them.
struct Landing {
  int64_t pieces = 0;
  int64_t largest = 0;
};
Landing LandingOf(const Group& g, const Chunked& src, int64_t segment) {
  Landing l;
  if (g.size == 1) return l;
  for (int s = 0; s < g.size - 1; ++s) {
    const int64_t mine = src.Chunk(Mod(g.pos - 2 - s, g.size)).count;
    if (mine <= 0) continue;
    l.pieces += NumSegments(mine, segment);
    l.largest = std::max(l.largest, segment > 0 ? std::min(segment, mine) : mine);
  }
  return l;
}

// Ring reduce-scatter among `g` of `src` (chunked into g.size parts) into `dst` (same shape,
// may be the same region): position q ends with dst.Chunk(q) reduced over the group. Step
// s sends the partial sum of chunk pos-1-s to the next position and folds this rank's
// contribution into chunk pos-2-s from the previous one; every received piece lands in the
// next slot of `slots`, which is refilled only after the send that read it. `readers`
// (optional) gets, per chunk, the steps that read src's chunk.
void GroupReduceScatter(RankBuilder* b, const Group& g, const Chunked& src, const Chunked& dst,
                        int64_t segment, uint32_t phase, SlotPool* slots, ChunkReaders* readers) {
  const int m = g.size;
  ChunkReaders unused;
  ChunkReaders& read_by = readers ? *readers : unused;
  read_by.assign(m, {});
  auto note = [&](int chunk, int step) {
    if (step >= 0) read_by[chunk].push_back(step);
  };
  if (m == 1) {
    if (!(dst.Chunk(0) == src.Chunk(0))) note(0, b->Copy(dst.Chunk(0), src.Chunk(0)));
    return;
  }
  const int next = g.RankAt(g.pos + 1);
  const int prev = g.RankAt(g.pos - 1);
  // Step s >= 1 sends each piece of what step s - 1 received right after reducing it, so in
  // program order (from which RankBuilder derives the dependencies) a slot is refilled only
  // after its partial sum was sent.
  for (int s = 0; s < m - 1; ++s) {
    const uint32_t round = static_cast<uint32_t>(s);
    const int send_chunk = Mod(g.pos - 1 - s, m);
    const int recv_chunk = Mod(g.pos - 2 - s, m);
    if (s == 0) {
      for (int step : SendSegments(b, next, src.Chunk(send_chunk), segment, phase, round)) {
        note(send_chunk, step);
      }
    }
    const Region mine = src.Chunk(recv_chunk);
    if (mine.count == 0) continue;
    const std::vector<Region> pieces = SplitSegments(mine, segment);
    if (s == m - 2) {
      // The last step lands the finished chunk in dst: start from this rank's part (dst may
      // be src itself) and fold the partial sum of the other m-1 ranks into it.
      const Region out = dst.Chunk(recv_chunk);
      if (!(out == mine)) note(recv_chunk, b->Copy(out, mine));
      for (size_t k = 0; k < pieces.size(); ++k) {
        const Region slot = slots->Next(pieces[k].count);
        b->Recv(prev, MakeTag(phase, round, static_cast<uint32_t>(k)), slot);
        b->Reduce(out.Sub(pieces[k].offset - mine.offset, pieces[k].count), slot);
      }
    } else {
      for (size_t k = 0; k < pieces.size(); ++k) {
        const Region slot = slots->Next(pieces[k].count);
        b->Recv(prev, MakeTag(phase, round, static_cast<uint32_t>(k)), slot);
        note(recv_chunk, b->Reduce(slot, pieces[k]));
        b->Send(next, MakeTag(phase, round + 1, static_cast<uint32_t>(k)), slot);
      }
    }
  }
}

// Ring allgather among `g` in place on `buf`: position q starts with buf.Chunk(q); step s
// forwards chunk pos-s and receives chunk pos-1-s. A receive into chunk c also waits for
// after[c] (optional): in an in-place call the output chunk is the input chunk those steps
// read, and the order must not rest on the messages alone.
void GroupAllgather(RankBuilder* b, const Group& g, const Chunked& buf, int64_t segment,
                    uint32_t phase, const ChunkReaders* after) {
  const int m = g.size;
  if (m == 1) return;
  const int next = g.RankAt(g.pos + 1);
  const int prev = g.RankAt(g.pos - 1);
  for (int s = 0; s < m - 1; ++s) {
    const uint32_t round = static_cast<uint32_t>(s);
    SendSegments(b, next, buf.Chunk(Mod(g.pos - s, m)), segment, phase, round);
    const int chunk = Mod(g.pos - 1 - s, m);
    const Region recv = buf.Chunk(chunk);
    if (recv.count <= 0) continue;
    const std::vector<Region> segs = SplitSegments(recv, segment);
    for (size_t k = 0; k < segs.size(); ++k) {
      const int step = b->Recv(prev, MakeTag(phase, round, static_cast<uint32_t>(k)), segs[k]);
      if (after != nullptr) {
        for (int reader : (*after)[chunk]) b->AddDep(step, reader);
      }
    }
  }
}

Status GridAllreduce(const CollectiveSpec& spec, GridShape grid, RankBuilder* b) {
  if (grid.rows < 1 || grid.cols < 1 || grid.rows * grid.cols != spec.world_size) {
    return InvalidArgumentError(std::string("allreduce ") + AlgorithmName(spec.algorithm) + ": a " +
                                std::to_string(grid.rows) + " x " + std::to_string(grid.cols) +
                                " grid does not hold " + std::to_string(spec.world_size) +
                                " ranks");
  }
  const int r = b->rank();
  const int i = r / grid.cols;
  const int j = r % grid.cols;
  const Group row{i * grid.cols, 1, grid.cols, j};
  const Group column{j, grid.cols, grid.rows, i};
  const int64_t n = spec.count;
  const int64_t seg = spec.segment_elems;
  const Chunked in{InputRegion(0, n), grid.cols};
  const Chunked out{OutputRegion(0, n), grid.cols};
  const Chunked shard{out.Chunk(j), grid.rows};
  // One set of landing slots serves both reduce-scatters: the column phase refills them
  // once the row phase is done with them.
  const Landing row_landing = LandingOf(row, in, seg);
  const Landing column_landing = LandingOf(column, shard, seg);
  SlotPool slots(b, row_landing.pieces + column_landing.pieces,
                 std::max(row_landing.largest, column_landing.largest));
  ChunkReaders input_readers;
  GroupReduceScatter(b, row, in, out, seg, kPhaseRowReduceScatter, &slots, &input_readers);
  GroupReduceScatter(b, column, shard, shard, seg, kPhaseColumnReduceScatter, &slots, nullptr);
  GroupAllgather(b, column, shard, seg, kPhaseColumnAllgather, nullptr);
  GroupAllgather(b, row, out, seg, kPhaseRowAllgather, &input_readers);
  return Status::Ok();
}

}  // namespace

Status TwoDAllreduce(const CollectiveSpec& spec, RankBuilder* b) {
  return GridAllreduce(spec, TwoDGrid(spec), b);
}

Status HierarchicalAllreduce(const CollectiveSpec& spec, RankBuilder* b) {
  return GridAllreduce(spec, HierarchicalGrid(spec), b);
}

}  // namespace internal
}  // namespace gyre::algo
