#include "launcher/flight_records.h"

#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "core/job/verdict.h"

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

Blame BlameOf(const std::vector<std::vector<FlightEvent>>& records, int world_size) {
  // Per blamed rank: the records naming it, and per class how many and the first pid.
  struct Votes {
    int count = 0;
    std::map<std::string, std::pair<int, int64_t>> by_class;
  };
  std::map<int, Votes> votes;
  uint64_t earliest = std::numeric_limits<uint64_t>::max();
  for (const std::vector<FlightEvent>& events : records) {
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
    if (!last || last->rank < 0 || last->rank >= world_size || last_seq > earliest) continue;
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

}  // namespace gyre::launcher
