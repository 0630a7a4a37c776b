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

// Ring reduce-scatter among `g` of `src` (chunked into g.size parts) into `dst` (same shape,
// may be the same region): position q ends with dst.Chunk(q) reduced over the group. Step
// s sends the partial sum of chunk pos-1-s to the next position and folds this rank's
// contribution into chunk pos-2-s from the previous one; two scratch slots alternate so a
// slot is refilled only after the send that read it. `readers` (optional) gets, per chunk,
// the steps that read src's chunk.
void GroupReduceScatter(RankBuilder* b, const Group& g, const Chunked& src, const Chunked& dst,
                        int64_t segment, uint32_t phase, ChunkReaders* readers) {
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
  int64_t max_chunk = 0;
  for (int c = 0; c < m; ++c) max_chunk = std::max(max_chunk, src.Chunk(c).count);
  const Region slots[2] = {b->Scratch(max_chunk), b->Scratch(max_chunk)};
  for (int s = 0; s < m - 1; ++s) {
    const uint32_t round = static_cast<uint32_t>(s);
    const int send_chunk = Mod(g.pos - 1 - s, m);
    const int recv_chunk = Mod(g.pos - 2 - s, m);
    const int64_t send_count = src.Chunk(send_chunk).count;
    const Region send_src = s == 0 ? src.Chunk(send_chunk) : slots[(s - 1) % 2].Sub(0, send_count);
    for (int step : SendSegments(b, next, send_src, segment, phase, round)) {
      if (s == 0) note(send_chunk, step);
    }
    const Region mine = src.Chunk(recv_chunk);
    if (mine.count == 0) continue;
    const Region slot = slots[s % 2].Sub(0, mine.count);
    const std::vector<Region> segs = SplitSegments(slot, segment);
    if (s == m - 2) {
      // The last step lands the finished chunk in dst: start from this rank's part (dst may
      // be src itself) and fold the partial sum of the other m-1 ranks into it.
      const Region out = dst.Chunk(recv_chunk);
      if (!(out == mine)) note(recv_chunk, b->Copy(out, mine));
      for (size_t k = 0; k < segs.size(); ++k) {
        b->Recv(prev, MakeTag(phase, round, static_cast<uint32_t>(k)), segs[k]);
        b->Reduce(out.Sub(segs[k].offset - slot.offset, segs[k].count), segs[k]);
      }
    } else {
      for (size_t k = 0; k < segs.size(); ++k) {
        b->Recv(prev, MakeTag(phase, round, static_cast<uint32_t>(k)), segs[k]);
        note(recv_chunk, b->Reduce(segs[k], mine.Sub(segs[k].offset - slot.offset, segs[k].count)));
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
  ChunkReaders input_readers;
  GroupReduceScatter(b, row, in, out, seg, kPhaseRowReduceScatter, &input_readers);
  const Chunked shard{out.Chunk(j), grid.rows};
  GroupReduceScatter(b, column, shard, shard, seg, kPhaseColumnReduceScatter, nullptr);
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
