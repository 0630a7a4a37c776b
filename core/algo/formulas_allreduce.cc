// Closed forms of the allreduce algorithms (docs/algorithms_reducing.md, "allreduce"), from
// the math of each algorithm under the cost model of cost.h: u = alpha + n*beta is one
// whole-buffer message, and a rank's sends leave one after another through its one port.
#include <algorithm>

#include "core/algo/builders_topo.h"
#include "core/algo/formulas.h"
#include "core/algo/rank_builder.h"

namespace gyre::algo::internal {
namespace {

int FloorLog2(int64_t v) {
  int k = 0;
  while ((int64_t{2} << k) <= v) ++k;
  return k;
}
int CeilLog2(int64_t v) {
  int k = 0;
  while ((int64_t{1} << k) < v) ++k;
  return k;
}
int TrailingZeros(int64_t v) {
  int k = 0;
  while (((v >> k) & 1) == 0) ++k;
  return k;
}
// Children of relative rank v in the binomial tree over p ranks: one per bit below v's lowest
// set bit (every bit for the root) that stays inside the world.
int64_t BinomialChildCount(int64_t p, int64_t v) {
  if (v == 0) return CeilLog2(p);
  return std::min<int64_t>(TrailingZeros(v), CeilLog2(p - v));
}

Traffic Symmetric(int64_t msgs, int64_t elems) { return Traffic{msgs, msgs, elems, elems}; }

}  // namespace

StatusOr<ClosedForm> AllreduceTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  ClosedForm f;
  if (p == 1 || n == 0) return f;
  const int64_t segs = NumSegments(n, spec.segment_elems);
  const int64_t p2 = int64_t{1} << FloorLog2(p);
  const int64_t extra = p - p2;
  const int64_t steps = FloorLog2(p2);
  const bool sits_out = rank < 2 * extra && rank % 2 == 0;
  const bool folded = rank < 2 * extra && rank % 2 == 1;
  switch (spec.algorithm) {
    case Algorithm::kRing:
      // 2(p-1) steps, each sending and receiving one chunk of n/p.
      f.traffic = Symmetric(2 * (p - 1), 2 * (p - 1) * n / p);
      f.alpha_terms = 2.0 * (p - 1);
      f.beta_elems = 2.0 * (p - 1) * n / p;
      return f;
    case Algorithm::kTree: {
      // Reduce: each rank sends once, after its children; with receives unlimited the root
      // is done after floor(log2 p) whole-buffer hops. Broadcast: the root's k-th send
      // (largest subtree first) lands after alpha + k*n*beta, which gives
      // floor(log2 p)*alpha + ceil(log2 p)*n*beta.
      const int64_t per_seg = (rank != 0 ? 1 : 0) + BinomialChildCount(p, rank);
      f.traffic = Symmetric(per_seg * segs, per_seg * n);
      f.alpha_terms = 2.0 * FloorLog2(p);
      f.beta_elems = static_cast<double>(FloorLog2(p) + CeilLog2(p)) * n;
      return f;
    }
    case Algorithm::kRecursiveDoubling: {
      const int64_t per_seg = sits_out ? 1 : steps + (folded ? 1 : 0);
      f.traffic = Symmetric(per_seg * segs, per_seg * n);
      // Power of two: log2 p lockstep exchanges. With a fold the ranks outside it start
      // one hop early; how much of that the exchange hides depends on how far apart the
      // folded ranks sit (see the doc); the two cases below are exact, the rest are the
      // lockstep bound (log2 p2 + 2) u.
      if (extra == 0) {
        f.alpha_terms = static_cast<double>(steps);
        f.beta_elems = static_cast<double>(steps) * n;
      } else if (2 * extra <= p2 && 4 * extra > p2) {
        f.alpha_terms = static_cast<double>(steps + 1);
        f.beta_elems = static_cast<double>(steps + 2) * n;
      } else {
        f.alpha_terms = static_cast<double>(steps + 2);
        f.beta_elems = static_cast<double>(steps + 2) * n;
      }
      return f;
    }
    case Algorithm::kRabenseifner: {
      // Halving sends n/2 + n/4 + ... + n/p2, doubling the same back.
      const int64_t half = n - n / p2;
      if (sits_out) {
        f.traffic = Symmetric(1, n);
      } else {
        f.traffic = Symmetric(2 * steps + (folded ? 1 : 0), 2 * half + (folded ? n : 0));
      }
      f.alpha_terms = 2.0 * steps + (extra > 0 ? 2 : 0);
      f.beta_elems = 2.0 * half + (extra > 0 ? 2.0 * n : 0);
      return f;
    }
    case Algorithm::kDirect:
      // p-1 whole buffers through one port; the last lands after alpha + (p-1) n beta.
      f.traffic = Symmetric((p - 1) * segs, (p - 1) * n);
      f.alpha_terms = 1;
      f.beta_elems = static_cast<double>(p - 1) * n;
      return f;
    case Algorithm::kCanonical:
      // Direct reduce-scatter (p-1 chunks through one port, one alpha), then the ring
      // allgather's p-1 lockstep steps.
      f.traffic = Symmetric(2 * (p - 1), 2 * (p - 1) * n / p);
      f.alpha_terms = static_cast<double>(p);
      f.beta_elems = 2.0 * (p - 1) * n / p;
      return f;
    case Algorithm::kTwoD:
    case Algorithm::kHierarchical:
      return GridAllreduceTheory(spec, rank);
    default:
      break;
  }
  return InternalError(std::string("no formula for allreduce ") + AlgorithmName(spec.algorithm));
}

bool AllreduceFormulaIsExact(const CollectiveSpec& spec) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  if (p == 1 || n == 0) return true;
  const int64_t seg = spec.segment_elems;
  // Every message fits in one segment.
  auto one_segment = [seg](int64_t elems) { return seg == 0 || elems <= seg; };
  const int64_t p2 = int64_t{1} << FloorLog2(p);
  const int64_t extra = p - p2;
  switch (spec.algorithm) {
    case Algorithm::kRing:
    case Algorithm::kCanonical:
      return n % p == 0 && one_segment(n / p);
    case Algorithm::kTree:
      return one_segment(n);
    case Algorithm::kRecursiveDoubling:
      return one_segment(n) && (extra == 0 || 4 * extra > p2);
    case Algorithm::kRabenseifner:
      return n % p2 == 0 && one_segment(n) && (extra == 0 || 2 * extra > p2);
    case Algorithm::kDirect:
      return true;
    case Algorithm::kTwoD:
    case Algorithm::kHierarchical:
      return GridAllreduceFormulaIsExact(spec);
    default:
      return false;
  }
}

}  // namespace gyre::algo::internal
