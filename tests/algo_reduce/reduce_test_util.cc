#include "tests/algo_reduce/reduce_test_util.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace gyre::algo::testing {

std::vector<AlgoCase> ReducingCases() {
  std::vector<AlgoCase> cases;
  for (Collective c : {Collective::kAllreduce, Collective::kReduce, Collective::kReduceScatter}) {
    for (Algorithm a : AlgorithmsFor(c)) cases.push_back({c, a});
    cases.push_back({c, Algorithm::kCanonical});
  }
  return cases;
}

CollectiveSpec MakeSpec(Collective c, Algorithm a, int p, int64_t count, int root,
                        int64_t segment) {
  CollectiveSpec s;
  s.collective = c;
  s.algorithm = a;
  s.world_size = p;
  s.count = count;
  s.root = root;
  s.segment_elems = segment;
  return s;
}

namespace {

// Input and output share one address space here; scratch gets its own.
struct Span {
  int space;  // 0: input/output, 1: scratch
  int64_t begin, end;
};

bool Overlap(const Span& a, const Span& b) {
  return a.space == b.space && a.begin < b.end && b.begin < a.end;
}

Span Aliased(const Region& r) {
  return Span{r.buffer == BufferId::kScratch ? 1 : 0, r.offset, r.offset + r.count};
}

}  // namespace

// For every step, the set of steps (of any rank) that are certainly done before it starts,
// as bitsets over a global numbering. `causal` adds message edges.
class HappensBefore {
 public:
  HappensBefore(const Schedule& s, bool causal) : s_(s) {
    const int p = static_cast<int>(s.ranks.size());
    base_.assign(p + 1, 0);
    for (int r = 0; r < p; ++r) base_[r + 1] = base_[r] + s.ranks[r].steps.size();
    const size_t total = base_[p];
    words_ = (total + 63) / 64;
    start_.assign(total, std::vector<uint64_t>(words_, 0));
    done_.assign(total, std::vector<uint64_t>(words_, 0));
    std::map<std::tuple<int, int, uint64_t>, size_t> sends;  // (src, dst, tag) -> id
    std::vector<size_t> next(p, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < p; ++r) {
        const auto& steps = s.ranks[r].steps;
        while (next[r] < steps.size()) {
          const Step& st = steps[next[r]];
          const size_t id = Id(r, next[r]);
          size_t send_id = 0;
          if (causal && st.kind == StepKind::kRecv) {
            auto it = sends.find({st.peer, r, st.tag});
            if (it == sends.end()) break;
            send_id = it->second;
          }
          for (int32_t d : st.deps) Or(&start_[id], done_[Id(r, d)]);
          done_[id] = start_[id];
          done_[id][id / 64] |= uint64_t{1} << (id % 64);
          if (causal && st.kind == StepKind::kRecv) {
            Or(&done_[id], done_[send_id]);
            send_of_[id] = send_id;
          }
          if (st.kind == StepKind::kSend) sends[{r, st.peer, st.tag}] = id;
          ++next[r];
          progress = true;
        }
      }
    }
  }

  // Whether step `a` of `rank` is done before step `b` (a < b) touches memory.
  bool Before(int rank, int a, int b) const {
    const size_t ia = Id(rank, a);
    const size_t ib = Id(rank, b);
    if (Has(start_[ib], ia)) return true;
    auto it = send_of_.find(ib);
    return it != send_of_.end() && Has(start_[it->second], ia);
  }

 private:
  size_t Id(int r, size_t i) const { return base_[r] + i; }
  static bool Has(const std::vector<uint64_t>& set, size_t id) {
    return (set[id / 64] >> (id % 64)) & 1;
  }
  void Or(std::vector<uint64_t>* into, const std::vector<uint64_t>& from) const {
    for (size_t w = 0; w < words_; ++w) (*into)[w] |= from[w];
  }

  const Schedule& s_;
  std::vector<size_t> base_;
  size_t words_ = 0;
  std::vector<std::vector<uint64_t>> start_, done_;
  std::map<size_t, size_t> send_of_;  // receive id -> its send's id
};

std::string AliasedRace(const Schedule& s, int rank, bool causal) {
  const HappensBefore hb(s, causal);
  const auto& steps = s.ranks[rank].steps;
  const int n = static_cast<int>(steps.size());
  struct Access {
    Span span;
    int step;
    bool write;
  };
  std::vector<Access> acc;
  for (int i = 0; i < n; ++i) {
    const Step& st = steps[i];
    auto add = [&](const Region& r, bool write) {
      if (r.count > 0) acc.push_back({Aliased(r), i, write});
    };
    switch (st.kind) {
      case StepKind::kSend:
        add(st.src, false);
        break;
      case StepKind::kRecv:
        add(st.dst, true);
        break;
      case StepKind::kReduce:
      case StepKind::kCopy: {
        const Span a = Aliased(st.src);
        const Span b = Aliased(st.dst);
        if (st.kind == StepKind::kCopy && a.space == b.space && a.begin == b.begin &&
            a.end == b.end) {
          break;  // skipped by the executor
        }
        add(st.src, false);
        add(st.dst, true);
        break;
      }
    }
  }
  for (size_t x = 0; x < acc.size(); ++x) {
    for (size_t y = x + 1; y < acc.size(); ++y) {
      const Access& a = acc[x];
      const Access& b = acc[y];
      if (a.step == b.step || (!a.write && !b.write) || !Overlap(a.span, b.span)) continue;
      const int lo = std::min(a.step, b.step);
      const int hi = std::max(a.step, b.step);
      if (!hb.Before(rank, lo, hi)) {
        return "rank " + std::to_string(rank) + ": steps #" + std::to_string(lo) + " and #" +
               std::to_string(hi) + " touch the same memory in place, unordered";
      }
    }
  }
  return "";
}

std::vector<std::vector<std::string>> SymbolicOutputs(const Schedule& s) {
  const int p = s.spec.world_size;
  struct Buffers {
    std::vector<std::string> in, out, tmp;
    std::vector<std::string>& Get(BufferId b) {
      return b == BufferId::kInput ? in : (b == BufferId::kOutput ? out : tmp);
    }
  };
  std::vector<Buffers> bufs(p);
  for (int r = 0; r < p; ++r) {
    bufs[r].in.assign(InputCount(s.spec, r), "r" + std::to_string(r));
    bufs[r].out.assign(OutputCount(s.spec, r), "");
    bufs[r].tmp.assign(s.ranks[r].scratch_count, "");
  }
  std::map<std::tuple<int, int, uint64_t>, std::vector<std::string>> messages;
  std::vector<size_t> next(p, 0);
  auto read = [&](int r, const Region& g) {
    auto& b = bufs[r].Get(g.buffer);
    return std::vector<std::string>(b.begin() + g.offset, b.begin() + g.offset + g.count);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& steps = s.ranks[r].steps;
      while (next[r] < steps.size()) {
        const Step& st = steps[next[r]];
        if (st.kind == StepKind::kRecv) {
          auto it = messages.find({st.peer, r, st.tag});
          if (it == messages.end()) break;
          std::copy(it->second.begin(), it->second.end(),
                    bufs[r].Get(st.dst.buffer).begin() + st.dst.offset);
          messages.erase(it);
        } else if (st.kind == StepKind::kSend) {
          messages[{r, st.peer, st.tag}] = read(r, st.src);
        } else {
          std::vector<std::string> src = read(r, st.src);
          auto& dst = bufs[r].Get(st.dst.buffer);
          for (int64_t i = 0; i < st.dst.count; ++i) {
            std::string& d = dst[st.dst.offset + i];
            d = st.kind == StepKind::kCopy ? src[i] : "(" + d + "+" + src[i] + ")";
          }
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (next[r] != s.ranks[r].steps.size()) return {};
  }
  std::vector<std::vector<std::string>> outs(p);
  for (int r = 0; r < p; ++r) outs[r] = bufs[r].out;
  return outs;
}

std::string CanonicalOrder(int lo, int hi, int root, int p) {
  if (hi - lo == 1) return "r" + std::to_string((lo + root) % p);
  int half = 1;
  while (half * 2 < hi - lo) half *= 2;
  return "(" + CanonicalOrder(lo, lo + half, root, p) + "+" +
         CanonicalOrder(lo + half, hi, root, p) + ")";
}

namespace {

// Parses one expression starting at `pos` and returns its normalised text.
std::string Normalise(const std::string& e, size_t* pos) {
  if (e[*pos] != '(') {
    size_t end = *pos;
    while (end < e.size() && e[end] != '+' && e[end] != ')') ++end;
    std::string leaf = e.substr(*pos, end - *pos);
    *pos = end;
    return leaf;
  }
  ++*pos;  // '('
  std::string a = Normalise(e, pos);
  ++*pos;  // '+'
  std::string b = Normalise(e, pos);
  ++*pos;  // ')'
  if (b < a) std::swap(a, b);
  return "(" + a + "+" + b + ")";
}

}  // namespace

std::string UpToCommutation(const std::string& expr) {
  if (expr.empty()) return expr;
  size_t pos = 0;
  return Normalise(expr, &pos);
}

}  // namespace gyre::algo::testing
