// What a collective call is, independent of how it runs: the collective, its algorithm, the
// world size, the element count and type, the root. The count convention follows NCCL:
// allreduce/broadcast/reduce: `count` is each rank's buffer; allgather and gather: `count`
// is each rank's contribution (the output holds p*count); reduce_scatter: `count` is each
// rank's share of the result (the input holds p*count); alltoall: `count` is one block
// (input and output hold p*count); scatter: `count` is each rank's share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"

namespace gyre::algo {

enum class Collective : uint8_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kReduce = 2,
  kAllgather = 3,
  kReduceScatter = 4,
  kAlltoall = 5,
  kGather = 6,
  kScatter = 7,
  kBarrier = 8,
};
inline constexpr int kNumCollectives = 9;

enum class Algorithm : uint8_t {
  kAuto = 0,
  kRing = 1,               // allreduce, allgather, reduce_scatter
  kTree = 2,               // allreduce: binomial reduce to rank 0 + binomial broadcast
  kRecursiveDoubling = 3,  // allreduce, allgather
  kRabenseifner = 4,       // allreduce: recursive halving RS + recursive doubling AG
  kDirect = 5,             // allreduce: every rank sends its whole buffer to every other
  kBinomial = 6,           // broadcast, reduce, gather, scatter
  kChain = 7,              // broadcast: pipelined chain
  kScatterAllgather = 8,   // broadcast: scatter from root + ring allgather
  kRingGather = 9,         // reduce: ring reduce-scatter + gather to root
  kBruck = 10,             // allgather, alltoall
  kRecursiveHalving = 11,  // reduce_scatter
  kPairwise = 12,          // alltoall
  kLinear = 13,            // broadcast, gather, scatter, barrier
  kDissemination = 14,     // barrier
  kCanonical = 15,         // deterministic mode's schedule (see docs/algorithms.md)
  kTwoD = 16,              // allreduce: dimension-wise on a grid (CollectiveSpec::grid_rows)
  kHierarchical = 17,      // allreduce: intra-node RS, inter-node rings, intra-node AG
};
inline constexpr int kNumAlgorithms = 18;

const char* CollectiveName(Collective c);  // "allreduce"
StatusOr<Collective> ParseCollective(const std::string& name);
const char* AlgorithmName(Algorithm a);  // "recursive_doubling"
StatusOr<Algorithm> ParseAlgorithm(const std::string& name);

// The algorithms built for `c`, in a stable order (kCanonical excluded).
std::vector<Algorithm> AlgorithmsFor(Collective c);
bool IsReducing(Collective c);  // allreduce, reduce, reduce_scatter

// Comm::Close is an alltoall of one byte per rank whose root field carries this mark (an
// alltoall has no root), so the ranks' calls differ when one rank closes while another makes
// a one-byte alltoall of its own, and errors name the close rather than an alltoall.
inline constexpr int kClosingExchangeRoot = -2;
// The online tuner's agreement (an allreduce of int64 sums, core/comm/tuner.h) carries this
// mark the same way, so it never pairs with a program's allreduce of the same shape.
inline constexpr int kTuningAgreementRoot = -3;

struct CollectiveSpec {
  Collective collective = Collective::kAllreduce;
  Algorithm algorithm = Algorithm::kAuto;
  int world_size = 1;
  int64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  // Pipelining: each chunk is cut into segments of at most this many elements, each sent
  // as its own message so the next segment's transfer overlaps this one's reduction.
  // 0 means one message per chunk.
  int64_t segment_elems = 0;
  // Canonical reduction order: every output element is reduced as the fixed tree
  // ((r0+r1)+(r2+r3))+... over ranks, whatever the algorithm, so results are bitwise
  // reproducible. Only meaningful for reducing collectives.
  bool deterministic = false;
  // 2-D allreduce (kTwoD): the rows a of the a x b grid (b = p / a; rank r sits at row
  // r / b). 0 picks the most square grid with a <= b. Must divide p.
  int grid_rows = 0;
  // Hierarchical allreduce (kHierarchical): ranks per node; ranks [kG, (k+1)G) share node
  // k. 0 picks the largest divisor of p not above sqrt(p). Must divide p.
  int local_size = 0;

  std::string ToString() const;  // "allreduce ring p=4 count=12 float32 sum root=0"
};

// Whether the call is an average whose ranks divide their inputs by p before the sum
// (AverageScalesInputs: float16), rather than the sum once after it.
inline bool DividesInputsFirst(const CollectiveSpec& s) {
  return s.op == ReduceOp::kAvg && IsReducing(s.collective) && AverageScalesInputs(s.dtype);
}

// The spec of one call as the public APIs take it (algorithm automatic, world size filled
// in by the communicator).
inline CollectiveSpec MakeSpec(Collective c, int64_t count, DataType dtype,
                               ReduceOp op = ReduceOp::kSum, int root = 0) {
  CollectiveSpec s;
  s.collective = c;
  s.count = count;
  s.dtype = dtype;
  s.op = op;
  s.root = root;
  return s;
}

// Elements of the input and output buffers of `rank` for `spec` (0 where unused, e.g. the
// output of reduce and gather on a non-root rank).
int64_t InputCount(const CollectiveSpec& spec, int rank);
int64_t OutputCount(const CollectiveSpec& spec, int rank);

// The most bytes a call's largest buffer (world size x count elements) may span: beyond any
// machine, and low enough that no size, offset or alignment computed from it overflows.
inline constexpr int64_t kMaxCallBytes = int64_t{1} << 60;

// The largest message a call sends in one piece by default: the TCP transport's frame cap
// (TcpTransportOptions::max_frame_bytes). A call whose largest buffer is bigger and whose
// caller chose no segments (segment_elems 0) is cut into segments of kLargeCallSegmentBytes
// (LargeCallSegmentElems), so that a 1.5 GiB broadcast or a 4 GiB allreduce runs as smaller
// calls do; the early-message buffers stay bounded by the segment too. Algorithms that do not
// cut their messages (recursive doubling, bruck, direct allgather/alltoall, gather, scatter:
// docs/memory.md) still send whole blocks, and one over the cap is refused by the transport.
inline constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;
inline constexpr int64_t kLargeCallSegmentBytes = int64_t{64} << 20;
// spec.segment_elems when it is set or the call's largest buffer fits kMaxMessageBytes, else
// kLargeCallSegmentBytes' worth of elements. Needs a valid world size, root and dtype.
int64_t LargeCallSegmentElems(const CollectiveSpec& spec);

// InvalidArgument naming the value and the rule for: world_size < 1, negative count, a count
// whose world size x count elements would pass kMaxCallBytes, root out of range, unknown
// dtype/op, unsupported (dtype, op), an algorithm that does not implement the collective.
Status ValidateSpec(const CollectiveSpec& spec);

// InvalidArgument when rank `rank`'s input and output bytes overlap, unless they are the same
// memory in a call that runs in place: an allreduce, a broadcast, the root of a reduce. Any
// other overlap (an alltoall over its own input, say) would read bytes already overwritten.
Status CheckBufferOverlap(const CollectiveSpec& spec, int rank, const void* in, const void* out);

// Balanced partition of n elements into `parts` chunks: the first n % parts chunks have
// one element more.
inline int64_t ChunkCount(int64_t n, int64_t parts, int64_t i) {
  return n / parts + (i < n % parts ? 1 : 0);
}
inline int64_t ChunkOffset(int64_t n, int64_t parts, int64_t i) {
  return i * (n / parts) + (i < n % parts ? i : n % parts);
}

}  // namespace gyre::algo
