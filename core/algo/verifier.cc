#include "core/algo/verifier.h"

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

#include "core/algo/walk.h"

namespace gyre::algo {
namespace {

// Symbolic element values. Element x of an interval holds, for each Contrib c, element
// (x + c.delta) of rank c.rank's input, reduced together. A null list is an unwritten value.
struct Contrib {
  int32_t rank;
  int64_t delta;
  bool operator==(const Contrib& o) const { return rank == o.rank && delta == o.delta; }
  bool operator<(const Contrib& o) const {
    return rank != o.rank ? rank < o.rank : delta < o.delta;
  }
};
using Value = std::shared_ptr<const std::vector<Contrib>>;

// A run of `len` elements; deltas are relative to the run's first element's position in
// whatever region it was read from (so runs can move between buffers).
struct Piece {
  int64_t len;
  Value value;  // deltas relative to position 0 of the enclosing region
};

Value Shift(const Value& v, int64_t by) {
  if (!v || by == 0) return v;
  auto out = std::make_shared<std::vector<Contrib>>(*v);
  for (Contrib& c : *out) c.delta += by;
  return out;
}

std::string DescribeValue(const Value& v) {
  if (!v) return "an unwritten value";
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < v->size(); ++i) {
    if (i) os << ", ";
    const Contrib& c = (*v)[i];
    os << "r" << c.rank << "[x" << (c.delta >= 0 ? "+" : "") << c.delta << "]";
  }
  os << "}";
  return os.str();
}

// One buffer's symbolic contents: intervals covering [0, size), values with deltas
// relative to absolute buffer positions.
class SymBuffer {
 public:
  SymBuffer(int64_t size, Value init) : size_(size) {
    if (size > 0) m_[0] = Interval{size, std::move(init)};
  }
  int64_t size() const { return size_; }

  std::vector<Piece> Read(int64_t off, int64_t len) {
    std::vector<Piece> out;
    if (len <= 0) return out;
    auto it = Split(off);
    auto stop = Split(off + len);
    for (; it != stop; ++it) {
      // absolute x = off + i; contribution at x + delta = i + (off + delta)
      out.push_back(Piece{it->second.end - it->first, Shift(it->second.value, off)});
    }
    return out;
  }

  void Write(int64_t off, const std::vector<Piece>& pieces) {
    int64_t len = 0;
    for (const Piece& pc : pieces) len += pc.len;
    if (len <= 0) return;
    auto it = Split(off);
    auto stop = Split(off + len);
    m_.erase(it, stop);
    int64_t pos = off;
    for (const Piece& pc : pieces) {
      m_[pos] = Interval{pos + pc.len, Shift(pc.value, -off)};
      pos += pc.len;
    }
  }

 private:
  struct Interval {
    int64_t end;
    Value value;
  };
  std::map<int64_t, Interval>::iterator Split(int64_t pos) {
    auto it = m_.lower_bound(pos);
    if (it != m_.end() && it->first == pos) return it;
    if (it == m_.begin()) return it;  // pos == size_ on an empty map, or beyond
    auto prev = std::prev(it);
    if (prev->second.end <= pos) return it;
    Interval tail{prev->second.end, prev->second.value};
    prev->second.end = pos;
    return m_.emplace_hint(it, pos, std::move(tail));
  }

  int64_t size_;
  std::map<int64_t, Interval> m_;
};

// Cuts two piece lists at their common boundaries.
void Align(const std::vector<Piece>& a, const std::vector<Piece>& b,
           std::vector<std::pair<Piece, Piece>>* out) {
  size_t i = 0, j = 0;
  int64_t ai = 0, bj = 0;  // consumed within a[i], b[j]
  while (i < a.size() && j < b.size()) {
    const int64_t take = std::min(a[i].len - ai, b[j].len - bj);
    out->push_back({Piece{take, a[i].value}, Piece{take, b[j].value}});
    ai += take;
    bj += take;
    if (ai == a[i].len) ++i, ai = 0;
    if (bj == b[j].len) ++j, bj = 0;
  }
}

// Both lists must be relative to the same origin (position 0 of their regions); cutting a
// run does not change its deltas, so Align only splits lengths.

class Verifier {
 public:
  Verifier(const Schedule& s, bool in_place) : s_(s), in_place_(in_place) {}

  Status Run() {
    const int p = s_.spec.world_size;
    if (static_cast<int>(s_.ranks.size()) != p) {
      return InternalError("schedule has " + std::to_string(s_.ranks.size()) +
                           " rank schedules for world size " + std::to_string(p));
    }
    for (int r = 0; r < p; ++r) GYRE_RETURN_IF_ERROR(CheckStructure(r));
    buffers_.resize(p);
    causal_.resize(p);
    for (int r = 0; r < p; ++r) {
      const int64_t in = InputCount(s_.spec, r);
      const int64_t out = OutputCount(s_.spec, r);
      auto mine = std::make_shared<std::vector<Contrib>>(1, Contrib{r, 0});
      auto& bufs = buffers_[r];
      if (in_place_) {
        // One memory for both: the input's elements first, the rest unwritten.
        bufs.input = std::make_unique<SymBuffer>(std::max(in, out), in > 0 ? mine : nullptr);
        if (in > 0 && out > in) bufs.input->Write(in, {Piece{out - in, nullptr}});
        bufs.output_alias = true;
      } else {
        bufs.input = std::make_unique<SymBuffer>(in, mine);
        bufs.output = std::make_unique<SymBuffer>(out, nullptr);
      }
      bufs.scratch = std::make_unique<SymBuffer>(s_.ranks[r].scratch_count, nullptr);
      causal_[r].assign(s_.ranks[r].steps.size(), std::vector<char>(p, 0));
    }
    internal::WalkTimes times;
    CostParams params;
    GYRE_RETURN_IF_ERROR(internal::WalkSchedule(
        s_, params, 1,
        [this](internal::StepRef step, internal::StepRef send) { return Visit(step, send); },
        &times));
    for (int r = 0; r < p; ++r) GYRE_RETURN_IF_ERROR(CheckPostcondition(r));
    if (s_.spec.collective == Collective::kBarrier) GYRE_RETURN_IF_ERROR(CheckBarrier());
    return Status::Ok();
  }

 private:
  struct RankBuffers {
    std::unique_ptr<SymBuffer> input, output, scratch;
    bool output_alias = false;
    SymBuffer* Get(BufferId id) {
      switch (id) {
        case BufferId::kInput:
          return input.get();
        case BufferId::kOutput:
          return output_alias ? input.get() : output.get();
        case BufferId::kScratch:
          return scratch.get();
      }
      return nullptr;
    }
  };

  std::string Where(int r, int i) const {
    std::string text = FormatRankSchedule(RankSchedule{r, 0, {s_.ranks[r].steps[i]}});
    // "rank r (1 steps, scratch 0)\n  #0 send ...\n" -> "send ..."
    size_t pos = text.find("#0 ");
    std::string body = pos == std::string::npos ? text : text.substr(pos + 3);
    while (!body.empty() && body.back() == '\n') body.pop_back();
    return s_.spec.ToString() + ": rank " + std::to_string(r) + " step #" + std::to_string(i) +
           " (" + body + ")";
  }

  Status CheckRegion(int r, int i, const Region& reg, bool write) const {
    if (reg.count < 0 || reg.offset < 0) {
      return InternalError(Where(r, i) + " has a negative offset or count");
    }
    int64_t size = 0;
    switch (reg.buffer) {
      case BufferId::kInput:
        size = InputCount(s_.spec, r);
        break;
      case BufferId::kOutput:
        size = OutputCount(s_.spec, r);
        break;
      case BufferId::kScratch:
        size = s_.ranks[r].scratch_count;
        break;
    }
    if (reg.count > 0 && reg.offset + reg.count > size) {
      return InternalError(Where(r, i) + " touches " + FormatRegion(reg) +
                           " beyond the buffer of " + std::to_string(size) + " elements");
    }
    if (write && reg.buffer == BufferId::kInput && reg.count > 0) {
      return InternalError(Where(r, i) + " writes the input buffer, which is read-only");
    }
    return Status::Ok();
  }

  Status CheckStructure(int r) const {
    const auto& steps = s_.ranks[r].steps;
    if (s_.ranks[r].rank != r) {
      return InternalError("rank schedule " + std::to_string(r) + " says it is rank " +
                           std::to_string(s_.ranks[r].rank));
    }
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      const Step& st = steps[i];
      switch (st.kind) {
        case StepKind::kSend:
          GYRE_RETURN_IF_ERROR(CheckRegion(r, i, st.src, false));
          break;
        case StepKind::kRecv:
          GYRE_RETURN_IF_ERROR(CheckRegion(r, i, st.dst, true));
          break;
        case StepKind::kReduce:
        case StepKind::kCopy:
          GYRE_RETURN_IF_ERROR(CheckRegion(r, i, st.src, false));
          GYRE_RETURN_IF_ERROR(CheckRegion(r, i, st.dst, true));
          if (st.src.count != st.dst.count) {
            return InternalError(Where(r, i) + " has source and destination of different sizes");
          }
          if (st.src.buffer == st.dst.buffer && st.src.count > 0 &&
              st.src.offset < st.dst.offset + st.dst.count &&
              st.dst.offset < st.src.offset + st.src.count) {
            return InternalError(Where(r, i) + " has overlapping source and destination");
          }
          break;
      }
      for (int32_t d : st.deps) {
        if (d < 0 || d >= i) {
          return InternalError(Where(r, i) + " depends on step #" + std::to_string(d) +
                               ": dependencies must point to earlier steps (no cycles)");
        }
      }
    }
    return Status::Ok();
  }

  Status Visit(internal::StepRef ref, internal::StepRef send) {
    const int r = ref.rank;
    const int i = ref.index;
    const Step& st = s_.ranks[r].steps[i];
    auto& bufs = buffers_[r];
    // Causality: what this step has heard of.
    std::vector<char>& know = causal_[r][i];
    know[r] = 1;
    for (int32_t d : st.deps) {
      for (size_t q = 0; q < know.size(); ++q) know[q] |= causal_[r][d][q];
    }
    switch (st.kind) {
      case StepKind::kSend: {
        std::vector<Piece> data = bufs.Get(st.src.buffer)->Read(st.src.offset, st.src.count);
        for (const Piece& pc : data) {
          if (!pc.value) return InternalError(Where(r, i) + " sends an unwritten value");
        }
        in_flight_[{r, i}] = std::move(data);
        break;
      }
      case StepKind::kRecv: {
        auto it = in_flight_.find({send.rank, send.index});
        if (it == in_flight_.end()) return InternalError(Where(r, i) + " got no message");
        bufs.Get(st.dst.buffer)->Write(st.dst.offset, it->second);
        in_flight_.erase(it);
        for (size_t q = 0; q < know.size(); ++q) know[q] |= causal_[send.rank][send.index][q];
        break;
      }
      case StepKind::kCopy: {
        std::vector<Piece> data = bufs.Get(st.src.buffer)->Read(st.src.offset, st.src.count);
        for (const Piece& pc : data) {
          if (!pc.value) return InternalError(Where(r, i) + " copies an unwritten value");
        }
        bufs.Get(st.dst.buffer)->Write(st.dst.offset, data);
        break;
      }
      case StepKind::kReduce: {
        std::vector<Piece> a = bufs.Get(st.dst.buffer)->Read(st.dst.offset, st.dst.count);
        std::vector<Piece> b = bufs.Get(st.src.buffer)->Read(st.src.offset, st.src.count);
        std::vector<std::pair<Piece, Piece>> aligned;
        Align(a, b, &aligned);
        std::vector<Piece> result;
        for (auto& [x, y] : aligned) {
          if (!x.value || !y.value) {
            return InternalError(Where(r, i) + " reduces " + DescribeValue(x.value) + " with " +
                                 DescribeValue(y.value));
          }
          auto merged = std::make_shared<std::vector<Contrib>>();
          merged->reserve(x.value->size() + y.value->size());
          std::merge(x.value->begin(), x.value->end(), y.value->begin(), y.value->end(),
                     std::back_inserter(*merged));
          for (size_t k = 1; k < merged->size(); ++k) {
            if ((*merged)[k].rank == (*merged)[k - 1].rank) {
              return InternalError(
                  Where(r, i) + " counts rank " + std::to_string((*merged)[k].rank) +
                  " twice: " + DescribeValue(x.value) + " + " + DescribeValue(y.value));
            }
          }
          result.push_back(Piece{x.len, std::move(merged)});
        }
        bufs.Get(st.dst.buffer)->Write(st.dst.offset, result);
        break;
      }
    }
    return Status::Ok();
  }

  // The promised contents of rank q's output, as pieces relative to position 0.
  std::vector<Piece> Expected(int q) const {
    const CollectiveSpec& sp = s_.spec;
    const int p = sp.world_size;
    const int64_t n = sp.count;
    std::vector<Piece> out;
    auto all = [&](int64_t delta) {
      auto v = std::make_shared<std::vector<Contrib>>();
      for (int r = 0; r < p; ++r) v->push_back(Contrib{r, delta});
      return v;
    };
    auto one = [&](int r, int64_t delta) {
      return std::make_shared<std::vector<Contrib>>(1, Contrib{r, delta});
    };
    switch (sp.collective) {
      case Collective::kAllreduce:
        if (n > 0) out.push_back(Piece{n, all(0)});
        break;
      case Collective::kReduce:
        if (q == sp.root && n > 0) out.push_back(Piece{n, all(0)});
        break;
      case Collective::kBroadcast:
        if (n > 0) out.push_back(Piece{n, one(sp.root, 0)});
        break;
      case Collective::kAllgather:
        for (int r = 0; r < p && n > 0; ++r) out.push_back(Piece{n, one(r, 0)});
        break;
      case Collective::kGather:
        if (q == sp.root) {
          for (int r = 0; r < p && n > 0; ++r) out.push_back(Piece{n, one(r, 0)});
        }
        break;
      case Collective::kReduceScatter:
        if (n > 0) out.push_back(Piece{n, all(q * n)});
        break;
      case Collective::kScatter:
        if (n > 0) out.push_back(Piece{n, one(sp.root, q * n)});
        break;
      case Collective::kAlltoall:
        for (int r = 0; r < p && n > 0; ++r) out.push_back(Piece{n, one(r, q * n)});
        break;
      case Collective::kBarrier:
        break;
    }
    // Deltas above are relative to each piece's own start (local element j is input element
    // j + delta); make them relative to the region's position 0 like every other piece.
    int64_t pos = 0;
    for (Piece& pc : out) {
      pc.value = Shift(pc.value, -pos);
      pos += pc.len;
    }
    return out;
  }

  Status CheckPostcondition(int q) {
    const int64_t out_count = OutputCount(s_.spec, q);
    if (out_count == 0) return Status::Ok();
    std::vector<Piece> got = buffers_[q].Get(BufferId::kOutput)->Read(0, out_count);
    std::vector<Piece> want = Expected(q);
    std::vector<std::pair<Piece, Piece>> aligned;
    Align(got, want, &aligned);
    int64_t pos = 0;
    for (auto& [g, w] : aligned) {
      auto same = [](const Value& a, const Value& b) {
        if (!a || !b) return !a && !b;
        return *a == *b;
      };
      if (!same(g.value, w.value)) {
        return InternalError(s_.spec.ToString() + (in_place_ ? " (in place)" : "") + ": rank " +
                             std::to_string(q) + " output elements [" + std::to_string(pos) + ", " +
                             std::to_string(pos + g.len) + ") end as " + DescribeValue(g.value) +
                             " but must be " + DescribeValue(w.value) + " (x = element index)");
      }
      pos += g.len;
    }
    return Status::Ok();
  }

  Status CheckBarrier() const {
    const int p = s_.spec.world_size;
    for (int r = 0; r < p; ++r) {
      std::vector<char> know(p, 0);
      know[r] = 1;
      for (const auto& k : causal_[r]) {
        for (int q = 0; q < p; ++q) know[q] |= k[q];
      }
      for (int q = 0; q < p; ++q) {
        if (!know[q]) {
          return InternalError(s_.spec.ToString() + ": rank " + std::to_string(r) +
                               " can leave the barrier without hearing from rank " +
                               std::to_string(q));
        }
      }
    }
    return Status::Ok();
  }

  const Schedule& s_;
  bool in_place_;
  std::vector<RankBuffers> buffers_;
  std::vector<std::vector<std::vector<char>>> causal_;
  std::map<std::pair<int, int>, std::vector<Piece>> in_flight_;
};

// Pairs of steps of one rank that touch overlapping elements, one writing, must be
// ordered by the dependencies.
Status CheckRaces(const Schedule& s, int r) {
  const auto& steps = s.ranks[r].steps;
  const int n = static_cast<int>(steps.size());
  const int words = (n + 63) / 64;
  std::vector<std::vector<uint64_t>> reach(n, std::vector<uint64_t>(words, 0));
  for (int i = 0; i < n; ++i) {
    for (int32_t d : steps[i].deps) {
      for (int w = 0; w < words; ++w) reach[i][w] |= reach[d][w];
      reach[i][d / 64] |= uint64_t{1} << (d % 64);
    }
  }
  auto ordered = [&](int a, int b) {  // a < b
    return (reach[b][a / 64] >> (a % 64)) & 1;
  };
  struct Access {
    int64_t begin, end;
    int step;
    bool write;
  };
  for (int buf = 0; buf < 3; ++buf) {
    std::vector<Access> acc;
    for (int i = 0; i < n; ++i) {
      const Step& st = steps[i];
      auto add = [&](const Region& reg, bool write) {
        if (reg.count > 0 && static_cast<int>(reg.buffer) == buf) {
          acc.push_back({reg.offset, reg.offset + reg.count, i, write});
        }
      };
      switch (st.kind) {
        case StepKind::kSend:
          add(st.src, false);
          break;
        case StepKind::kRecv:
          add(st.dst, true);
          break;
        case StepKind::kReduce:
        case StepKind::kCopy:
          add(st.src, false);
          add(st.dst, true);
          break;
      }
    }
    std::sort(acc.begin(), acc.end(),
              [](const Access& a, const Access& b) { return a.begin < b.begin; });
    // Sweep: each access against the later-starting ones that overlap it.
    for (size_t x = 0; x < acc.size(); ++x) {
      for (size_t y = x + 1; y < acc.size() && acc[y].begin < acc[x].end; ++y) {
        if (!acc[x].write && !acc[y].write) continue;
        if (acc[x].step == acc[y].step) continue;
        int a = std::min(acc[x].step, acc[y].step);
        int b = std::max(acc[x].step, acc[y].step);
        if (!ordered(a, b)) {
          return InternalError(s.spec.ToString() + ": rank " + std::to_string(r) + " steps #" +
                               std::to_string(a) + " and #" + std::to_string(b) +
                               " touch the same elements, one writing, without a dependency");
        }
      }
    }
  }
  return Status::Ok();
}

bool AllowsInPlace(const CollectiveSpec& spec) {
  return spec.collective == Collective::kAllreduce || spec.collective == Collective::kBroadcast;
}

}  // namespace

Status VerifySchedule(const Schedule& schedule, const VerifyOptions& options) {
  GYRE_RETURN_IF_ERROR(Verifier(schedule, /*in_place=*/false).Run());
  for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
    if (static_cast<int>(schedule.ranks[r].steps.size()) <= options.max_steps_for_race_check) {
      GYRE_RETURN_IF_ERROR(CheckRaces(schedule, r));
    }
  }
  if (options.check_in_place && AllowsInPlace(schedule.spec)) {
    GYRE_RETURN_IF_ERROR(Verifier(schedule, /*in_place=*/true).Run());
  }
  return Status::Ok();
}

}  // namespace gyre::algo
