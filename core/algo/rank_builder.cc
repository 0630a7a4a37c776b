#include "core/algo/rank_builder.h"

#include <algorithm>

namespace gyre::algo {

RankBuilder::IntervalMap::iterator RankBuilder::SplitAt(IntervalMap& m, int64_t pos) {
  // Returns the interval starting at `pos`, splitting the one that covers it, or
  // creating an untouched interval up to the next known one.
  auto it = m.lower_bound(pos);
  if (it != m.end() && it->first == pos) return it;
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > pos) {
      Interval tail = prev->second;
      prev->second.end = pos;
      return m.emplace_hint(it, pos, std::move(tail));
    }
  }
  int64_t end = (it == m.end()) ? INT64_MAX : it->first;
  return m.emplace_hint(it, pos, Interval{end, -1, {}});
}

void RankBuilder::Access(int step, const Region& r, bool write, std::vector<int32_t>* deps) {
  if (r.count <= 0) return;
  IntervalMap& m = tracks_[static_cast<int>(r.buffer)];
  int64_t begin = r.offset;
  int64_t end = r.offset + r.count;
  auto first = SplitAt(m, begin);
  auto stop = SplitAt(m, end);
  // The map covers [its first key, INT64_MAX) without gaps, so [first, stop) is exactly
  // the accessed range.
  for (auto it = first; it != stop; ++it) {
    Interval& iv = it->second;
    if (iv.last_writer >= 0) deps->push_back(iv.last_writer);
    if (write) {
      for (int reader : iv.readers) deps->push_back(reader);
      iv.readers.clear();
      iv.last_writer = step;
    } else {
      iv.readers.push_back(step);
    }
  }
}

int RankBuilder::Emit(Step step) {
  int index = static_cast<int>(schedule_.steps.size());
  std::vector<int32_t> deps;
  switch (step.kind) {
    case StepKind::kSend:
      Access(index, step.src, false, &deps);
      break;
    case StepKind::kRecv:
      Access(index, step.dst, true, &deps);
      break;
    case StepKind::kReduce:
    case StepKind::kCopy:
      Access(index, step.src, false, &deps);
      Access(index, step.dst, true, &deps);
      break;
  }
  deps.erase(std::remove(deps.begin(), deps.end(), index), deps.end());
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  step.deps = std::move(deps);
  schedule_.steps.push_back(std::move(step));
  return index;
}

int RankBuilder::Send(int peer, uint64_t tag, Region src) {
  Step s;
  s.kind = StepKind::kSend;
  s.peer = peer;
  s.tag = tag;
  s.src = src;
  return Emit(std::move(s));
}

int RankBuilder::Recv(int peer, uint64_t tag, Region dst) {
  Step s;
  s.kind = StepKind::kRecv;
  s.peer = peer;
  s.tag = tag;
  s.dst = dst;
  return Emit(std::move(s));
}

int RankBuilder::Reduce(Region dst, Region src) {
  if (dst.count <= 0) return -1;
  Step s;
  s.kind = StepKind::kReduce;
  s.src = src;
  s.dst = dst;
  return Emit(std::move(s));
}

int RankBuilder::Copy(Region dst, Region src) {
  if (dst.count <= 0) return -1;
  Step s;
  s.kind = StepKind::kCopy;
  s.src = src;
  s.dst = dst;
  return Emit(std::move(s));
}

void RankBuilder::AddDep(int step, int on) {
  if (step < 0 || on < 0 || step == on) return;
  auto& deps = schedule_.steps[step].deps;
  if (std::find(deps.begin(), deps.end(), on) == deps.end()) {
    deps.push_back(on);
    std::sort(deps.begin(), deps.end());
  }
}

Region RankBuilder::Scratch(int64_t count) {
  Region r{BufferId::kScratch, schedule_.scratch_count, count};
  schedule_.scratch_count += std::max<int64_t>(count, 0);
  return r;
}

RankSchedule RankBuilder::Finish() && { return std::move(schedule_); }

int64_t NumSegments(int64_t count, int64_t segment) {
  if (segment <= 0 || count <= segment) return 1;
  return (count + segment - 1) / segment;
}

std::vector<Region> SplitSegments(const Region& r, int64_t segment) {
  std::vector<Region> out;
  int64_t n = NumSegments(r.count, segment);
  if (n == 1) {
    out.push_back(r);
    return out;
  }
  for (int64_t off = 0; off < r.count; off += segment) {
    out.push_back(r.Sub(off, std::min(segment, r.count - off)));
  }
  return out;
}

}  // namespace gyre::algo
