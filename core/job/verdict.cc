#include "core/job/verdict.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "core/job/identity.h"

namespace gyre::job {
namespace {

std::string Where(const PeerView& v) {
  const int64_t pid = v.reach == Reach::kAnswered ? v.state.pid() : v.pid;
  const std::string host = v.reach == Reach::kAnswered ? v.state.host() : v.host;
  const std::string addr = v.reach == Reach::kAnswered ? v.state.data_address() : v.data_address;
  std::ostringstream os;
  os << "pid " << pid << " on host " << host;
  if (!addr.empty()) os << ", " << addr;
  return os.str();
}

std::string HostOf(const PeerView& v) {
  return v.reach == Reach::kAnswered ? v.state.host() : v.host;
}

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  return os.str();
}

// Idle before call `seq` because an earlier call of its own failed (and nothing has completed
// since): a victim of that failure rather than a rank that never got to the call.
bool IdleAfterOwnFailure(const proto::RankState& st, uint64_t seq) {
  return !st.in_op() && st.failed_seq() > st.last_completed_seq() && st.failed_seq() < seq;
}

}  // namespace

const char* RankClassName(RankClass c) {
  switch (c) {
    case RankClass::kSelf:
      return "self";
    case RankClass::kDead:
      return "dead";
    case RankClass::kLeft:
      return "left";
    case RankClass::kUnreachable:
      return "unreachable";
    case RankClass::kStalled:
      return "stalled";
    case RankClass::kNotEntered:
      return "not entered";
    case RankClass::kDiverged:
      return "diverged";
    case RankClass::kRefused:
      return "refused the call";
    case RankClass::kExhausted:
      return "out of memory";
    case RankClass::kDropped:
      return "dropped a connection";
    case RankClass::kSlow:
      return "slow";
    case RankClass::kWaiting:
      return "waiting";
    case RankClass::kDone:
      return "done";
    case RankClass::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string ExhaustedResource(const std::string& error) {
  auto has = [&](const char* text) { return error.find(text) != std::string::npos; };
  // strerror(EMFILE) and strerror(ENFILE); RLIMIT_NOFILE checks say "file descriptors".
  if (has("Too many open files") || has("file descriptors")) return "file descriptors";
  if (has("cannot start a thread")) return "threads";
  if (has("No space left on device") || has("Disk quota exceeded")) return "disk space";
  return "memory";
}

std::string VerdictAsRelayed(const std::string& text, int from_rank) {
  const std::string mine = "rank " + std::to_string(from_rank) + " (this rank)";
  std::string out = text;
  for (size_t at = out.find(mine); at != std::string::npos; at = out.find(mine, at)) {
    const std::string theirs =
        "rank " + std::to_string(from_rank) + " (the rank that sent this verdict)";
    out.replace(at, mine.size(), theirs);
    at += theirs.size();
  }
  return out;
}

bool NotRunningLongEnoughToBlameOthers(const LocalFailure& me) {
  return me.timeout > Duration::zero() &&
         (me.frozen >= me.timeout || me.frozen_in_call >= me.timeout / 2);
}

Verdict Classify(const LocalFailure& me, const std::vector<PeerView>& peers) {
  const int p = static_cast<int>(peers.size());
  const uint64_t S = me.seq;
  Verdict v;
  v.classes.assign(p, RankClass::kUnknown);
  std::vector<int> waiting_on(p, -1);
  // What peers' daemons said of their programs leaving, by rank.
  std::vector<const PeerDeparture*> gone(p, nullptr);
  for (const PeerDeparture& d : me.departures) {
    if (d.rank >= 0 && d.rank < p && d.rank != me.rank) gone[d.rank] = &d;
  }
  for (int q = 0; q < p; ++q) {
    if (q == me.rank) {
      v.classes[q] = RankClass::kSelf;
      waiting_on[q] = me.waiting_on;
      continue;
    }
    const PeerView& pv = peers[q];
    // Its program went away: before completing this call, it will make no call after the
    // last it completed, whatever its daemon (gone, or idle on its way out) shows; after, it
    // did its part in this call and left. Gone on purpose, it is as much the cause, but not
    // dead: the program may have finished its work and exited 0.
    if (gone[q] != nullptr && (pv.reach != Reach::kAnswered || !pv.state.in_op())) {
      const RankClass gone_class = gone[q]->on_purpose ? RankClass::kLeft : RankClass::kDead;
      v.classes[q] = gone[q]->last_completed_seq < S ? gone_class : RankClass::kDone;
      continue;
    }
    if (pv.reach == Reach::kRefused) {
      v.classes[q] = RankClass::kDead;
      continue;
    }
    if (pv.reach == Reach::kUnreachable) {
      v.classes[q] = RankClass::kUnreachable;
      continue;
    }
    if (pv.reach == Reach::kSilent) {
      v.classes[q] = RankClass::kStalled;
      continue;
    }
    if (pv.reach != Reach::kAnswered) {
      v.classes[q] = RankClass::kUnknown;
      continue;
    }
    const proto::RankState& st = pv.state;
    if (st.refused_seq() == S && S != 0) {
      v.classes[q] = RankClass::kRefused;  // wherever it is now, it sent nothing in call S
    } else if (st.exhausted_seq() == S && S != 0) {
      v.classes[q] = RankClass::kExhausted;  // its own memory ran out in call S
    } else if (st.last_started_seq() > S) {
      v.classes[q] = RankClass::kDone;  // it finished (or gave up on) this call and moved on
    } else if (st.last_started_seq() < S) {
      v.classes[q] = RankClass::kNotEntered;
      if (st.in_op()) waiting_on[q] = st.waiting_on();  // still in an earlier call
    } else if (st.in_op()) {
      // In the same operation: progressing recently means slow, else it waits on someone.
      const double t = std::chrono::duration<double>(me.timeout).count();
      waiting_on[q] = st.waiting_on();
      v.classes[q] = st.seconds_since_progress() < t / 2 && st.waiting_on() < 0
                         ? RankClass::kSlow
                         : RankClass::kWaiting;
    } else if (st.last_completed_seq() >= S) {
      v.classes[q] = RankClass::kDone;
    } else {
      v.classes[q] = RankClass::kWaiting;  // it failed this operation too
      waiting_on[q] = st.waiting_on();
    }
  }

  // Divergence: the earliest sequence number at which the ranks' calls differ. The ranks
  // outside the largest group of identical calls diverged (on a tie, the group holding the
  // lowest rank is taken as the reference), so every survivor names the same rank.
  std::map<uint64_t, std::vector<std::pair<int, OpDesc>>> calls;
  std::map<uint64_t, std::map<int, std::string>> names;
  for (const CallRecord& c : me.recent) {
    calls[c.seq].push_back({me.rank, c.desc});
    names[c.seq][me.rank] = c.op_name;
  }
  for (int q = 0; q < p; ++q) {
    if (q == me.rank || peers[q].reach != Reach::kAnswered) continue;
    for (const proto::CallRecord& c : peers[q].state.recent()) {
      OpDesc d;
      d.collective = static_cast<uint8_t>(c.collective());
      d.dtype = static_cast<uint8_t>(c.dtype());
      d.reduce_op = static_cast<uint8_t>(c.reduce_op());
      d.algorithm = static_cast<uint8_t>(c.algorithm());
      d.root = c.root();
      d.count = c.count();
      calls[c.seq()].push_back({q, d});
    }
  }
  std::string divergence;
  for (auto& [seq, list] : calls) {
    // A program that caught a divergence's error and went on: the ranks are in step again
    // after it, and a later divergence is this one's cause, not that one (which named the
    // first one's rank for every later mismatch).
    if (seq < S &&
        std::find(me.failed_here.begin(), me.failed_here.end(), seq) != me.failed_here.end()) {
      continue;
    }
    std::vector<std::pair<OpDesc, std::vector<int>>> groups;
    for (const auto& [rank, desc] : list) {
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == desc; });
      if (it == groups.end()) {
        groups.push_back({desc, {rank}});
      } else {
        it->second.push_back(rank);
      }
    }
    if (groups.size() < 2) continue;
    for (auto& g : groups) std::sort(g.second.begin(), g.second.end());
    size_t ref = 0;
    for (size_t i = 1; i < groups.size(); ++i) {
      const auto& a = groups[i].second;
      const auto& b = groups[ref].second;
      if (a.size() > b.size() || (a.size() == b.size() && a.front() < b.front())) ref = i;
    }
    int odd = -1;
    OpDesc odd_desc;
    for (size_t i = 0; i < groups.size(); ++i) {
      if (i == ref) continue;
      for (int r : groups[i].second) {
        if (odd < 0 || r < odd) {
          odd = r;
          odd_desc = groups[i].first;
        }
      }
    }
    v.root = odd;
    v.root_class = RankClass::kDiverged;
    v.voters = static_cast<int>(list.size());
    v.classes[odd] = RankClass::kDiverged;
    std::ostringstream d;
    d << "called " << DescribeOpDesc(odd_desc) << " at seq=" << seq << " while "
      << (groups[ref].second.size() > 1 ? "ranks " : "rank ") << RankList(groups[ref].second)
      << " called " << DescribeOpDesc(groups[ref].first);
    divergence = d.str();
    break;
  }

  // A rank that refused this very call for its arguments is the cause, whatever else is
  // seen: it sent nothing in it (a divergence found above may be that same call's fingerprint).
  for (int q = 0; q < p; ++q) {
    if (q != me.rank && peers[q].reach == Reach::kAnswered && peers[q].state.refused_seq() == S &&
        S != 0) {
      v.classes[q] = RankClass::kRefused;
      v.root = q;
      v.root_class = RankClass::kRefused;
      break;
    }
  }

  // A rank whose own memory ran out in this call is the cause: the others failed on what it
  // could not do (a connection it dropped, data it never sent). This rank's own such failure
  // counts, unless another rank's verdict told it (that path ends before Classify).
  if (v.root < 0 && S != 0 && me.status.code() == StatusCode::kResourceExhausted &&
      !NotRunningLongEnoughToBlameOthers(me)) {
    v.classes[me.rank] = RankClass::kExhausted;
  }
  for (int q = 0; q < p && v.root < 0; ++q) {
    if (v.classes[q] == RankClass::kExhausted) {
      v.root = q;
      v.root_class = RankClass::kExhausted;
    }
  }

  // A connection one rank dropped for what its sender did fails every later call over that
  // pair at once: a call that ended on it ended there, not on a rank that had not entered it
  // yet (the rank named before, while the drop's reason showed only on the two ranks).
  std::string dropped_text;
  if (v.root < 0 && S != 0) {
    int dropper = -1;
    if (FindDroppedConnection(me.status.message(), &dropper, &dropped_text) && dropper >= 0 &&
        dropper < p) {
      v.root = dropper;
      v.root_class = RankClass::kDropped;
      v.classes[dropper] = RankClass::kDropped;
    }
  }

  // The root cause.
  auto first_of = [&](RankClass c) {
    for (int q = 0; q < p; ++q) {
      if (v.classes[q] == c) return q;
    }
    return -1;
  };
  // First the chain of waits from this rank: the first rank on it that is not itself waiting
  // is the one holding this rank up. Only when the chain ends nowhere useful does the class
  // priority decide, so that a rank which merely left early (it reached its own verdict and
  // exited) cannot outrank the stalled rank everybody is actually waiting on.
  auto is_cause = [](RankClass c) {
    return c == RankClass::kDead || c == RankClass::kLeft || c == RankClass::kUnreachable ||
           c == RankClass::kStalled || c == RankClass::kNotEntered;
  };
  // A rank that never started this call because its previous one failed is a victim of
  // that failure, not the cause: the chain does not stop at it, so a dead or cut-off rank,
  // if there is one, is named (the idle rank still is when nothing else explains it).
  auto failed_before = [&](int q) {
    return v.classes[q] == RankClass::kNotEntered && peers[q].reach == Reach::kAnswered &&
           IdleAfterOwnFailure(peers[q].state, S);
  };
  // A rank that has not started the call explains a wait that ran into the progress
  // timeout, not one that ended early: when this rank's call failed well before that (a
  // connection closed, say) and some rank is dead or cut off, that rank is the cause and the
  // idle one is only a moment behind.
  const bool ended_early = me.elapsed < me.timeout / 2;
  auto merely_behind = [&](int q) {
    return v.classes[q] == RankClass::kNotEntered && ended_early &&
           (first_of(RankClass::kDead) >= 0 || first_of(RankClass::kLeft) >= 0 ||
            first_of(RankClass::kUnreachable) >= 0);
  };
  // This rank's own process did not run for long enough that the others' progress deadlines
  // ran out on it: whatever they look like now (gone, having given up), they are its victims.
  if (v.root < 0 && NotRunningLongEnoughToBlameOthers(me)) {
    v.root = me.rank;
    v.root_class = RankClass::kSelf;
  }
  // A rank still inside an earlier call, waiting there on another, has not started this
  // one only because of that wait: the chain goes on through it (seen with 32 ranks and one
  // stopped, where the ranks a call ahead named the rank behind them "not entered").
  auto held_in_earlier_call = [&](int q) {
    return v.classes[q] == RankClass::kNotEntered && peers[q].reach == Reach::kAnswered &&
           peers[q].state.in_op() && waiting_on[q] >= 0;
  };
  if (v.root < 0) {
    int q = me.waiting_on;
    for (int hops = 0; q >= 0 && q < p && hops < p &&
                       (v.classes[q] == RankClass::kWaiting || held_in_earlier_call(q));
         ++hops) {
      q = waiting_on[q];
    }
    // The walk ends on a held rank only by running out of hops, in a cycle of waits: where it
    // stopped there depends on where it began, so the class priority below decides instead,
    // the same for every rank.
    if (q >= 0 && q < p && is_cause(v.classes[q]) && !failed_before(q) && !merely_behind(q) &&
        !held_in_earlier_call(q)) {
      v.root = q;
      v.root_class = v.classes[q];
    }
  }
  for (RankClass c : {RankClass::kDead, RankClass::kLeft, RankClass::kUnreachable,
                      RankClass::kStalled, RankClass::kNotEntered}) {
    if (v.root < 0) {
      v.root = first_of(c);
      if (v.root >= 0) v.root_class = c;
    }
  }
  if (v.root < 0) {
    int q = me.waiting_on;
    for (int hops = 0; q >= 0 && q < p && hops <= p; ++hops) {
      if (v.classes[q] != RankClass::kWaiting) break;
      q = waiting_on[q];
    }
    if (q >= 0 && q < p && q != me.rank && v.classes[q] == RankClass::kSlow) {
      v.root = q;
      v.root_class = RankClass::kSlow;
    } else if (first_of(RankClass::kSlow) >= 0) {
      v.root = first_of(RankClass::kSlow);
      v.root_class = RankClass::kSlow;
    }
  }

  std::ostringstream os;
  os << me.op_name << " failed after " << FormatDuration(me.elapsed) << " on rank " << me.rank
     << ": ";
  if (v.root < 0) {
    os << "no rank could be named as the cause (" << me.status.ToString() << ")";
    v.text = os.str();
    return v;
  }
  const PeerView& pv = peers[v.root];
  const proto::RankState& st = pv.state;
  if (v.root != me.rank) v.root_pid = pv.reach == Reach::kAnswered ? pv.state.pid() : pv.pid;
  const PeerDeparture* root_gone =
      (v.root_class == RankClass::kDead || v.root_class == RankClass::kLeft) && v.root != me.rank
          ? gone[v.root]
          : nullptr;
  if (root_gone != nullptr && root_gone->program_pid > 0) v.root_pid = root_gone->program_pid;
  // Why the root ran out, as it said: this rank's own error, or what it answered.
  const std::string exhausted_error = v.root == me.rank               ? me.status.message()
                                      : !st.exhausted_error().empty() ? st.exhausted_error()
                                                                      : st.last_error();
  v.root_what = v.root_class == RankClass::kExhausted
                    ? "out of " + ExhaustedResource(exhausted_error)
                    : RankClassName(v.root_class);
  if (v.root == me.rank && v.root_class == RankClass::kSelf) {
    os << "rank " << v.root << " (this rank) was not running: its process did not run for "
       << FormatDuration(std::max(me.frozen, me.frozen_in_call))
       << " (stopped by a signal or a debugger, paused with its machine, or starved of CPU), "
       << "against a progress timeout of " << FormatDuration(me.timeout)
       << ", so the other ranks gave up on it; what it saw on resuming is their reaction";
  } else if (v.root == me.rank) {
    os << "rank " << v.root << " (this rank) " << v.root_what << ": ";
  } else {
    os << "rank " << v.root << " " << v.root_what << " (" << Where(pv) << "): ";
  }
  switch (v.root_class) {
    case RankClass::kDead:
      if (root_gone != nullptr) {
        // That pid is its daemon's; the program driving it is the one that went.
        os << "its program (pid " << root_gone->program_pid << ") is gone: " << root_gone->how;
        break;
      }
      os << "its process is gone (" << (pv.error.empty() ? "connection refused" : pv.error) << ")";
      break;
    case RankClass::kLeft:
      // Only a departure it told makes a rank "left".
      if (root_gone != nullptr) {
        os << "its program ";
        // Through a daemon, the pid above is the daemon's.
        if (root_gone->program_pid != pv.pid && root_gone->program_pid != st.pid()) {
          os << "(pid " << root_gone->program_pid << ") ";
        }
        os << root_gone->how << ", so that rank makes no more calls";
      }
      break;
    case RankClass::kUnreachable:
      os << "cannot be reached from host " << me.host
         << " (a network partition, or its host is down): "
         << (pv.error.empty() ? "no connection" : pv.error);
      break;
    case RankClass::kStalled:
      os << "alive but not answering (stopped or frozen): no reply to the control query";
      break;
    case RankClass::kNotEntered:
      os << "never started seq=" << S << ": last completed seq=" << st.last_completed_seq();
      if (st.in_op()) {
        os << ", still in seq=" << st.seq() << " (" << st.op_name() << ") step " << st.steps_done()
           << "/" << st.steps_total();
      } else if (st.waiting_size() > 0) {
        // Blocked in a point-to-point message of the program's own (a receive whose sender
        // is in this collective, say): the program's order of calls, not the network.
        os << ", blocked in " << st.waiting(0).name() << " for "
           << FormatDuration(std::chrono::duration_cast<Duration>(
                  std::chrono::duration<double>(st.waiting(0).seconds())));
        if (IdleAfterOwnFailure(st, S) && !st.last_error().empty()) {
          os << " (after its seq=" << st.failed_seq() << " failed: " << st.last_error() << ")";
        }
      } else {
        os << ", idle";
        // Through a daemon: the daemon answers for a program that cannot.
        if (!st.program_state().empty()) {
          os << ": its program (pid " << st.program_pid() << ") is " << st.program_state()
             << " and makes no call until it is continued";
          if (st.program_state() == "stopped by a signal") {
            os << " (kill -CONT " << st.program_pid() << ")";
          }
        }
        // It stopped because its own previous call failed (a peer of its died, say): that
        // failure is the cause this rank would otherwise not see, so it travels along.
        if (IdleAfterOwnFailure(st, S) && !st.last_error().empty()) {
          os << " after its seq=" << st.failed_seq() << " failed: " << st.last_error();
        }
      }
      break;
    case RankClass::kDiverged:
      os << divergence;
      break;
    case RankClass::kRefused:
      os << "its seq=" << S << " was refused there before it ran, so it sent nothing in it";
      if (st.failed_seq() == S && !st.last_error().empty()) os << ": " << st.last_error();
      break;
    case RankClass::kExhausted:
      os << "its seq=" << S << " failed for want of its own " << ExhaustedResource(exhausted_error)
         << ": " << exhausted_error;
      break;
    case RankClass::kDropped: {
      // "rank 1 dropped a connection (...): the connection from rank 0 ...: <why>".
      const size_t words = dropped_text.find(" dropped ");
      os << (words == std::string::npos ? dropped_text : dropped_text.substr(words + 9))
         << "; every call over that pair fails on it from then on";
      break;
    }
    case RankClass::kSlow:
      os << "still progressing, behind: in seq=" << st.seq() << " step " << st.steps_done() << "/"
         << st.steps_total() << ", received " << FormatBytes(st.bytes_received()) << "/"
         << FormatBytes(st.bytes_expected());
      break;
    default:
      break;
  }
  if (root_gone != nullptr) {
    // Its daemon said where its program's calls ended.
    os << "; last completed seq=" << root_gone->last_completed_seq << ", in seq=" << S;
  } else if (v.root_class == RankClass::kStalled || v.root_class == RankClass::kDead ||
             v.root_class == RankClass::kUnreachable) {
    os << "; last completed seq=" << (S > 0 ? S - 1 : 0) << " or earlier, in seq=" << S;
  }
  // A partition cuts off every rank behind it: name them all, by host.
  if (v.root_class == RankClass::kUnreachable) {
    std::map<std::string, std::vector<int>> cut;
    for (int q = 0; q < p; ++q) {
      if (v.classes[q] == RankClass::kUnreachable) cut[HostOf(peers[q])].push_back(q);
    }
    os << "; unreachable:";
    bool first = true;
    for (const auto& [host, ranks] : cut) {
      os << (first ? " " : ", ") << (ranks.size() > 1 ? "ranks " : "rank ") << RankList(ranks)
         << " (host " << host << ")";
      first = false;
    }
  }
  // Everyone whose chain of waits leads to the root is held up by it.
  std::vector<int> waiters;
  for (int q = 0; q < p; ++q) {
    if (v.classes[q] != RankClass::kWaiting && v.classes[q] != RankClass::kSelf) continue;
    int w = waiting_on[q];
    for (int hops = 0; w >= 0 && w < p && hops < p; ++hops) {
      if (w == v.root) {
        waiters.push_back(q);
        break;
      }
      if (v.classes[w] != RankClass::kWaiting && v.classes[w] != RankClass::kSelf) break;
      w = waiting_on[w];
    }
  }
  if (!waiters.empty()) {
    os << "; rank" << (waiters.size() > 1 ? "s " : " ") << RankList(waiters) << " waiting on it";
  }
  v.text = os.str();
  return v;
}

void RecordBlame(FlightRecorder* recorder, uint64_t seq, const Verdict* v, int self) {
  if (recorder == nullptr || v == nullptr || v->root < 0) return;
  const int64_t pid = v->root == self ? static_cast<int64_t>(::getpid()) : v->root_pid;
  // A rank naming itself for not having run is what the others saw as stalled.
  const std::string what = v->root_class == RankClass::kSelf ? "not running"
                           : v->root_what.empty()            ? RankClassName(v->root_class)
                                                             : v->root_what;
  recorder->Record(kBlameEvent, seq,
                   std::to_string(v->root) + " " + std::to_string(pid) + " " + what);
}

bool ParseBlame(const std::string& detail, Blamed* out) {
  // Two whole numbers, then the class: "2 31927 stalled".
  const size_t first = detail.find(' ');
  const size_t second = first == std::string::npos ? first : detail.find(' ', first + 1);
  if (second == std::string::npos || second + 1 >= detail.size()) return false;
  const auto rank =
      ParseEnvInteger("blamed rank", detail.substr(0, first), 0, std::numeric_limits<int>::max());
  const auto pid = ParseEnvInteger("blamed pid", detail.substr(first + 1, second - first - 1), 0,
                                   std::numeric_limits<int64_t>::max());
  if (!rank.ok() || !pid.ok()) return false;
  out->rank = static_cast<int>(*rank);
  out->pid = *pid;
  out->what = detail.substr(second + 1);
  return true;
}

}  // namespace gyre::job
