#include "core/job/stall_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/base/thread.h"
#include "core/job/inquiry.h"
#include "glog/logging.h"

namespace gyre::job {
namespace {

// At most this many rounds of questions per operation (at 1, 2, 4, ... times the first
// delay), so a rank that is merely late costs the others a handful of control queries.
constexpr int kMaxProbes = 5;
constexpr std::chrono::milliseconds kPollInterval{20};

}  // namespace

Duration StallProbe::FirstProbeAfter(Duration t) {
  return std::clamp<Duration>(t / 20, Millis(50), Millis(500));
}

Duration StallProbe::ChainEvery(Duration t) { return std::max<Duration>(t / 4, Millis(50)); }

Duration StallProbe::Stretched(Duration d, int rank, int size) {
  if (size <= 0 || rank <= 0) return d;
  return d + d * std::min(rank, size - 1) / size;
}

StallProbe::StallProbe(Communicator* comm, std::shared_ptr<const JobDirectory> dir,
                       Duration progress_timeout, const ControlServer* control)
    : comm_(comm), dir_(std::move(dir)), timeout_(progress_timeout), control_(control) {}

StallProbe::~StallProbe() { Stop(); }

Status StallProbe::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return Status::Ok();
  stop_ = false;
  // The first tick now, not one poll interval later: a process stopped in its first calls
  // (a job's first 20 ms) would otherwise have no tick before the stop to measure it from,
  // and on resuming would not know it had not run.
  comm_->monitor()->Tick(SteadyClock::Get()->Now());
  return StartThread(&thread_, "rank " + std::to_string(comm_->rank()),
                     "the stall probe and freeze watchdog", [this] { Loop(); });
}

void StallProbe::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallProbe::Loop() {
  const Duration first = FirstProbeAfter(timeout_);
  const Duration chain_every = ChainEvery(timeout_);
  TimePoint chain_followed{};  // when the last walk of the chain of waits began
  uint64_t seq = 0;
  uint64_t heard_count = 0;
  int probes = 0;
  Duration next = first;
  TimePoint seen{};
  const Clock* clock = SteadyClock::Get();
  std::unique_lock<std::mutex> lock(mu_);
  const bool probing = comm_->size() <= kMaxProbedWorld;
  while (!stop_) {
    cv_.wait_for(lock, kPollInterval, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    comm_->monitor()->Tick(clock->Now());
    const OpMonitor::Progress now = comm_->monitor()->CurrentProgress();
    if (now.in_op && now.seq != seq) {
      seq = now.seq;
      probes = 0;
      next = first;
      seen = clock->Now();
    }
    if (control_ != nullptr) {
      const ControlServer::HeardProbes heard = control_->heard_probes();
      if (heard.count != heard_count) {
        heard_count = heard.count;
        // Another rank quiet in this operation asked everyone, this rank included: its round
        // stands for this rank's next one, and would have told this rank a mismatch it found.
        if (now.in_op && heard.seq_plus_one == seq + 1 && probes < kMaxProbes) {
          ++probes;
          next = std::max(next, now.since_progress) * 2;
        }
      }
    }
    // in_round_ before acted_on_: a round stores acted_on_ before it clears in_round_, so a
    // round that just stopped this operation is seen here and not followed by another.
    const bool round_running = in_round_.load();
    if (acted_on_.load() == seq + 1) probes = kMaxProbes;
    if (probing && now.in_op && probes < kMaxProbes &&
        now.since_progress >= Stretched(next, comm_->rank(), comm_->size()) && !round_running) {
      const OpSnapshot snap = comm_->monitor()->Snapshot();
      if (snap.in_op && snap.seq == seq) {
        ++probes;
        next *= 2;
        if (round_.joinable()) round_.join();  // finished: in_round_ is false
        in_round_ = true;
        const Status started = StartThread(&round_, "rank " + std::to_string(comm_->rank()),
                                           "a stall probe's round of questions",
                                           [this, snap, elapsed = clock->Now() - seen] {
                                             if (Probe(snap, elapsed)) acted_on_ = snap.seq + 1;
                                             in_round_ = false;
                                           });
        if (!started.ok()) {
          // A round only catches a mismatch early: without it the progress deadline still
          // ends the operation, so the rank goes on and says why the early answer is missing.
          in_round_ = false;
          LOG_EVERY_N(WARNING, 100)
              << started.message() << "; seq=" << seq << " is left to the progress deadline";
        }
      }
    }
    // Quiet for a quarter of T, and again every quarter while it stays so: the chain of waits
    // may show the operation moving elsewhere. A round above that is due goes first; a walk
    // shares its thread, and asks one rank at a time, so it holds the next round back by a
    // few milliseconds, or by one query timeout when a rank on the chain is silent (the walk
    // ends there).
    if (now.in_op && now.since_progress >= chain_every && !in_round_.load() &&
        clock->Now() - chain_followed >= chain_every && acted_on_.load() != seq + 1) {
      const OpSnapshot snap = comm_->monitor()->Snapshot();
      if (snap.in_op && snap.seq == seq && snap.waiting_on >= 0) {
        chain_followed = clock->Now();
        if (round_.joinable()) round_.join();
        in_round_ = true;
        round_ = std::thread([this, snap] {
          FollowChain(snap);
          in_round_ = false;
        });
      }
    }
    lock.lock();
  }
  lock.unlock();
  if (round_.joinable()) round_.join();
}

void StallProbe::FollowChain(const OpSnapshot& snap) {
  const int p = comm_->size();
  const int self = comm_->rank();
  const Duration query_timeout = QueryTimeoutFor(timeout_);
  proto::ControlRequest query;
  query.mutable_status();  // a plain status query: not a round of this rank's (heard_probes)
  std::vector<bool> asked(p, false);
  if (self >= 0 && self < p) asked[self] = true;
  int next = snap.waiting_on;
  for (int hop = 0; hop < kMaxChainHops; ++hop) {
    if (next < 0 || next >= p || asked[next]) return;
    asked[next] = true;
    if (next >= static_cast<int>(dir_->control_addresses.size()) ||
        dir_->control_addresses[next].empty()) {
      return;
    }
    const TimePoint sent = SteadyClock::Get()->Now();
    const QueryResult r =
        QueryControl(dir_->control_addresses[next], next, query, query_timeout, dir_->credentials);
    // Silent, gone or cut off: no word that anything moves, so no time lent.
    if (r.reach != Reach::kAnswered || !r.response.has_state()) return;
    const proto::RankState& st = r.response.state();
    // Not in an operation (it never called this one, or is between calls), or past this one
    // (what it had for this rank is sent): its clock says nothing about this wait.
    if (!st.in_op() || st.seq() > snap.seq) return;
    const double since_s = st.seconds_since_progress();
    if (!(since_s >= 0) || since_s > 1e9) return;
    const auto since = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(since_s));
    // Measured from when the question left, not when the answer came: a slow answer does not
    // make the progress look later than it was.
    comm_->monitor()->NoteMovingElsewhere(snap.seq, sent - since, next);
    // A rank that moved within the last quarter of T is as good as any further along.
    if (since < ChainEvery(timeout_)) return;
    next = st.waiting_on();
  }
}

bool StallProbe::Probe(const OpSnapshot& snap, Duration elapsed) {
  const int p = comm_->size();
  const int self = comm_->rank();
  LocalFailure me = LocalFailureOf(snap, self, timeout_);
  me.elapsed = elapsed;
  me.status = DeadlineExceededError("no progress for " + FormatDuration(snap.since_progress) +
                                    " (a stall probe, not a failure)");
  const Duration query_timeout = QueryTimeoutFor(timeout_);
  Inquiry in = Inquire(*dir_, me, query_timeout, /*attempts=*/1, /*stall_probe=*/true);
  const Verdict& v = in.verdict;
  // Only a divergence every rank has answered for, or a rank that refused this call for its
  // arguments (its own answer says so, and it will never send), is acted on here: anything
  // else (a late, stopped or dead rank) is the progress deadline's to judge, with the whole
  // picture.
  const bool diverged = v.root_class == RankClass::kDiverged && in.answered == p && v.voters == p;
  if (!diverged && v.root_class != RankClass::kRefused) return false;
  comm_->recorder()->Record("verdict", snap.seq, v.text);
  // Before the abort: the call it stops writes the flight record at once, and gyrerun reads
  // the blamed rank from it (recorded after, it was missing from about one record in four,
  // and the summary marked the first rank to exit as the cause).
  RecordBlame(comm_->recorder(), snap.seq, &v, self);
  const std::string mine = v.text + " [rank " + std::to_string(self) +
                           " saw: " + (diverged ? "a mismatched call" : "a refused call") +
                           " while quiet for " + FormatDuration(snap.since_progress) + "]";
  // The others are told first, while this rank's call is still held: stopped first, this
  // rank went on to its next call, the others completed it with this one before the word
  // came, and heard of the divergence a call or more late (or, one such arriving while an
  // earlier one still waited to be reported, never).
  TellTheOthers(*dir_, self, in, snap.seq, v.text, OpMonitor::AbortKind::kMismatch, query_timeout);
  return comm_->monitor()->Abort(snap.seq, InvalidArgumentError(mine),
                                 OpMonitor::AbortKind::kMismatch);
}

}  // namespace gyre::job
