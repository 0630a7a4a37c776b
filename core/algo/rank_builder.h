// RankBuilder: how schedule builders write one rank's steps. A builder emits steps in
// program order, as if the rank ran them one after another; RankBuilder derives the
// dependencies from the regions each step reads and writes (read-after-write,
// write-after-write, write-after-read), so the executor may run every independent step at
// once without the builder having to reason about concurrency. Explicit extra
// dependencies (e.g. a barrier's zero-byte rounds) are added with AddDep.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/algo/schedule.h"

namespace gyre::algo {

class RankBuilder {
 public:
  RankBuilder(int rank, int world_size) : rank_(rank), world_size_(world_size) {
    schedule_.rank = rank;
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Each returns the new step's index. Steps of zero elements are still emitted for sends
  // and receives (a zero-byte message is a real message, e.g. in a barrier); reduce and
  // copy of zero elements return -1 and emit nothing.
  int Send(int peer, uint64_t tag, Region src);
  int Recv(int peer, uint64_t tag, Region dst);
  int Reduce(Region dst, Region src);
  int Copy(Region dst, Region src);

  // `step` also waits for `on` (both indices of this rank; -1 is ignored).
  void AddDep(int step, int on);

  // A fresh scratch region of `count` elements (a bump allocator; never reused).
  Region Scratch(int64_t count);

  int num_steps() const { return static_cast<int>(schedule_.steps.size()); }
  RankSchedule Finish() &&;

 private:
  struct Interval {
    int64_t end;
    int last_writer;
    std::vector<int> readers;  // since last_writer
  };
  using IntervalMap = std::map<int64_t, Interval>;

  int Emit(Step step);
  // Adds the dependencies of reading (and, if `write`, writing) `r` to `deps`, then
  // records the access by `step`.
  void Access(int step, const Region& r, bool write, std::vector<int32_t>* deps);
  IntervalMap::iterator SplitAt(IntervalMap& m, int64_t pos);

  int rank_;
  int world_size_;
  RankSchedule schedule_;
  IntervalMap tracks_[3];
};

// Cuts `r` into consecutive pieces of at most `segment` elements (one piece if segment is
// 0 or r is shorter). An empty region gives one empty piece.
std::vector<Region> SplitSegments(const Region& r, int64_t segment);

// The number of pieces SplitSegments gives.
int64_t NumSegments(int64_t count, int64_t segment);

}  // namespace gyre::algo
