#include "core/algo/collective.h"

#include <algorithm>
#include <sstream>

namespace gyre::algo {
namespace {

const char* const kCollectiveNames[kNumCollectives] = {"allreduce", "broadcast",      "reduce",
                                                       "allgather", "reduce_scatter", "alltoall",
                                                       "gather",    "scatter",        "barrier"};

const char* const kAlgorithmNames[kNumAlgorithms] = {"auto",
                                                     "ring",
                                                     "tree",
                                                     "recursive_doubling",
                                                     "rabenseifner",
                                                     "direct",
                                                     "binomial",
                                                     "chain",
                                                     "scatter_allgather",
                                                     "ring_gather",
                                                     "bruck",
                                                     "recursive_halving",
                                                     "pairwise",
                                                     "linear",
                                                     "dissemination",
                                                     "canonical",
                                                     "two_d",
                                                     "hierarchical"};

}  // namespace

const char* CollectiveName(Collective c) {
  int i = static_cast<int>(c);
  return (i >= 0 && i < kNumCollectives) ? kCollectiveNames[i] : "unknown";
}

StatusOr<Collective> ParseCollective(const std::string& name) {
  for (int i = 0; i < kNumCollectives; ++i) {
    if (name == kCollectiveNames[i]) return static_cast<Collective>(i);
  }
  return InvalidArgumentError("unknown collective '" + name +
                              "' (known: allreduce broadcast reduce allgather reduce_scatter "
                              "alltoall gather scatter barrier)");
}

const char* AlgorithmName(Algorithm a) {
  int i = static_cast<int>(a);
  return (i >= 0 && i < kNumAlgorithms) ? kAlgorithmNames[i] : "unknown";
}

StatusOr<Algorithm> ParseAlgorithm(const std::string& name) {
  for (int i = 0; i < kNumAlgorithms; ++i) {
    if (name == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  }
  if (name == "rd") return Algorithm::kRecursiveDoubling;
  if (name == "halving_doubling") return Algorithm::kRabenseifner;
  std::string known;
  for (int i = 0; i < kNumAlgorithms; ++i) known += std::string(" ") + kAlgorithmNames[i];
  return InvalidArgumentError("unknown algorithm '" + name + "' (known:" + known + ")");
}

std::vector<Algorithm> AlgorithmsFor(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return {Algorithm::kRing,         Algorithm::kTree,   Algorithm::kRecursiveDoubling,
              Algorithm::kRabenseifner, Algorithm::kDirect, Algorithm::kTwoD,
              Algorithm::kHierarchical};
    case Collective::kBroadcast:
      return {Algorithm::kBinomial, Algorithm::kChain, Algorithm::kScatterAllgather,
              Algorithm::kHierarchical, Algorithm::kLinear};
    case Collective::kReduce:
      return {Algorithm::kBinomial, Algorithm::kRingGather};
    case Collective::kAllgather:
      return {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kBruck};
    case Collective::kReduceScatter:
      return {Algorithm::kRing, Algorithm::kRecursiveHalving};
    case Collective::kAlltoall:
      return {Algorithm::kPairwise, Algorithm::kBruck};
    case Collective::kGather:
    case Collective::kScatter:
      return {Algorithm::kBinomial, Algorithm::kLinear};
    case Collective::kBarrier:
      return {Algorithm::kLinear, Algorithm::kDissemination, Algorithm::kBinomial};
  }
  return {};
}

bool IsReducing(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

std::string CollectiveSpec::ToString() const {
  std::ostringstream os;
  os << CollectiveName(collective) << " " << AlgorithmName(algorithm) << " p=" << world_size
     << " count=" << count << " " << DataTypeName(dtype);
  if (IsReducing(collective)) os << " " << ReduceOpName(op);
  if (collective == Collective::kBroadcast || collective == Collective::kReduce ||
      collective == Collective::kGather || collective == Collective::kScatter) {
    os << " root=" << root;
  }
  if (segment_elems > 0) os << " segment=" << segment_elems;
  if (deterministic) os << " deterministic";
  return os.str();
}

int64_t InputCount(const CollectiveSpec& s, int rank) {
  const int64_t p = s.world_size;
  switch (s.collective) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kAllgather:
    case Collective::kGather:
      return s.count;
    case Collective::kBroadcast:
      return rank == s.root ? s.count : 0;
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      return p * s.count;
    case Collective::kScatter:
      return rank == s.root ? p * s.count : 0;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

int64_t OutputCount(const CollectiveSpec& s, int rank) {
  const int64_t p = s.world_size;
  switch (s.collective) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kReduceScatter:
    case Collective::kScatter:
      return s.count;
    case Collective::kReduce:
      return rank == s.root ? s.count : 0;
    case Collective::kAllgather:
    case Collective::kAlltoall:
      return p * s.count;
    case Collective::kGather:
      return rank == s.root ? p * s.count : 0;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

int64_t LargeCallSegmentElems(const CollectiveSpec& s) {
  if (s.segment_elems != 0 || s.world_size < 1) return s.segment_elems;
  const int64_t size = static_cast<int64_t>(DataTypeSize(s.dtype));
  // The root's buffers are the largest of any rank's (gather, scatter), or all are alike.
  const int root = s.root >= 0 && s.root < s.world_size ? s.root : 0;
  const int64_t largest = std::max(InputCount(s, root), OutputCount(s, root));
  if (size <= 0 || largest <= kMaxMessageBytes / size) return 0;
  return kLargeCallSegmentBytes / size;
}

Status ValidateSpec(const CollectiveSpec& s) {
  if (static_cast<int>(s.collective) >= kNumCollectives) {
    return InvalidArgumentError("collective value " +
                                std::to_string(static_cast<int>(s.collective)) + " is unknown");
  }
  const char* name = CollectiveName(s.collective);
  if (s.world_size < 1) {
    return InvalidArgumentError(std::string(name) + ": world size " + std::to_string(s.world_size) +
                                " must be at least 1");
  }
  if (s.count < 0) {
    return InvalidArgumentError(std::string(name) + ": count " + std::to_string(s.count) +
                                " must not be negative");
  }
  if (s.segment_elems < 0) {
    return InvalidArgumentError(std::string(name) + ": segment size " +
                                std::to_string(s.segment_elems) + " must not be negative");
  }
  if (!IsValidDataType(static_cast<int>(s.dtype))) {
    return InvalidArgumentError(std::string(name) + ": dtype value " +
                                std::to_string(static_cast<int>(s.dtype)) + " is unknown");
  }
  const int64_t es = static_cast<int64_t>(DataTypeSize(s.dtype));
  if (s.count > kMaxCallBytes / es / s.world_size) {
    return InvalidArgumentError(std::string(name) + ": count " + std::to_string(s.count) +
                                " is too large: " + std::to_string(s.world_size) +
                                " ranks x count x " + std::to_string(es) +
                                " B must stay within 2^60 bytes");
  }
  if (IsReducing(s.collective)) {
    GYRE_RETURN_IF_ERROR(CheckReduceSupported(s.dtype, s.op).WithContext(name));
  }
  bool rooted = s.collective == Collective::kBroadcast || s.collective == Collective::kReduce ||
                s.collective == Collective::kGather || s.collective == Collective::kScatter;
  if (rooted && (s.root < 0 || s.root >= s.world_size)) {
    return InvalidArgumentError(std::string(name) + ": root " + std::to_string(s.root) +
                                " is out of range: it must be in [0, " +
                                std::to_string(s.world_size) + ")");
  }
  // The grid of the 2-D allreduce and the node size of the hierarchical one.
  auto check_divides = [&](int value, const char* field) -> Status {
    if (value >= 0 && (value == 0 || s.world_size % value == 0)) return Status::Ok();
    return InvalidArgumentError(std::string(name) + ": " + field + " " + std::to_string(value) +
                                " must divide the world size " + std::to_string(s.world_size) +
                                " (0 picks a default)");
  };
  GYRE_RETURN_IF_ERROR(check_divides(s.grid_rows, "grid_rows"));
  GYRE_RETURN_IF_ERROR(check_divides(s.local_size, "local_size"));
  if (s.algorithm == Algorithm::kAuto) return Status::Ok();
  if (s.algorithm == Algorithm::kCanonical) {
    if (s.collective == Collective::kAllreduce || s.collective == Collective::kReduce ||
        s.collective == Collective::kReduceScatter) {
      return Status::Ok();
    }
  }
  for (Algorithm a : AlgorithmsFor(s.collective)) {
    if (a == s.algorithm) return Status::Ok();
  }
  std::string known;
  for (Algorithm a : AlgorithmsFor(s.collective)) known += std::string(" ") + AlgorithmName(a);
  return InvalidArgumentError(std::string(name) + " has no algorithm '" +
                              AlgorithmName(s.algorithm) + "' (it has:" + known + ")");
}

Status CheckBufferOverlap(const CollectiveSpec& s, int rank, const void* in, const void* out) {
  const uint64_t es = DataTypeSize(s.dtype);
  const uint64_t in_bytes = static_cast<uint64_t>(InputCount(s, rank)) * es;
  const uint64_t out_bytes = static_cast<uint64_t>(OutputCount(s, rank)) * es;
  if (in_bytes == 0 || out_bytes == 0 || in == nullptr || out == nullptr) return Status::Ok();
  const uintptr_t i = reinterpret_cast<uintptr_t>(in);
  const uintptr_t o = reinterpret_cast<uintptr_t>(out);
  if (i + in_bytes <= o || o + out_bytes <= i) return Status::Ok();
  const bool in_place = s.collective == Collective::kAllreduce ||
                        s.collective == Collective::kBroadcast ||
                        (s.collective == Collective::kReduce && rank == s.root);
  if (in_place && i == o) return Status::Ok();
  const std::string name = CollectiveName(s.collective);
  std::ostringstream os;
  os << name << ": the input (" << in_bytes << " B at " << in << ") and the output (" << out_bytes
     << " B at " << out << ") overlap";
  // Two separate buffers overlap only by the count: too large for them (a count of 2^40 on
  // two small vectors read as an overlap and nothing more).
  os << " (if they are separate buffers, the count " << s.count << " is larger than they are)";
  if (in_place) {
    os << " without being the same memory; an in-place " << name << " passes one buffer as both";
  } else {
    os << "; " << name
       << " cannot run in place (only allreduce, broadcast and the root of a reduce can, with "
          "one buffer as both): pass an output apart from the input";
  }
  return InvalidArgumentError(os.str());
}

}  // namespace gyre::algo
