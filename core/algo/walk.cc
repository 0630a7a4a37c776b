#include "core/algo/walk.h"

#include <algorithm>
#include <map>
#include <queue>
#include <sstream>
#include <tuple>

namespace gyre::algo::internal {
namespace {

struct MessageKey {
  int src;
  int dst;
  uint64_t tag;
  bool operator<(const MessageKey& o) const {
    return std::tie(src, dst, tag) < std::tie(o.src, o.dst, o.tag);
  }
};

std::string DescribeStep(const Schedule& s, StepRef ref) {
  const Step& st = s.ranks[ref.rank].steps[ref.index];
  std::ostringstream os;
  os << "rank " << ref.rank << " step #" << ref.index << " (";
  switch (st.kind) {
    case StepKind::kSend:
      os << "send " << FormatRegion(st.src) << " to rank " << st.peer << " " << FormatTag(st.tag);
      break;
    case StepKind::kRecv:
      os << "recv " << FormatRegion(st.dst) << " from rank " << st.peer << " " << FormatTag(st.tag);
      break;
    case StepKind::kReduce:
      os << "reduce " << FormatRegion(st.dst) << " += " << FormatRegion(st.src);
      break;
    case StepKind::kCopy:
      os << "copy " << FormatRegion(st.dst) << " = " << FormatRegion(st.src);
      break;
  }
  os << ")";
  return os.str();
}

struct Event {
  double time;
  int rank;
  int index;
  bool operator>(const Event& o) const {
    return std::tie(time, rank, index) > std::tie(o.time, o.rank, o.index);
  }
};

}  // namespace

Status WalkSchedule(const Schedule& s, const CostParams& params, size_t elem_bytes,
                    const StepVisitor& visit, WalkTimes* times) {
  const int p = static_cast<int>(s.ranks.size());
  std::map<MessageKey, StepRef> sends;
  std::map<MessageKey, StepRef> recvs;
  for (int r = 0; r < p; ++r) {
    const auto& steps = s.ranks[r].steps;
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      const Step& st = steps[i];
      if (st.kind != StepKind::kSend && st.kind != StepKind::kRecv) continue;
      if (st.peer < 0 || st.peer >= p || st.peer == r) {
        return InternalError(DescribeStep(s, {r, i}) + " names peer " + std::to_string(st.peer) +
                             ", not another rank of " + std::to_string(p));
      }
      const bool is_send = st.kind == StepKind::kSend;
      MessageKey key = is_send ? MessageKey{r, st.peer, st.tag} : MessageKey{st.peer, r, st.tag};
      auto& table = is_send ? sends : recvs;
      auto [it, inserted] = table.emplace(key, StepRef{r, i});
      if (!inserted) {
        return InternalError(DescribeStep(s, {r, i}) + " reuses the message key of " +
                             DescribeStep(s, it->second));
      }
    }
  }
  for (const auto& [key, ref] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      return InternalError(DescribeStep(s, ref) + " has no matching receive on rank " +
                           std::to_string(key.dst));
    }
    const int64_t sent = s.ranks[ref.rank].steps[ref.index].src.count;
    const int64_t expected = s.ranks[it->second.rank].steps[it->second.index].dst.count;
    if (sent != expected) {
      return InternalError(DescribeStep(s, ref) + " sends " + std::to_string(sent) +
                           " elements but " + DescribeStep(s, it->second) + " expects " +
                           std::to_string(expected));
    }
  }
  for (const auto& [key, ref] : recvs) {
    if (!sends.count(key)) {
      return InternalError(DescribeStep(s, ref) + " has no matching send on rank " +
                           std::to_string(key.src));
    }
  }

  // Dependents and remaining-dependency counts.
  std::vector<std::vector<std::vector<int>>> dependents(p);
  std::vector<std::vector<int>> remaining(p);
  times->finish.assign(p, {});
  times->rounds.assign(p, {});
  std::vector<std::vector<char>> done(p);
  std::vector<std::vector<double>> ready(p);
  for (int r = 0; r < p; ++r) {
    const auto& steps = s.ranks[r].steps;
    const int n = static_cast<int>(steps.size());
    dependents[r].assign(n, {});
    remaining[r].assign(n, 0);
    times->finish[r].assign(n, 0);
    times->rounds[r].assign(n, 0);
    done[r].assign(n, 0);
    ready[r].assign(n, 0);
    for (int i = 0; i < n; ++i) {
      for (int32_t d : steps[i].deps) {
        if (d < 0 || d >= i) {
          return InternalError(DescribeStep(s, {r, i}) + " depends on step #" + std::to_string(d) +
                               ", which is not an earlier step");
        }
        dependents[r][d].push_back(i);
        ++remaining[r][i];
      }
    }
  }

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue;
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < static_cast<int>(remaining[r].size()); ++i) {
      if (remaining[r][i] == 0) queue.push({0.0, r, i});
    }
  }
  std::vector<double> port_free(p, 0.0);
  struct Arrival {
    double time;
    StepRef send;
    int64_t rounds;
  };
  std::map<MessageKey, Arrival> arrived;
  std::map<MessageKey, StepRef> waiting;  // receives ready before their message
  int64_t visited = 0;
  int64_t total = 0;
  for (int r = 0; r < p; ++r) total += static_cast<int64_t>(s.ranks[r].steps.size());

  // Marks a step done at `finish` and releases its dependents.
  auto complete = [&](StepRef ref, double finish, int64_t rounds) {
    done[ref.rank][ref.index] = 1;
    times->finish[ref.rank][ref.index] = finish;
    times->rounds[ref.rank][ref.index] = std::max(times->rounds[ref.rank][ref.index], rounds);
    ++visited;
    for (int d : dependents[ref.rank][ref.index]) {
      ready[ref.rank][d] = std::max(ready[ref.rank][d], finish);
      times->rounds[ref.rank][d] = std::max(times->rounds[ref.rank][d], rounds);
      if (--remaining[ref.rank][d] == 0) queue.push({ready[ref.rank][d], ref.rank, d});
    }
  };

  while (!queue.empty()) {
    Event ev = queue.top();
    queue.pop();
    const StepRef ref{ev.rank, ev.index};
    const Step& st = s.ranks[ev.rank].steps[ev.index];
    const int64_t base_rounds = times->rounds[ev.rank][ev.index];
    switch (st.kind) {
      case StepKind::kReduce:
      case StepKind::kCopy: {
        GYRE_RETURN_IF_ERROR(visit(ref, StepRef{}));
        const double per_byte =
            st.kind == StepKind::kReduce ? params.gamma_s_per_byte : params.delta_s_per_byte;
        complete(ref, ev.time + per_byte * elem_bytes * st.dst.count, base_rounds);
        break;
      }
      case StepKind::kSend: {
        GYRE_RETURN_IF_ERROR(visit(ref, StepRef{}));
        const double bytes = static_cast<double>(elem_bytes) * st.src.count;
        const double start = std::max(ev.time, port_free[ev.rank]);
        port_free[ev.rank] = start + bytes * params.beta_s_per_byte;
        const double arrival = start + params.alpha_s + bytes * params.beta_s_per_byte;
        const MessageKey key{ev.rank, st.peer, st.tag};
        arrived[key] = Arrival{arrival, ref, base_rounds};
        complete(ref, port_free[ev.rank], base_rounds);
        auto w = waiting.find(key);
        if (w != waiting.end()) {
          const StepRef recv = w->second;
          waiting.erase(w);
          GYRE_RETURN_IF_ERROR(visit(recv, ref));
          const int64_t rr = std::max(times->rounds[recv.rank][recv.index], base_rounds + 1);
          complete(recv, std::max(ready[recv.rank][recv.index], arrival), rr);
        }
        break;
      }
      case StepKind::kRecv: {
        const MessageKey key{st.peer, ev.rank, st.tag};
        auto a = arrived.find(key);
        if (a == arrived.end()) {
          waiting[key] = ref;
          break;
        }
        GYRE_RETURN_IF_ERROR(visit(ref, a->second.send));
        complete(ref, std::max(ev.time, a->second.time),
                 std::max(base_rounds, a->second.rounds + 1));
        break;
      }
    }
  }
  if (visited != total) {
    std::ostringstream os;
    os << "the schedule cannot finish: " << (total - visited) << " of " << total
       << " steps never run; first waiting:";
    int listed = 0;
    for (int r = 0; r < p && listed < 6; ++r) {
      for (int i = 0; i < static_cast<int>(done[r].size()) && listed < 6; ++i) {
        if (!done[r][i] && remaining[r][i] == 0) {
          os << " " << DescribeStep(s, {r, i}) << ";";
          ++listed;
        }
      }
    }
    return InternalError(os.str());
  }
  return Status::Ok();
}

}  // namespace gyre::algo::internal
