#include "core/exec/monitor.h"

#include "core/exec/executor.h"

namespace gyre {

Status OpMonitor::Begin(OpRun* run, uint64_t seq, const OpDesc& desc, const std::string& name,
                        int64_t bytes_expected) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = run;
  snap_.in_op = true;
  snap_.seq = seq;
  snap_.last_started_seq = seq;
  snap_.desc = desc;
  snap_.op_name = name;
  snap_.steps_done = 0;
  snap_.steps_total = run->total_steps();
  snap_.waiting_on = -1;
  snap_.bytes_received = 0;
  snap_.bytes_expected = bytes_expected;
  last_progress_ = clock_->Now();
  snap_.recent.push_back(CallRecord{seq, desc, name});
  if (snap_.recent.size() > kRecentCalls) snap_.recent.erase(snap_.recent.begin());
  auto it = pending_aborts_.find(seq);
  Status pending;
  if (it != pending_aborts_.end()) {
    pending = it->second;
    aborted_seq_ = seq;
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

void OpMonitor::End(uint64_t seq, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = nullptr;
  snap_.in_op = false;
  if (status.ok()) {
    snap_.last_completed_seq = seq;
  } else {
    snap_.last_error = status.ToString();
    snap_.failed_seq = seq;
  }
}

bool OpMonitor::Abort(uint64_t seq, const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_ != nullptr && snap_.seq == seq) {
    current_->Interrupt(reason);
    aborted_seq_ = seq;
    return true;
  }
  if (seq > snap_.last_started_seq) {
    pending_aborts_.emplace(seq, reason);
    return true;
  }
  return false;
}

bool OpMonitor::WasAborted(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_seq_ == seq;
}

OpSnapshot OpMonitor::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  OpSnapshot s = snap_;
  s.since_progress = s.in_op ? clock_->Now() - last_progress_ : Duration::zero();
  return s;
}

}  // namespace gyre
