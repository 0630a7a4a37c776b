// Closed forms of the reduce and reduce_scatter algorithms (docs/algorithms_reducing.md),
// from the math of each algorithm under the cost model of cost.h.
#include <algorithm>

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
int64_t BinomialChildCount(int64_t p, int64_t v) {
  if (v == 0) return CeilLog2(p);
  return std::min<int64_t>(TrailingZeros(v), CeilLog2(p - v));
}

}  // namespace

StatusOr<ClosedForm> ReduceTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  ClosedForm f;
  if (p == 1 || n == 0) return f;
  const bool root = rank == spec.root;
  switch (spec.algorithm) {
    case Algorithm::kBinomial: {
      // Each rank sends its subtree's sum once; receives are unlimited, so the root is done
      // after floor(log2 p) whole-buffer hops.
      const int64_t segs = NumSegments(n, spec.segment_elems);
      const int64_t v = ((rank - spec.root) % p + p) % p;
      const int64_t up = root ? 0 : 1;
      const int64_t down = BinomialChildCount(p, v);
      f.traffic = Traffic{up * segs, down * segs, up * n, down * n};
      f.alpha_terms = FloorLog2(p);
      f.beta_elems = static_cast<double>(FloorLog2(p)) * n;
      return f;
    }
    case Algorithm::kRingGather:
    case Algorithm::kCanonical: {
      // A reduce-scatter of p-1 chunks each way, then one chunk from every rank to the root.
      const int64_t chunk = n / p;
      f.traffic = root ? Traffic{p - 1, 2 * (p - 1), (p - 1) * chunk, 2 * (p - 1) * chunk}
                       : Traffic{p, p - 1, p * chunk, (p - 1) * chunk};
      if (spec.algorithm == Algorithm::kRingGather) {
        // p-1 lockstep ring steps, then one more hop of a chunk.
        f.alpha_terms = static_cast<double>(p);
      } else {
        // The direct reduce-scatter's p-1 chunks leave back to back (one alpha), then one hop.
        f.alpha_terms = 2;
      }
      f.beta_elems = static_cast<double>(p * chunk);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for reduce ") + AlgorithmName(spec.algorithm));
}

StatusOr<ClosedForm> ReduceScatterTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t c = spec.count;  // each rank's block
  ClosedForm f;
  if (p == 1 || c == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kRing:
      f.traffic = Traffic{p - 1, p - 1, (p - 1) * c, (p - 1) * c};
      f.alpha_terms = static_cast<double>(p - 1);
      f.beta_elems = static_cast<double>(p - 1) * c;
      return f;
    case Algorithm::kCanonical:
      // Each rank sends p-1 blocks back to back: they land by alpha + (p-1) c beta.
      f.traffic = Traffic{p - 1, p - 1, (p - 1) * c, (p - 1) * c};
      f.alpha_terms = 1;
      f.beta_elems = static_cast<double>(p - 1) * c;
      return f;
    case Algorithm::kRecursiveHalving: {
      const int64_t p2 = int64_t{1} << FloorLog2(p);
      const int64_t extra = p - p2;
      const int64_t steps = FloorLog2(p2);
      // Group g of the p2 participants holds blocks [first(g), first(g+1)): two blocks for
      // the odd rank of a fold pair, one otherwise.
      auto first = [extra](int64_t g) { return g + std::min(g, extra); };
      if (rank < 2 * extra && rank % 2 == 0) {
        f.traffic = Traffic{1, 1, p * c, c};
      } else {
        const int64_t g = rank < 2 * extra ? rank / 2 : rank - extra;
        Traffic t{steps, steps, 0, 0};
        for (int64_t m = p2 / 2; m >= 1; m /= 2) {
          // At mask m the rank's range is the aligned 2m groups around g; it keeps the half
          // holding g and sends the other.
          const int64_t lo = g & ~(2 * m - 1);
          const int64_t keep = lo + (g & m);
          const int64_t give = lo + m - (g & m);
          t.elems_sent += (first(give + m) - first(give)) * c;
          t.elems_recv += (first(keep + m) - first(keep)) * c;
        }
        if (rank < 2 * extra) {
          t.msgs_sent += 1;
          t.msgs_recv += 1;
          t.elems_sent += c;
          t.elems_recv += p * c;
        }
        f.traffic = t;
      }
      if (extra == 0) {
        // Lockstep: step m costs alpha + m c beta; the m sum to p - 1.
        f.alpha_terms = static_cast<double>(steps);
        f.beta_elems = static_cast<double>(p - 1) * c;
      } else {
        // Groups differ in size, so the steps are not lockstep; this is the bound that
        // charges every step its largest message (m + min(m, extra) blocks) plus the fold.
        double blocks = 0;
        for (int64_t m = p2 / 2; m >= 1; m /= 2) blocks += m + std::min(m, extra);
        f.alpha_terms = static_cast<double>(steps + 2);
        f.beta_elems = (p + blocks + 1) * c;
      }
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for reduce_scatter ") +
                       AlgorithmName(spec.algorithm));
}

bool ReduceFormulaIsExact(const CollectiveSpec& spec) {
  const int64_t p = spec.world_size;
  const int64_t n = spec.count;
  const int64_t seg = spec.segment_elems;
  if (p == 1 || n == 0) return true;
  switch (spec.algorithm) {
    case Algorithm::kBinomial:
      return seg == 0 || n <= seg;
    case Algorithm::kRingGather:
    case Algorithm::kCanonical:
      return n % p == 0 && (seg == 0 || n / p <= seg);
    default:
      return false;
  }
}

bool ReduceScatterFormulaIsExact(const CollectiveSpec& spec) {
  const int64_t p = spec.world_size;
  const int64_t c = spec.count;
  const int64_t seg = spec.segment_elems;
  if (p == 1 || c == 0) return true;
  switch (spec.algorithm) {
    case Algorithm::kRing:
      return seg == 0 || c <= seg;
    case Algorithm::kCanonical:
      return true;
    case Algorithm::kRecursiveHalving:
      return (p & (p - 1)) == 0 && (seg == 0 || p * c / 2 <= seg);
    default:
      return false;
  }
}

}  // namespace gyre::algo::internal
