// The schedule IR. A schedule is data: for each rank, a list of steps (send a region to a
// peer, receive a region from a peer, reduce one region into another, copy) with explicit
// dependencies. It holds no sockets, threads or clocks, so the same schedule can be
// verified, costed, printed, simulated and executed.
//
// Buffers of one rank: kInput (the caller's send buffer, read-only), kOutput (the caller's
// receive buffer) and kScratch (allocated by the executor, `scratch_count` elements).
// Offsets and counts are in elements of the collective's dtype.
//
// Message matching: a send from rank a to rank b with tag t matches the one receive on b
// from a with tag t. Within one schedule each (src, dst, tag) is used by exactly one send
// and one receive, of the same element count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/algo/collective.h"

namespace gyre::algo {

enum class BufferId : uint8_t { kInput = 0, kOutput = 1, kScratch = 2 };

struct Region {
  BufferId buffer = BufferId::kScratch;
  int64_t offset = 0;
  int64_t count = 0;

  Region Sub(int64_t off, int64_t n) const { return Region{buffer, offset + off, n}; }
  bool operator==(const Region& o) const {
    return buffer == o.buffer && offset == o.offset && count == o.count;
  }
};

inline Region InputRegion(int64_t offset, int64_t count) {
  return Region{BufferId::kInput, offset, count};
}
inline Region OutputRegion(int64_t offset, int64_t count) {
  return Region{BufferId::kOutput, offset, count};
}

enum class StepKind : uint8_t {
  kSend = 0,    // send `src` to `peer` under `tag`
  kRecv = 1,    // receive from `peer` under `tag` into `dst`
  kReduce = 2,  // dst = op(dst, src), element-wise
  kCopy = 3,    // dst = src
};

struct Step {
  StepKind kind = StepKind::kCopy;
  int32_t peer = -1;
  uint64_t tag = 0;
  Region src;
  Region dst;
  std::vector<int32_t> deps;  // indices of earlier steps of the same rank
};

struct RankSchedule {
  int rank = 0;
  int64_t scratch_count = 0;
  std::vector<Step> steps;
};

struct Schedule {
  CollectiveSpec spec;  // spec.algorithm is concrete (never kAuto)
  std::vector<RankSchedule> ranks;
};

// Tags: phase (8 bits), round (24 bits), segment (32 bits). Builders use distinct phases
// for the phases of one algorithm so tags never collide between them.
inline uint64_t MakeTag(uint32_t phase, uint32_t round, uint32_t segment) {
  return (static_cast<uint64_t>(phase & 0xffu) << 56) |
         (static_cast<uint64_t>(round & 0xffffffu) << 32) | segment;
}

// Human-readable dump, one line per step, stable for golden tests:
//   "rank 1 (scratch 3)\n  #0 copy in[0+3] -> out[0+3]\n  #1 send out[0+1] -> r2 tag=..."
std::string FormatRankSchedule(const RankSchedule& rs);
std::string FormatSchedule(const Schedule& s);
std::string FormatRegion(const Region& r);
std::string FormatTag(uint64_t tag);  // "p1.r3.s0"

// A hash of what a schedule does, blind to its tags and buffer offsets: per rank, in order,
// each step's kind, peer, buffers, element counts and dependencies. Two algorithms of one
// shape move the same amounts between the same ranks in the same order (binomial and
// hierarchical broadcast on one host; ring and recursive doubling allgather at 2 ranks), so
// a difference between their measured times is the spread between runs, not the schedule.
uint64_t ScheduleShape(const Schedule& s);

}  // namespace gyre::algo
