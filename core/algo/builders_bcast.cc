// Broadcast schedules: binomial tree, pipelined chain, scatter + ring allgather,
// hierarchical and linear (docs/algorithms_data.md, "broadcast"). Ranks are numbered relative to
// the root, so every builder treats the root as relative rank 0.
#include <string>
#include <vector>

#include "core/algo/builders_internal.h"
#include "core/algo/builders_topo.h"

namespace gyre::algo::internal {
namespace {

constexpr uint32_t kPhaseTree = 1;
constexpr uint32_t kPhaseChain = 2;
constexpr uint32_t kPhaseScatter = 3;
constexpr uint32_t kPhaseAllgather = 4;
constexpr uint32_t kPhaseInterNode = 5;
constexpr uint32_t kPhaseIntraNode = 6;
constexpr uint32_t kPhaseLinear = 7;

int Absolute(const CollectiveSpec& spec, int v) { return Mod(v + spec.root, spec.world_size); }

// One segment of the output, and where the root sends it from.
struct Segment {
  uint32_t index;
  Region out;
  Region src;  // the root's input, so its sends never wait for its own output copy
};

// The output's segments; on the root, after copying its input to its output.
std::vector<Segment> Segments(const CollectiveSpec& spec, RankBuilder* b, bool is_root) {
  const Region out = OutputRegion(0, spec.count);
  if (is_root) b->Copy(out, InputRegion(0, spec.count));
  std::vector<Segment> segs;
  for (const Region& r : SplitSegments(out, spec.segment_elems)) {
    Segment s{static_cast<uint32_t>(segs.size()), r, r};
    if (is_root) s.src.buffer = BufferId::kInput;
    segs.push_back(s);
  }
  return segs;
}

// The round of a tree edge is the bit that separates parent and child, so a printed
// schedule shows the level each message belongs to.
uint32_t EdgeRound(int parent, int child) {
  return static_cast<uint32_t>(Log2Ceil(child - parent));
}

// Binomial tree, pipelined by segments: each segment is received from the parent, then
// forwarded to the children largest subtree first. The root sends from its input so its
// sends never wait for its own output copy.
Status Binomial(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int v = Mod(b->rank() - spec.root, p);
  const int parent = BinomialParent(v);
  const std::vector<int> children = BinomialChildren(p, v);
  for (const Segment& s : Segments(spec, b, v == 0)) {
    if (v != 0) {
      b->Recv(Absolute(spec, parent), MakeTag(kPhaseTree, EdgeRound(parent, v), s.index), s.out);
    }
    for (int c : children) {
      b->Send(Absolute(spec, c), MakeTag(kPhaseTree, EdgeRound(v, c), s.index), s.src);
    }
  }
  return Status::Ok();
}

// Chain root -> root+1 -> ... -> root-1. Each segment is forwarded as soon as it lands, so
// the p-1 hops overlap and the time is (p-1) hops of one segment plus the whole buffer.
Status Chain(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int v = Mod(b->rank() - spec.root, p);
  for (const Segment& s : Segments(spec, b, v == 0)) {
    const uint64_t tag = MakeTag(kPhaseChain, 0, s.index);
    if (v != 0) b->Recv(Absolute(spec, v - 1), tag, s.out);
    if (v + 1 < p) b->Send(Absolute(spec, v + 1), tag, s.src);
  }
  return Status::Ok();
}

// Binomial scatter of the n/p chunks (chunk v goes to relative rank v, so a subtree's
// chunks are one region), then a ring allgather of the chunks. The root first copies its
// whole input to its output and scatters from the output: its ring receives then write
// only after the scatter sends that read the same memory, which keeps an in-place call
// (input and output the same buffer) race-free.
Status ScatterAllgather(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int64_t n = spec.count;
  const int v = Mod(b->rank() - spec.root, p);
  const Chunked out{OutputRegion(0, n), p};
  auto chunks = [&](int lo, int hi) {
    const int64_t begin = ChunkOffset(n, p, lo);
    return OutputRegion(begin, ChunkOffset(n, p, hi) - begin);
  };
  if (v == 0) b->Copy(out.base, InputRegion(0, n));
  const int parent = BinomialParent(v);
  if (v != 0) {
    const Region mine = chunks(v, v + BinomialExtent(p, v));
    if (mine.count > 0) {
      b->Recv(Absolute(spec, parent), MakeTag(kPhaseScatter, EdgeRound(parent, v), 0), mine);
    }
  }
  for (int c : BinomialChildren(p, v)) {
    const Region sub = chunks(c, c + BinomialExtent(p, c));
    if (sub.count > 0) b->Send(Absolute(spec, c), MakeTag(kPhaseScatter, EdgeRound(v, c), 0), sub);
  }
  // Rank r starts the ring owning chunk (r + k) mod p = its relative rank.
  RingAllgather(b, out, Mod(-spec.root, p), spec.segment_elems, kPhaseAllgather);
  return Status::Ok();
}

// Across nodes of G ranks (rank r on node r / G): a binomial tree over the nodes among the
// ranks that share the root's local index (one inter-node copy per node, on the root's
// rail), then a binomial tree inside every node from that rank. The data crosses the slow
// inter-node links N-1 times in all instead of up to p-1, over log N instead of log p hops.
Status Hierarchical(const CollectiveSpec& spec, RankBuilder* b) {
  const GridShape grid = HierarchicalGrid(spec);
  const int g = grid.cols;
  const int nodes = grid.rows;
  const int node = b->rank() / g;
  const int local = b->rank() % g;
  const int root_node = spec.root / g;
  const int root_local = spec.root % g;
  const int vn = Mod(node - root_node, nodes);  // node-relative
  const int vl = Mod(local - root_local, g);    // local-relative
  auto node_rank = [&](int rel_node) { return Mod(rel_node + root_node, nodes) * g + root_local; };
  auto local_rank = [&](int rel_local) { return node * g + Mod(rel_local + root_local, g); };
  for (const Segment& s : Segments(spec, b, b->rank() == spec.root)) {
    if (vl == 0) {  // on the root's rail: the inter-node tree
      if (vn != 0) {
        const int parent = BinomialParent(vn);
        b->Recv(node_rank(parent), MakeTag(kPhaseInterNode, EdgeRound(parent, vn), s.index), s.out);
      }
      for (int c : BinomialChildren(nodes, vn)) {
        b->Send(node_rank(c), MakeTag(kPhaseInterNode, EdgeRound(vn, c), s.index), s.src);
      }
    } else {
      const int parent = BinomialParent(vl);
      b->Recv(local_rank(parent), MakeTag(kPhaseIntraNode, EdgeRound(parent, vl), s.index), s.out);
    }
    for (int c : BinomialChildren(g, vl)) {
      b->Send(local_rank(c), MakeTag(kPhaseIntraNode, EdgeRound(vl, c), s.index), s.src);
    }
  }
  return Status::Ok();
}

// Linear: the root sends every segment to every other rank itself (segment by segment, in
// relative rank order). One hop for everyone, p-1 copies through the root's port: with few
// ranks and a small buffer, the hops a tree would add cost more than the root's sends.
Status Linear(const CollectiveSpec& spec, RankBuilder* b) {
  const int p = spec.world_size;
  const int v = Mod(b->rank() - spec.root, p);
  for (const Segment& s : Segments(spec, b, v == 0)) {
    const uint64_t tag = MakeTag(kPhaseLinear, 0, s.index);
    if (v != 0) b->Recv(spec.root, tag, s.out);
    for (int c = 1; v == 0 && c < p; ++c) b->Send(Absolute(spec, c), tag, s.src);
  }
  return Status::Ok();
}

}  // namespace

Status BuildBroadcast(const CollectiveSpec& spec, RankBuilder* b) {
  if (spec.count == 0) return Status::Ok();
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
      return Binomial(spec, b);
    case Algorithm::kChain:
      return Chain(spec, b);
    case Algorithm::kScatterAllgather:
      return ScatterAllgather(spec, b);
    case Algorithm::kHierarchical:
      return Hierarchical(spec, b);
    case Algorithm::kLinear:
      return Linear(spec, b);
    default:
      break;
  }
  return InternalError(std::string("broadcast algorithm ") + AlgorithmName(spec.algorithm) +
                       " is not built");
}

}  // namespace gyre::algo::internal
