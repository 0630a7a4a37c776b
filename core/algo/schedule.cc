#include "core/algo/schedule.h"

#include <sstream>

namespace gyre::algo {
namespace {

const char* BufferName(BufferId b) {
  switch (b) {
    case BufferId::kInput:
      return "in";
    case BufferId::kOutput:
      return "out";
    case BufferId::kScratch:
      return "tmp";
  }
  return "?";
}

}  // namespace

std::string FormatRegion(const Region& r) {
  std::ostringstream os;
  os << BufferName(r.buffer) << "[" << r.offset << "+" << r.count << "]";
  return os.str();
}

std::string FormatTag(uint64_t tag) {
  std::ostringstream os;
  os << "p" << (tag >> 56) << ".r" << ((tag >> 32) & 0xffffffu) << ".s" << (tag & 0xffffffffu);
  return os.str();
}

std::string FormatRankSchedule(const RankSchedule& rs) {
  std::ostringstream os;
  os << "rank " << rs.rank << " (" << rs.steps.size() << " steps, scratch " << rs.scratch_count
     << ")\n";
  for (size_t i = 0; i < rs.steps.size(); ++i) {
    const Step& s = rs.steps[i];
    os << "  #" << i << " ";
    switch (s.kind) {
      case StepKind::kSend:
        os << "send " << FormatRegion(s.src) << " -> r" << s.peer << " " << FormatTag(s.tag);
        break;
      case StepKind::kRecv:
        os << "recv " << FormatRegion(s.dst) << " <- r" << s.peer << " " << FormatTag(s.tag);
        break;
      case StepKind::kReduce:
        os << "reduce " << FormatRegion(s.dst) << " += " << FormatRegion(s.src);
        break;
      case StepKind::kCopy:
        os << "copy " << FormatRegion(s.dst) << " = " << FormatRegion(s.src);
        break;
    }
    if (!s.deps.empty()) {
      os << " after";
      for (int32_t d : s.deps) os << " #" << d;
    }
    os << "\n";
  }
  return os.str();
}

uint64_t ScheduleShape(const Schedule& s) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<int64_t>(s.ranks.size()));
  for (const RankSchedule& rs : s.ranks) {
    mix(rs.rank);
    mix(static_cast<int64_t>(rs.steps.size()));
    for (const Step& st : rs.steps) {
      mix(static_cast<int64_t>(st.kind));
      mix(st.peer);
      // A send reads src and a receive writes dst; the other region is unused.
      if (st.kind != StepKind::kRecv) {
        mix(static_cast<int64_t>(st.src.buffer));
        mix(st.src.count);
      }
      if (st.kind != StepKind::kSend) {
        mix(static_cast<int64_t>(st.dst.buffer));
        mix(st.dst.count);
      }
      mix(static_cast<int64_t>(st.deps.size()));
      for (int32_t d : st.deps) mix(d);
    }
  }
  return h;
}

std::string FormatSchedule(const Schedule& s) {
  std::ostringstream os;
  os << s.spec.ToString() << "\n";
  for (const RankSchedule& rs : s.ranks) os << FormatRankSchedule(rs);
  return os.str();
}

}  // namespace gyre::algo
