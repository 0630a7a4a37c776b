#include "core/job/inquiry.h"

#include <algorithm>
#include <thread>

namespace gyre::job {

Duration QueryTimeoutFor(Duration t) {
  return std::min<Duration>(Seconds(1), std::max<Duration>(Millis(250), t / 4));
}

LocalFailure LocalFailureOf(const OpSnapshot& snap, int rank, Duration progress_timeout) {
  LocalFailure me;
  me.rank = rank;
  me.seq = snap.seq;
  me.desc = snap.desc;
  me.op_name = snap.op_name;
  me.timeout = progress_timeout;
  me.waiting_on = snap.waiting_on;
  me.bytes_received = snap.bytes_received;
  me.bytes_expected = snap.bytes_expected;
  me.recent = snap.recent;
  me.failed_here = snap.failed_recent;
  me.departures = snap.departures;
  return me;
}

namespace {

// Every rank's control address but `self`'s (left empty: QueryAll skips it).
std::vector<std::string> OtherRanks(const JobDirectory& dir, int self) {
  std::vector<std::string> others = dir.control_addresses;
  if (self >= 0 && self < static_cast<int>(others.size())) others[self].clear();
  return others;
}

}  // namespace

Inquiry Inquire(const JobDirectory& dir, const LocalFailure& me, Duration query_timeout,
                int attempts, bool stall_probe) {
  const int p = static_cast<int>(dir.control_addresses.size());
  const std::vector<std::string> targets = OtherRanks(dir, me.rank);
  proto::ControlRequest query;
  query.mutable_status();
  if (stall_probe) {
    query.mutable_status()->set_probing_seq(me.seq + 1);
    query.mutable_status()->set_from_rank(me.rank);
  }
  Inquiry in;
  LocalFailure mine = me;
  if (mine.host.empty() && me.rank >= 0 && me.rank < static_cast<int>(dir.peers.size())) {
    mine.host = dir.peers[me.rank].host;
  }
  std::vector<PeerView> views(p);
  for (int attempt = 0; attempt < std::max(1, attempts); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(Millis(100));
    in.results = QueryAll(targets, query, query_timeout, dir.credentials);
    in.answered = 1;
    for (int q = 0; q < p; ++q) {
      views[q] = PeerView{};
      views[q].rank = q;
      views[q].reach = in.results[q].reach;
      views[q].error = in.results[q].error;
      if (in.results[q].reach == Reach::kAnswered) {
        views[q].state = in.results[q].response.state();
        ++in.answered;
      }
      if (q < static_cast<int>(dir.peers.size())) {
        views[q].pid = dir.peers[q].pid;
        views[q].host = dir.peers[q].host;
        views[q].data_address = dir.peers[q].address;
      }
    }
    in.verdict = Classify(mine, views);
    if (in.verdict.root_class != RankClass::kDiverged || in.verdict.voters >= in.answered) break;
  }
  return in;
}

void TellTheOthers(const JobDirectory& dir, int self, const Inquiry& inquiry, uint64_t seq,
                   const std::string& text, OpMonitor::AbortKind kind, Duration timeout) {
  const bool mismatch = kind == OpMonitor::AbortKind::kMismatch;
  const int p = static_cast<int>(dir.control_addresses.size());
  proto::ControlRequest abort;
  abort.mutable_abort()->set_seq(seq);
  abort.mutable_abort()->set_from_rank(self);
  abort.mutable_abort()->set_verdict(text);
  abort.mutable_abort()->set_code(
      static_cast<int>(mismatch ? StatusCode::kInvalidArgument : StatusCode::kAborted));
  abort.mutable_abort()->set_mismatch(mismatch);
  std::vector<std::string> tell(p);
  for (int q = 0; q < p && q < static_cast<int>(inquiry.results.size()); ++q) {
    if (q != self && inquiry.results[q].reach == Reach::kAnswered) {
      tell[q] = dir.control_addresses[q];
    }
  }
  QueryAll(tell, abort, timeout, dir.credentials);
}

namespace {

// Delivers a mismatch verdict about `seq` to every other rank; returns how many answered.
int TellMismatch(const JobDirectory& dir, int self, uint64_t seq, const std::string& text,
                 bool refusal, Duration timeout) {
  proto::ControlRequest req;
  req.mutable_abort()->set_seq(seq);
  req.mutable_abort()->set_from_rank(self);
  req.mutable_abort()->set_verdict(text);
  req.mutable_abort()->set_code(static_cast<int>(StatusCode::kInvalidArgument));
  req.mutable_abort()->set_mismatch(true);
  req.mutable_abort()->set_refusal(refusal);
  int told = 0;
  for (const QueryResult& r : QueryAll(OtherRanks(dir, self), req, timeout, dir.credentials)) {
    if (r.reach == Reach::kAnswered) ++told;
  }
  return told;
}

}  // namespace

int TellRefusal(const JobDirectory& dir, int self, uint64_t seq, const std::string& text,
                Duration timeout) {
  return TellMismatch(dir, self, seq, text, /*refusal=*/true, timeout);
}

int TellDivergence(const JobDirectory& dir, int self, uint64_t seq, const std::string& text,
                   Duration timeout) {
  return TellMismatch(dir, self, seq, text, /*refusal=*/false, timeout);
}

int TellDeparture(const JobDirectory& dir, int self, const PeerDeparture& gone, Duration timeout) {
  proto::ControlRequest req;
  proto::Departure* d = req.mutable_departure();
  d->set_from_rank(self);
  d->set_program_pid(gone.program_pid);
  d->set_how(gone.how);
  d->set_last_completed_seq(gone.last_completed_seq);
  d->set_on_purpose(gone.on_purpose);
  int told = 0;
  for (const QueryResult& r : QueryAll(OtherRanks(dir, self), req, timeout, dir.credentials)) {
    if (r.reach == Reach::kAnswered) ++told;
  }
  return told;
}

}  // namespace gyre::job
