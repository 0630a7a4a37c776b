#include "launcher/flight_records.h"

#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "core/job/verdict.h"
#include "launcher/signal_name.h"

namespace gyre::launcher {
namespace {

// The JSON string starting at text[at] (just after its opening quote), escapes kept; *end is
// set past its closing quote. False if it does not close.
bool ScanString(const std::string& text, size_t at, std::string* out, size_t* end) {
  for (size_t i = at; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
      continue;
    }
    if (text[i] == '"') {
      out->assign(text, at, i - at);
      *end = i + 1;
      return true;
    }
  }
  return false;
}

// The class most of `ranks` gave in `accusations` (a tie: the first in name order).
std::string MostSaid(const std::map<int, job::Blamed>& accusations, const std::vector<int>& ranks) {
  std::map<std::string, int> said;
  for (int r : ranks) {
    if (auto it = accusations.find(r); it != accusations.end()) ++said[it->second.what];
  }
  std::string what;
  int most = 0;
  for (const auto& [class_name, count] : said) {
    if (count > most) {
      most = count;
      what = class_name;
    }
  }
  return what;
}

// Two ranks that blame each other each saw the other as the cause: a verdict cannot be
// right on both sides, and what both sides agree on is that they cannot reach one another.
// From each such pair (the lowest blamer first), every rank that blames a rank already placed
// goes on the other side, and so does every rank one of them blames (each rank is placed
// once). Pairs that share no rank (rank 0 blames 2 and 2 blames 0, rank 1 blames 3 and 3
// blames 1: each blames the peer it waited on) are put together by host, as a cut separates
// hosts: a group goes on the side whose ranks share its hosts, else with its lowest rank on
// the first side. Then a rank that blames a placed rank, or is blamed by one, goes opposite
// it, and any other rank on a host of one side only goes on that side (a rank told another's
// verdict blames no one itself). False, and nothing set, when no two ranks blame each other.
// What a rank calls a peer it cannot reach or hear from: the classes a cut network gives on
// both sides. Others are facts about the blamed rank itself (it left, refused a call,
// diverged, ran out of memory), which a blame back does not contradict: two ranks that blame
// each other with one of those are not a cut (rank 0 refused a call and rank 1 went on and
// failed; rank 0 then found rank 1 had left).
bool CutClass(const std::string& what) {
  return what == "unreachable" || what == "stalled" || what == "dead";
}

bool SplitIntoAccusingSides(const std::map<int, job::Blamed>& accusations, int world_size,
                            const std::vector<std::string>& hosts, Blame* out) {
  auto host_of = [&hosts](int rank) {
    return rank >= 0 && rank < static_cast<int>(hosts.size()) ? hosts[rank] : std::string();
  };
  std::map<int, int> side;  // rank -> 0 (side_a) or 1 (side_b)
  for (const auto& [a, blamed] : accusations) {
    const int b = blamed.rank;
    auto back = accusations.find(b);
    if (back == accusations.end() || back->second.rank != a || side.count(a) || side.count(b) ||
        !CutClass(blamed.what) || !CutClass(back->second.what)) {
      continue;
    }
    // This pair and the ranks it reaches through blame, on sides 0 and 1 of their own.
    std::map<int, int> group = {{a, 0}, {b, 1}};
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [blamer, target] : accusations) {
        auto mine = group.find(blamer);
        auto theirs = group.find(target.rank);
        if (mine == group.end() && theirs != group.end() && !side.count(blamer)) {
          group[blamer] = 1 - theirs->second;  // it blames that side: it is on the other
          grew = true;
        } else if (mine != group.end() && theirs == group.end() && !side.count(target.rank)) {
          group[target.rank] = 1 - mine->second;  // blamed by that side: it is on the other
          grew = true;
        }
      }
    }
    // Which way round it joins the groups already placed: by the hosts they share.
    int agree = 0;
    for (const auto& [rank, which] : group) {
      for (const auto& [placed, placed_side] : side) {
        if (host_of(rank).empty() || host_of(rank) != host_of(placed)) continue;
        agree += which == placed_side ? 1 : -1;
      }
    }
    const bool flip = agree < 0;
    for (const auto& [rank, which] : group) side[rank] = flip ? 1 - which : which;
  }
  if (side.empty()) return false;
  // The side every placed rank on `host` is on; -1 when none is, or they are on both.
  auto side_of_host = [&](const std::string& host) {
    int found = -1;
    for (const auto& [rank, which] : side) {
      if (host.empty() || host_of(rank) != host) continue;
      if (found >= 0 && found != which) return -1;
      found = which;
    }
    return found;
  };
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [blamer, target] : accusations) {
      const bool placed = side.count(blamer) > 0, target_placed = side.count(target.rank) > 0;
      if (placed && target_placed) continue;
      if (placed) {
        side[target.rank] = 1 - side[blamer];
      } else if (target_placed) {
        side[blamer] = 1 - side[target.rank];
      } else if (const int by_host = side_of_host(host_of(blamer)); by_host >= 0) {
        side[blamer] = by_host;
        side[target.rank] = 1 - by_host;
      } else {
        continue;
      }
      grew = true;
    }
  }
  for (int rank = 0; rank < world_size; ++rank) {
    if (side.count(rank) > 0) continue;
    if (const int by_host = side_of_host(host_of(rank)); by_host >= 0) side[rank] = by_host;
  }
  for (const auto& [rank, which] : side) (which == 0 ? out->side_a : out->side_b).push_back(rank);
  if (out->side_a.empty() || out->side_b.empty()) return false;
  if (out->side_a.front() > out->side_b.front()) std::swap(out->side_a, out->side_b);
  out->what_a = MostSaid(accusations, out->side_a);
  out->what_b = MostSaid(accusations, out->side_b);
  return true;
}

}  // namespace

std::vector<FlightEvent> ParseFlightRecord(const std::string& json) {
  static const std::string kOpen = "{\"t_us\": ";
  static const std::string kKind = ", \"kind\": \"";
  static const std::string kSeq = ", \"seq\": ";
  static const std::string kDetail = ", \"detail\": \"";
  std::vector<FlightEvent> events;
  size_t at = json.find(kOpen);
  while (at != std::string::npos) {
    FlightEvent e;
    size_t p = json.find(kKind, at);
    size_t end = 0;
    if (p == std::string::npos || !ScanString(json, p + kKind.size(), &e.kind, &end)) break;
    if (json.compare(end, kSeq.size(), kSeq) != 0) break;
    p = end + kSeq.size();
    while (p < json.size() && json[p] >= '0' && json[p] <= '9') {
      e.seq = e.seq * 10 + static_cast<uint64_t>(json[p] - '0');
      ++p;
    }
    if (json.compare(p, kDetail.size(), kDetail) != 0) break;
    if (!ScanString(json, p + kDetail.size(), &e.detail, &end)) break;
    events.push_back(std::move(e));
    at = json.find(kOpen, end);
  }
  return events;
}

std::optional<std::vector<FlightEvent>> ReadFlightRecord(const std::string& run_dir, int r) {
  std::ifstream f(run_dir + "/flight-rank" + std::to_string(r) + ".json");
  if (!f) return std::nullopt;
  std::stringstream buf;
  buf << f.rdbuf();
  return ParseFlightRecord(buf.str());
}

Blame BlameOf(const std::vector<std::vector<FlightEvent>>& records, int world_size,
              const std::vector<std::string>& hosts) {
  // Per blamed rank: the records naming it, and per class how many and the first pid.
  struct Votes {
    int count = 0;
    std::map<std::string, std::pair<int, int64_t>> by_class;
  };
  std::map<int, Votes> votes;
  // Who blames whom, from each rank's last failure: blamer rank -> what it said. Not only on
  // the earliest failed operation: across a cut, one side may be a call behind the other
  // (it was still finishing the call the other side had completed), and each side's verdict
  // is on its own call.
  std::map<int, job::Blamed> accusations;
  uint64_t earliest = std::numeric_limits<uint64_t>::max();
  for (size_t index = 0; index < records.size(); ++index) {
    const std::vector<FlightEvent>& events = records[index];
    std::optional<job::Blamed> last;
    uint64_t last_seq = 0;
    for (const FlightEvent& e : events) {
      job::Blamed b;
      if (e.kind == job::kBlameEvent && job::ParseBlame(e.detail, &b)) {
        last = b;
        last_seq = e.seq;
      } else if (e.kind == "op_start" && last && e.seq > last_seq) {
        last.reset();  // the program went on past that failure
      }
    }
    if (!last || last->rank < 0 || last->rank >= world_size) continue;
    const int self = static_cast<int>(index);
    if (self < world_size && last->rank != self) accusations[self] = *last;
    if (last_seq > earliest) continue;
    if (last_seq < earliest) {
      votes.clear();
      earliest = last_seq;
    }
    Votes& v = votes[last->rank];
    ++v.count;
    auto [it, fresh] = v.by_class.try_emplace(last->what, 0, last->pid);
    ++it->second.first;
  }
  Blame blame;
  if (SplitIntoAccusingSides(accusations, world_size, hosts, &blame)) return blame;
  int best = 0;
  for (const auto& [rank, v] : votes) {
    if (v.count <= best) continue;
    best = v.count;
    blame.rank = rank;
    int best_class = 0;
    for (const auto& [what, counted] : v.by_class) {
      if (counted.first > best_class) {
        best_class = counted.first;
        blame.what = what;
        blame.pid = counted.second;
      }
    }
  }
  return blame;
}

const ProcessResult* ExitedOnItsOwn(const Blame& blame, const std::vector<ProcessResult>& results) {
  if (blame.contradicted() || blame.rank < 0 || (blame.what != "left" && blame.what != "dead")) {
    return nullptr;
  }
  // The rank's process that was the first of the job to fail on its own (its gyred, killed by a
  // signal, say): the program's own failure followed from it.
  for (const ProcessResult& r : results) {
    if (r.rank == blame.rank && r.root_cause && r.failed_on_its_own()) return &r;
  }
  // Else the rank's program: a daemon beside it (a service) only reported its going.
  const ProcessResult* program = nullptr;
  for (const ProcessResult& r : results) {
    if (r.rank != blame.rank || r.service) continue;
    if (program == nullptr || r.pid == blame.pid) program = &r;
  }
  if (program == nullptr || !program->exited || program->exit_code == 0 ||
      program->killed_by_launcher) {
    return nullptr;
  }
  return program;
}

std::string VerdictLine(const Blame& blame, const std::string& verdict,
                        const std::vector<ProcessResult>& results) {
  const ProcessResult* exited = ExitedOnItsOwn(blame, results);
  if (exited == nullptr) return verdict;
  std::string line = exited->name + " (pid " + std::to_string(exited->pid) + ")";
  if (exited->signaled) {
    line += " was killed by signal " + SignalName(exited->signal) + " (" +
            std::to_string(exited->signal) + ")";
  } else {
    line += " exited with code " + std::to_string(exited->exit_code);
  }
  if (exited->signaled) {
    // A signal is its own cause; what the process wrote last (a log line) is not.
  } else if (exited->stderr_tail.empty()) {
    line += " (it wrote nothing to stderr)";
  } else {
    constexpr size_t kMaxQuoted = 300;
    std::string last = exited->stderr_tail.back();
    if (last.size() > kMaxQuoted) last = last.substr(0, kMaxQuoted - 3) + "...";
    line += ": \"" + last + "\"";
  }
  // "<operation> failed after ... on rank R: ..." names the call the others lost.
  const size_t failed = verdict.find(" failed after ");
  line += "; the other ranks' " +
          (failed == std::string::npos ? std::string("calls") : verdict.substr(0, failed)) +
          " failed because it had gone";
  if (blame.what == "left") line += " (it left without Comm::Close)";
  return line;
}

}  // namespace gyre::launcher
