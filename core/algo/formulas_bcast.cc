// Closed forms of the broadcast algorithms (docs/algorithms_data.md, "broadcast"). The
// times are the critical path under cost.h's model: one send port per rank, sends served in
// the order they become ready, copies free.
#include <algorithm>
#include <string>

#include "core/algo/builders_internal.h"
#include "core/algo/builders_topo.h"
#include "core/algo/formulas.h"

namespace gyre::algo::internal {
namespace {

int TrailingZeros(int64_t v) {
  int z = 0;
  while ((v & 1) == 0) {
    v >>= 1;
    ++z;
  }
  return z;
}

// Children of relative rank v in the binomial tree of builders_internal.h: every 2^j below
// v's lowest set bit with v + 2^j < p, i.e. j < min(tz(v), ceil(log2(p - v))).
int64_t BinomialChildCount(int64_t p, int64_t v) {
  if (v == 0) return Log2Ceil(p);
  return std::min<int64_t>(TrailingZeros(v), Log2Ceil(p - v));
}

int64_t BinomialSubtree(int64_t p, int64_t v) { return v == 0 ? p : std::min(v & -v, p - v); }

}  // namespace

StatusOr<ClosedForm> BroadcastTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  const int64_t v = Mod(rank - spec.root, p);
  ClosedForm f;
  if (p == 1 || n == 0) return f;
  const int64_t levels = Log2Ceil(p);
  // Hops on the deepest root-to-leaf path: floor(log2 p). Every rank below the root has at
  // most levels-1 children, so it forwards a segment before the root's next one reaches it
  // and the root's port, sending levels copies of the buffer, sets the bandwidth term.
  const int64_t depth = IsPowerOfTwo(p) ? levels : levels - 1;
  const int64_t segments = NumSegments(n, spec.segment_elems);
  switch (spec.algorithm) {
    case Algorithm::kBinomial: {
      const int64_t children = BinomialChildCount(p, v);
      const int64_t parents = v == 0 ? 0 : 1;
      f.traffic = {children * segments, parents * segments, children * n, parents * n};
      f.alpha_terms = static_cast<double>(depth);
      f.beta_elems = static_cast<double>(levels * n);
      return f;
    }
    case Algorithm::kChain: {
      const int64_t sends = v + 1 < p ? 1 : 0;
      const int64_t recvs = v > 0 ? 1 : 0;
      f.traffic = {sends * segments, recvs * segments, sends * n, recvs * n};
      // The last rank gets the first segment after p-1 hops and the rest stream behind it
      // at the port's pace: (p-1) alpha + (n + (p-2) * segment) beta, the short last
      // segment included.
      const int64_t segment = segments == 1 ? n : spec.segment_elems;
      f.alpha_terms = static_cast<double>(p - 1);
      f.beta_elems = static_cast<double>(n + (p - 2) * segment);
      return f;
    }
    case Algorithm::kScatterAllgather: {
      const int64_t m = n / p;
      const int64_t ring_segments = NumSegments(m, spec.segment_elems);
      const int64_t subtree = BinomialSubtree(p, v);
      const int64_t children = BinomialChildCount(p, v);
      const int64_t parents = v == 0 ? 0 : 1;
      f.traffic.msgs_sent = children + (p - 1) * ring_segments;
      f.traffic.msgs_recv = parents + (p - 1) * ring_segments;
      f.traffic.elems_sent = (subtree - 1) * m + (p - 1) * m;
      f.traffic.elems_recv = parents * subtree * m + (p - 1) * m;
      // Binomial scatter (as the scatter collective: depth alpha + (p-1) n/p beta), then
      // the ring: the chunk the scatter delivers last still makes p-1 hops of
      // alpha + (n/p) beta, none of them delayed by a busy port, so the phases add up.
      f.alpha_terms = static_cast<double>(depth + p - 1);
      f.beta_elems = 2.0 * static_cast<double>(p - 1) * static_cast<double>(n) / p;
      return f;
    }
    case Algorithm::kLinear: {
      const int64_t sends = v == 0 ? p - 1 : 0;
      const int64_t recvs = v == 0 ? 0 : 1;
      f.traffic = {sends * segments, recvs * segments, sends * n, recvs * n};
      // One hop; the root's port sends p-1 copies of the buffer, the last one's last segment
      // landing after all of them.
      f.alpha_terms = 1.0;
      f.beta_elems = static_cast<double>((p - 1) * n);
      return f;
    }
    case Algorithm::kHierarchical: {
      const GridShape grid = HierarchicalGrid(spec);
      const int64_t g = grid.cols;
      const int64_t nodes = grid.rows;
      const int64_t vn = Mod(rank / g - spec.root / g, nodes);
      const int64_t vl = Mod(rank % g - spec.root % g, g);
      const int64_t children =
          BinomialChildCount(g, vl) + (vl == 0 ? BinomialChildCount(nodes, vn) : 0);
      const int64_t parents = rank == spec.root ? 0 : 1;
      f.traffic = {children * segments, parents * segments, children * n, parents * n};
      // The two trees one after the other (not exact: segments overlap the phases).
      const auto depth_of = [](int64_t q) {
        return q <= 1 ? 0 : (IsPowerOfTwo(q) ? Log2Ceil(q) : Log2Ceil(q) - 1);
      };
      f.alpha_terms = static_cast<double>(depth_of(nodes) + depth_of(g));
      f.beta_elems = static_cast<double>((Log2Ceil(nodes) + Log2Ceil(g)) * n);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for broadcast ") + AlgorithmName(spec.algorithm));
}

bool BroadcastFormulaIsExact(const CollectiveSpec& spec) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  if (p == 1 || n == 0) return true;
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
    case Algorithm::kChain:
    case Algorithm::kLinear:
      return true;
    case Algorithm::kScatterAllgather:
      // Even chunks, and ring messages of one segment each (segmented ring steps overlap
      // in a way that depends on alpha/beta).
      return n % p == 0 && (spec.segment_elems == 0 || spec.segment_elems >= n / p);
    default:
      return false;
  }
}

}  // namespace gyre::algo::internal
