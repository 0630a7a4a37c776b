// Closed forms of allgather, gather, scatter, alltoall and barrier (docs/algorithms_data.md).
// m is the block size (spec.count), K = ceil(log2 p). The times are the critical path under
// cost.h's model: one send port per rank, sends served in the order they become ready,
// receives unlimited, copies free.
#include <algorithm>
#include <string>
#include <utility>

#include "core/algo/builders_internal.h"
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

// Binomial tree of builders_internal.h, relative rank v: its children and subtree size.
int64_t ChildCount(int64_t p, int64_t v) {
  if (v == 0) return Log2Ceil(p);
  return std::min<int64_t>(TrailingZeros(v), Log2Ceil(p - v));
}
int64_t Subtree(int64_t p, int64_t v) { return v == 0 ? p : std::min(v & -v, p - v); }

// floor(log2 p): hops on the deepest path of the binomial tree.
int64_t TreeDepth(int64_t p) { return IsPowerOfTwo(p) ? Log2Ceil(p) : Log2Ceil(p) - 1; }

// Critical path of the binomial gather as (alpha terms, blocks). With h = 2^(K-1) and
// q = p - h, the root's children are 2^j (j < K-1, full subtrees, path (j+1, 2^(j+1)-1))
// and h, whose subtree [h, p) is a gather over q ranks. The full child 2^(K-2) dominates
// when q <= 2^(K-2); otherwise the child h does, adding one hop of q blocks to G(q).
std::pair<int64_t, int64_t> BinomialGatherPath(int64_t p) {
  int64_t alpha = 0;
  int64_t blocks = 0;
  while (p > 1) {
    const int levels = Log2Ceil(p);
    const int64_t half = int64_t{1} << (levels - 1);
    const int64_t q = p - half;
    if (levels >= 2 && q <= half / 2) return {alpha + levels - 1, blocks + half - 1};
    alpha += 1;
    blocks += q;
    p = q;
  }
  return {alpha, blocks};
}

// Bruck rounds wait for the previous round's data, except a short last round: when
// c = p - 2^(K-1) <= 2^(K-2) its blocks are ready earlier and it goes out right after round
// K-2's send, sharing that round's alpha.
bool ShortLastRound(int64_t p) {
  if (p <= 2) return false;
  const int k = Log2Ceil(p);
  return p - (int64_t{1} << (k - 1)) <= (int64_t{1} << (k - 2));
}

// Sum over the alltoall Bruck rounds of the slots moved: the number of set bits of
// 0..p-1, counted per bit position.
int64_t BruckAlltoallBlocks(int64_t p) {
  int64_t total = 0;
  for (int64_t bit = 1; bit < p; bit *= 2) {
    const int64_t period = 2 * bit;
    total += (p / period) * bit + std::max<int64_t>(0, p % period - bit);
  }
  return total;
}

// Recursive doubling: blocks of the aligned group of `size` virtual ranks starting at
// `base`, when the first `extra` virtual ranks own two blocks.
int64_t GroupBlocks(int64_t base, int64_t size, int64_t extra) {
  return size + std::min(base + size, extra) - std::min(base, extra);
}

}  // namespace

StatusOr<ClosedForm> AllgatherTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t m = spec.count;
  ClosedForm f;
  if (p == 1 || m == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kRing: {
      const int64_t msgs = (p - 1) * NumSegments(m, spec.segment_elems);
      f.traffic = {msgs, msgs, (p - 1) * m, (p - 1) * m};
      f.alpha_terms = static_cast<double>(p - 1);
      f.beta_elems = static_cast<double>((p - 1) * m);
      return f;
    }
    case Algorithm::kRecursiveDoubling: {
      const int64_t pp = PowerOfTwoFloor(p);
      const int64_t extra = p - pp;
      const int64_t rounds = Log2Ceil(pp);
      if (rank < 2 * extra && rank % 2 == 1) {
        f.traffic = {1, 2, m, (p - 1) * m};
      } else {
        const int64_t v = rank < 2 * extra ? rank / 2 : rank - extra;
        int64_t sent_blocks = 0;
        for (int64_t size = 1; size < pp; size *= 2) {
          sent_blocks += GroupBlocks(v & ~(size - 1), size, extra);
        }
        f.traffic = {rounds, rounds, sent_blocks * m, (p - 1) * m};
        if (rank < 2 * extra) {
          // The fold's block in, the unfold's two regions (all but the partner's block) out.
          f.traffic.msgs_recv += 1;
          f.traffic.msgs_sent += 2;
          f.traffic.elems_sent += (p - 1) * m;
        }
      }
      // Exact for p a power of two. Otherwise an estimate: the folded rank 0's port carries
      // its doubling sends and the unfold.
      f.alpha_terms = static_cast<double>(rounds + (extra > 0 ? 2 : 0));
      int64_t path_blocks = p - 1;
      if (extra > 0) {
        path_blocks = p;
        for (int64_t size = 1; size < pp; size *= 2) path_blocks += GroupBlocks(0, size, extra);
      }
      f.beta_elems = static_cast<double>(path_blocks * m);
      return f;
    }
    case Algorithm::kBruck: {
      const int64_t rounds = Log2Ceil(p);
      f.traffic = {rounds, rounds, (p - 1) * m, (p - 1) * m};
      f.alpha_terms = static_cast<double>(rounds - (ShortLastRound(p) ? 1 : 0));
      f.beta_elems = static_cast<double>((p - 1) * m);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for allgather ") + AlgorithmName(spec.algorithm));
}

StatusOr<ClosedForm> GatherTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t m = spec.count;
  const int64_t v = Mod(rank - spec.root, p);
  ClosedForm f;
  if (p == 1 || m == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kBinomial: {
      const int64_t children = ChildCount(p, v);
      const int64_t subtree = Subtree(p, v);
      const int64_t up = v == 0 ? 0 : 1;
      f.traffic = {up, children, up * subtree * m, (subtree - 1) * m};
      const auto [alpha, blocks] = BinomialGatherPath(p);
      f.alpha_terms = static_cast<double>(alpha);
      f.beta_elems = static_cast<double>(blocks * m);
      return f;
    }
    case Algorithm::kLinear: {
      f.traffic = v == 0 ? Traffic{0, p - 1, 0, (p - 1) * m} : Traffic{1, 0, m, 0};
      f.alpha_terms = 1;
      f.beta_elems = static_cast<double>(m);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for gather ") + AlgorithmName(spec.algorithm));
}

StatusOr<ClosedForm> ScatterTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t m = spec.count;
  const int64_t v = Mod(rank - spec.root, p);
  ClosedForm f;
  if (p == 1 || m == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kBinomial: {
      const int64_t children = ChildCount(p, v);
      const int64_t subtree = Subtree(p, v);
      const int64_t down = v == 0 ? 0 : 1;
      f.traffic = {children, down, (subtree - 1) * m, down * subtree * m};
      // A rank that receives a full subtree of 2^j blocks at t has handed out all of them
      // by t + j alpha + (2^j - 1) m beta (largest part first). So the root's port, busy
      // for all p-1 blocks, sets the beta term, and the deepest path, floor(log2 p) hops,
      // the alpha term.
      f.alpha_terms = static_cast<double>(TreeDepth(p));
      f.beta_elems = static_cast<double>((p - 1) * m);
      return f;
    }
    case Algorithm::kLinear: {
      f.traffic = v == 0 ? Traffic{p - 1, 0, (p - 1) * m, 0} : Traffic{0, 1, 0, m};
      f.alpha_terms = 1;
      f.beta_elems = static_cast<double>((p - 1) * m);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for scatter ") + AlgorithmName(spec.algorithm));
}

StatusOr<ClosedForm> AlltoallTheory(const CollectiveSpec& spec, int rank) {
  const int64_t p = spec.world_size;
  const int64_t m = spec.count;
  ClosedForm f;
  if (p == 1 || m == 0) return f;
  switch (spec.algorithm) {
    case Algorithm::kPairwise: {
      f.traffic = {p - 1, p - 1, (p - 1) * m, (p - 1) * m};
      f.alpha_terms = 1;
      f.beta_elems = static_cast<double>((p - 1) * m);
      return f;
    }
    case Algorithm::kBruck: {
      const int64_t rounds = Log2Ceil(p);
      const int64_t blocks = BruckAlltoallBlocks(p);
      f.traffic = {rounds, rounds, blocks * m, blocks * m};
      f.alpha_terms = static_cast<double>(rounds - (ShortLastRound(p) ? 1 : 0));
      f.beta_elems = static_cast<double>(blocks * m);
      return f;
    }
    default:
      break;
  }
  return InternalError(std::string("no formula for alltoall ") + AlgorithmName(spec.algorithm));
}

StatusOr<ClosedForm> BarrierTheory(const CollectiveSpec& spec, int rank) {
  const int64_t rounds = Log2Ceil(spec.world_size);
  ClosedForm f;
  if (spec.algorithm == Algorithm::kBinomial) {
    // One signal up and one down per tree edge: a rank's children and, below the root, its
    // parent; the release reaches the deepest rank after 2 floor(log2 p) hops.
    const int64_t edges = ChildCount(spec.world_size, rank) + (rank == 0 ? 0 : 1);
    f.traffic = {edges, edges, 0, 0};
    f.alpha_terms = static_cast<double>(2 * TreeDepth(spec.world_size));
    return f;
  }
  if (spec.algorithm == Algorithm::kLinear) {
    // Rank 0 hears from every other rank and releases each; the others signal and wait.
    const int64_t edges = rank == 0 ? spec.world_size - 1 : 1;
    f.traffic = {edges, edges, 0, 0};
    f.alpha_terms = spec.world_size > 1 ? 2.0 : 0.0;
    return f;
  }
  f.traffic = {rounds, rounds, 0, 0};
  f.alpha_terms = static_cast<double>(rounds);
  return f;
}

bool GatherFamilyFormulaIsExact(const CollectiveSpec& spec) {
  if (spec.collective == Collective::kBarrier) return true;
  if (spec.world_size == 1 || spec.count == 0) return true;
  if (spec.collective != Collective::kAllgather) return true;
  switch (spec.algorithm) {
    case Algorithm::kRing:
      return spec.segment_elems == 0 || spec.segment_elems >= spec.count;
    case Algorithm::kRecursiveDoubling:
      return IsPowerOfTwo(spec.world_size);
    case Algorithm::kBruck:
      return true;
    default:
      return false;
  }
}

}  // namespace gyre::algo::internal
