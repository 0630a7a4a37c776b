#include "core/exec/monitor.h"

#include <algorithm>
#include <utility>

#include "core/exec/executor.h"

namespace gyre {

Status OpMonitor::Begin(OpRun* run, const OpContext& ctx, int64_t bytes_expected) {
  const uint64_t seq = ctx.seq;
  std::lock_guard<std::mutex> lock(mu_);
  current_ = run;
  began_ = true;
  snap_.in_op = true;
  snap_.seq = seq;
  snap_.last_started_seq = seq;
  snap_.desc = ctx.desc;
  snap_.op_name = ctx.name;
  snap_.steps_done = 0;
  snap_.steps_total = run->total_steps();
  snap_.waiting_on = -1;
  snap_.bytes_received = 0;
  snap_.bytes_expected = bytes_expected;
  last_progress_ = run->start_time();
  if (last_tick_ != TimePoint{}) {
    // The watchdog's times are on the steady clock; the call's own start is, too, unless the
    // transport runs on another clock (a simulated one), and then it is read here.
    call_start_ = clock_ == SteadyClock::Get() ? run->start_time() : SteadyClock::Get()->Now();
  }
  CallRecord& r = recent_[recent_next_++ % kRecentCalls];
  r.seq = seq;
  r.desc = ctx.desc;
  r.op_name = ctx.name;
  auto it = pending_aborts_.find(seq);
  Status pending;
  if (it != pending_aborts_.end()) {
    pending = it->second;
    aborted_seq_ = seq;
    abort_reason_ = pending;
  }
  // Aborts for operations already behind us will never be needed.
  pending_aborts_.erase(pending_aborts_.begin(), pending_aborts_.upper_bound(seq));
  return pending;
}

void OpMonitor::Update(const OpRun& run) {
  // After a failure keep what the rank was waiting for when it failed.
  if (!run.status().ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  snap_.steps_done = run.completed_steps();
  const int oldest = run.OldestPendingStep();
  snap_.waiting_on = oldest >= 0 ? run.PeerOfStep(oldest) : -1;
  int64_t received = 0;
  for (const auto& p : run.counters().peers) received += p.bytes_recv;
  snap_.bytes_received = received;
  last_progress_ = run.last_progress();
}

void OpMonitor::Tick(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_tick_ != TimePoint{} && now - last_tick_ >= kFrozenAtLeast) {
    freezes_[freeze_next_++ % freezes_.size()] = Freeze{now, now - last_tick_};
  }
  last_tick_ = now;
}

Duration OpMonitor::FrozenSince(TimePoint since, TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_tick_ == TimePoint{}) return Duration::zero();
  Duration longest = now - last_tick_ >= kFrozenAtLeast ? now - last_tick_ : Duration::zero();
  for (const Freeze& f : freezes_) {
    if (f.length > Duration::zero() && f.end >= since) longest = std::max(longest, f.length);
  }
  return longest;
}

TimePoint OpMonitor::ProgressDue(TimePoint last_progress, Duration timeout, TimePoint now,
                                 uint64_t seq) const {
  auto due_after = [&](TimePoint last) {
    return timeout >= TimePoint::max() - last ? TimePoint::max() : last + timeout;
  };
  TimePoint due = due_after(last_progress);
  if (now < due || clock_ != SteadyClock::Get()) return due;
  std::lock_guard<std::mutex> lock(mu_);
  if (seq != 0 && moving_seq_ == seq && moving_.when > last_progress) {
    last_progress = moving_.when;
    due = due_after(last_progress);
    if (now < due) return due;
  }
  if (last_tick_ == TimePoint{}) return due;  // no watchdog: no way to tell
  // The stretches overlap [last_progress, now] only in part when the wait began, or its last
  // progress came, inside one.
  auto overlap = [&](TimePoint begin, TimePoint end) {
    begin = std::max(begin, last_progress);
    end = std::min(end, now);
    return end > begin ? end - begin : Duration::zero();
  };
  Duration frozen{};
  for (const Freeze& f : freezes_) {
    if (f.length > Duration::zero()) frozen += overlap(f.end - f.length, f.end);
  }
  // Resumed, and the watchdog has not run since: this thread came first.
  if (now - last_tick_ >= kFrozenAtLeast) frozen += overlap(last_tick_, now);
  return due + frozen;
}

void OpMonitor::NoteMovingElsewhere(uint64_t seq, TimePoint when, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!snap_.in_op || snap_.seq != seq || seq == 0) return;  // over already: too late
  if (moving_seq_ == seq && moving_.when >= when) return;
  moving_seq_ = seq;
  moving_ = MovingElsewhere{when, rank};
}

std::optional<OpMonitor::MovingElsewhere> OpMonitor::MovedElsewhere(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq == 0 || moving_seq_ != seq) return std::nullopt;
  return moving_;
}

TimePoint OpMonitor::last_success_start() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_success_;
}

void OpMonitor::End(uint64_t seq, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = nullptr;
  snap_.in_op = false;
  if (told_refusal_ && told_refusal_->first <= seq) {
    // Completed without the rank that refused it: its result may be wrong.
    if (told_refusal_->first == seq && status.ok() && !late_divergence_) {
      late_divergence_ = std::move(told_refusal_);
    }
    told_refusal_.reset();
  }
  if (status.ok()) {
    snap_.last_completed_seq = seq;
    last_success_ = call_start_;
  } else {
    snap_.last_error = status.ToString();
    snap_.failed_seq = seq;
    NoteFailedLocked(seq);
    if (status.code() == StatusCode::kResourceExhausted && !StoppedByAbortLocked(seq, status)) {
      snap_.exhausted_seq = seq;
      snap_.exhausted_error = snap_.last_error;
    }
  }
}

std::optional<std::pair<uint64_t, Status>> OpMonitor::TakeLateDivergence() {
  std::lock_guard<std::mutex> lock(mu_);
  // Reported from here on as a failure of this rank's, and so passed over when a later
  // verdict looks for where the calls differ: found again, every later mismatch was put on it.
  if (late_divergence_ && !FailedHereLocked(late_divergence_->first)) {
    NoteFailedLocked(late_divergence_->first);
  }
  if (late_divergence_) NoteDivergenceReportedLocked(late_divergence_->first);
  return std::exchange(late_divergence_, std::nullopt);
}

bool OpMonitor::DivergenceReported(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq != 0 && std::find(reported_divergences_.begin(), reported_divergences_.end(), seq) !=
                         reported_divergences_.end();
}

void OpMonitor::DivergedHere(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  diverged_here_seq_ = seq;
  NoteDivergenceReportedLocked(seq);
  // Reported from here on as a failure of this rank's, as a taken late divergence is: a later
  // verdict (a Close's stall probe) passes over it rather than failing that call on it again.
  if (!FailedHereLocked(seq)) NoteFailedLocked(seq);
  if (late_divergence_ && late_divergence_->first == seq) late_divergence_.reset();
}

std::optional<OpDesc> OpMonitor::CallAt(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const CallRecord& r : recent_) {
    if (r.seq == seq && seq != 0) return r.desc;
  }
  return std::nullopt;
}

void OpMonitor::Refused(uint64_t seq, const OpDesc& desc, const std::string& name,
                        const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  snap_.in_op = false;
  snap_.seq = seq;
  snap_.last_started_seq = seq;
  snap_.desc = desc;
  snap_.op_name = name;
  snap_.steps_done = 0;
  snap_.steps_total = 0;
  snap_.waiting_on = -1;
  snap_.bytes_received = 0;
  snap_.bytes_expected = 0;
  snap_.last_error = why.ToString();
  snap_.failed_seq = seq;
  snap_.refused_seq = seq;
  NoteFailedLocked(seq);
  if (told_refusal_ && told_refusal_->first <= seq) told_refusal_.reset();
  // Not among the recent calls the ranks compare for a divergence: a refused call sent
  // nothing, and its arguments are the caller's unchecked ones (an algorithm still "auto", a
  // negative count), which differ from the others' resolved call. Kept, they made the next
  // call of every rank fail as diverged, naming a rank that had made no mistake.
  pending_aborts_.erase(pending_aborts_.begin(), pending_aborts_.upper_bound(seq));
}

void OpMonitor::NoteFailedLocked(uint64_t seq) {
  failed_recent_[failed_next_] = seq;
  failed_next_ = (failed_next_ + 1) % failed_recent_.size();
}

bool OpMonitor::FailedHereLocked(uint64_t seq) const {
  return std::find(failed_recent_.begin(), failed_recent_.end(), seq) != failed_recent_.end();
}

bool OpMonitor::Abort(uint64_t seq, const Status& reason, AbortKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kind == AbortKind::kRefusal) {
    if (seq == 0 || FailedHereLocked(seq)) return false;
    const bool running = snap_.in_op && snap_.seq == seq;
    if (running || seq > snap_.last_started_seq) {
      if (!told_refusal_ || told_refusal_->first > seq) told_refusal_.emplace(seq, reason);
    } else if (!late_divergence_) {
      late_divergence_.emplace(seq, reason);  // completed here: the next call reports it
    }
    return false;
  }
  if (current_ != nullptr && snap_.seq == seq) {
    current_->Interrupt(reason);
    aborted_seq_ = seq;
    abort_reason_ = reason;
    return true;
  }
  if (seq > snap_.last_started_seq) {
    pending_aborts_.emplace(seq, reason);
    return true;
  }
  if (seq != 0 && !snap_.in_op && seq == snap_.failed_seq && seq == snap_.last_started_seq) {
    verdict_seq_ = seq;
    verdict_ = reason;
  } else if (seq != 0 && !FailedHereLocked(seq) && seq != diverged_here_seq_ &&
             kind == AbortKind::kMismatch && !late_divergence_) {
    late_divergence_.emplace(seq, reason);  // completed here: the next call reports it
  }
  return false;
}

std::optional<Status> OpMonitor::VerdictReceived(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq == 0) return std::nullopt;
  if (verdict_seq_ == seq) return verdict_;
  if (aborted_seq_ == seq) return abort_reason_;
  // A verdict about a later call, which this rank has not reached: the others moved past this
  // call and failed in a later one. It explains this failure too (one stuck rank holds some
  // ranks in call S and the rest in S+1), and the handler adds what this rank saw.
  auto later = pending_aborts_.upper_bound(seq);
  if (later != pending_aborts_.end()) return later->second;
  return std::nullopt;
}

bool OpMonitor::StoppedByAbort(uint64_t seq, const Status& failure) const {
  std::lock_guard<std::mutex> lock(mu_);
  return StoppedByAbortLocked(seq, failure);
}

bool OpMonitor::StoppedByAbortLocked(uint64_t seq, const Status& failure) const {
  return aborted_seq_ == seq && failure.code() == abort_reason_.code() &&
         failure.message() == abort_reason_.message();
}

OpMonitor::Progress OpMonitor::CurrentProgress() const {
  std::lock_guard<std::mutex> lock(mu_);
  Progress p;
  p.in_op = snap_.in_op;
  p.seq = snap_.seq;
  p.since_progress = p.in_op ? clock_->Now() - last_progress_ : Duration::zero();
  return p;
}

void OpMonitor::NoteDeparture(PeerDeparture d) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = snap_.departures;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const PeerDeparture& e) { return e.rank == d.rank; }),
             list.end());
  list.push_back(std::move(d));
}

OpSnapshot OpMonitor::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  OpSnapshot s = snap_;
  s.since_progress = s.in_op ? clock_->Now() - last_progress_ : Duration::zero();
  if (began_ && s.op_name.empty()) s.op_name = OpName(s.desc, s.seq);
  const size_t n = std::min(recent_next_, kRecentCalls);
  s.recent.clear();
  for (size_t k = recent_next_ - n; k < recent_next_; ++k) {
    CallRecord r = recent_[k % kRecentCalls];
    if (r.op_name.empty()) r.op_name = OpName(r.desc, r.seq);
    s.recent.push_back(std::move(r));
  }
  s.failed_recent.clear();
  for (uint64_t seq : failed_recent_) {
    if (seq != 0) s.failed_recent.push_back(seq);
  }
  return s;
}

}  // namespace gyre
