// OpMonitor: what a rank is doing right now, readable from any thread while an operation
// runs (for the verdict, gyrectl and the flight recorder), and the way another thread stops
// that operation (an abort carrying a verdict from the control path). An abort for an
// operation this rank has not started yet is kept, and fails it the moment it starts.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/transport/transport.h"

namespace gyre {

class OpRun;
struct OpContext;

struct CallRecord {
  uint64_t seq = 0;
  OpDesc desc;
  std::string op_name;
};

// A peer said that its program went away without closing its communicator
// (core/job/control.h): the verdict of a later failure names that program, not its daemon.
struct PeerDeparture {
  int rank = -1;
  int64_t program_pid = 0;
  std::string how;
  uint64_t last_completed_seq = 0;  // the peer's, when its program went
  // The program let go of its communicator itself (destroyed it without Comm::Close) rather
  // than being killed or crashing: the verdict calls it "left", not "dead".
  bool on_purpose = false;
};

struct OpSnapshot {
  bool in_op = false;
  uint64_t seq = 0;
  uint64_t last_started_seq = 0;
  uint64_t last_completed_seq = 0;
  OpDesc desc;
  std::string op_name;
  int steps_done = 0;
  int steps_total = 0;
  int waiting_on = -1;
  int64_t bytes_received = 0;
  int64_t bytes_expected = 0;
  Duration since_progress{};
  std::string last_error;
  uint64_t failed_seq = 0;
  // The last call this rank started failed (its program then leaves because of it).
  bool LastCallFailed() const { return failed_seq != 0 && failed_seq == last_started_seq; }
  // The last call refused for its arguments before it ran (its error is last_error when it
  // is also failed_seq): it took its place in the sequence but sent nothing.
  uint64_t refused_seq = 0;
  // The last call that failed for want of this rank's own resources (ResourceExhausted, not
  // told by another rank: memory it could not allocate, a buffer cap): last_error says what
  // when it is also failed_seq. The other ranks' verdicts name this rank for it.
  uint64_t exhausted_seq = 0;
  std::string exhausted_error;            // why, for exhausted_seq
  std::vector<CallRecord> recent;         // the last kRecentCalls calls, oldest first
  std::vector<PeerDeparture> departures;  // at most one per peer, as told
  // Calls that failed on this rank lately (at most 16, any order): their failure, a
  // divergence say, has been reported here already.
  std::vector<uint64_t> failed_recent;
};

inline constexpr size_t kRecentCalls = 16;

class OpMonitor {
 public:
  explicit OpMonitor(const Clock* clock) : clock_(clock) {}

  // Called by the executor on its own thread.
  // Returns a pending abort for `ctx.seq` (OK if none).
  Status Begin(OpRun* run, const OpContext& ctx, int64_t bytes_expected);
  void Update(const OpRun& run);
  void End(uint64_t seq, const Status& status);
  // Call `seq` was refused for its arguments before it ran (Communicator::Refuse): it is
  // started, failed and over at once, and the verdict of a rank waiting on it can quote why.
  // It is not one of the recent calls (Snapshot().recent, CallAt): those are the calls that
  // went on the wire, which the ranks compare to find a divergence.
  void Refused(uint64_t seq, const OpDesc& desc, const std::string& name, const Status& why);

  // Any thread. Interrupts operation `seq` if it is running, or keeps the abort for when it
  // starts (when it has not started yet): true then. When `seq` is the operation that failed
  // last, it keeps the reason as the verdict another rank found for that failure
  // (VerdictReceived) and returns false: nothing was stopped.
  // `kind` kMismatch: the ranks' calls at `seq` differ; if this rank already completed `seq`
  // the verdict is kept for its next call (TakeLateDivergence).
  // `kind` kRefusal: the rank that sent `reason` refused its call `seq` for its arguments and
  // sent nothing in it. Nothing is stopped: where this rank needs that rank in `seq`, its wait
  // fails and the verdict says why; where it does not (the others of a gather whose root
  // refused), `seq` completes, and then counts as a late divergence (this rank's next call, or
  // the end of `seq` itself, reports it), whether it had completed before the word came or
  // completes after.
  enum class AbortKind { kFailure, kMismatch, kRefusal };
  bool Abort(uint64_t seq, const Status& reason, AbortKind kind = AbortKind::kFailure);
  // The verdict another rank delivered for failed operation `seq`, if any: after it ended
  // here, or in the moment between its own failure and its end; or, failing that, one kept
  // for a later operation this rank has not started.
  std::optional<Status> VerdictReceived(uint64_t seq) const;
  // A mismatch (AbortKind::kMismatch) another rank found in a call this rank had already
  // completed without seeing it (the root of a broadcast whose root differs elsewhere): the
  // first such call and that rank's verdict, once; this rank's next call reports it.
  std::optional<std::pair<uint64_t, Status>> TakeLateDivergence();
  // This rank found itself that the ranks' calls at `seq` differ, and reports it: a divergence
  // told about `seq` (kept, or still to come) is the same finding, not reported again.
  void DivergedHere(uint64_t seq);
  // Whether a divergence at `seq` has been reported on this rank already: found here
  // (DivergedHere), or told by another rank and reported by a call here (TakeLateDivergence).
  // A message of that call that comes later is the same finding, not news.
  bool DivergenceReported(uint64_t seq) const;

  // Any thread. Keeps what a peer's daemon told of its program's departure (one per rank,
  // the last told).
  void NoteDeparture(PeerDeparture d);

  OpSnapshot Snapshot() const;
  // The fingerprint of call `seq`, if it is among the last kRecentCalls calls.
  std::optional<OpDesc> CallAt(uint64_t seq) const;
  // The part of a snapshot a watcher polls often: no strings, no copies.
  struct Progress {
    bool in_op = false;
    uint64_t seq = 0;
    Duration since_progress{};
  };
  Progress CurrentProgress() const;
  // Whether operation `seq` failed with `failure` because of Abort: its error is then another
  // rank's verdict. An operation that failed on its own (its own timeout, say) just before an
  // abort came in keeps its own error, and this is false for it: its rank still has to find
  // out who is to blame.
  bool StoppedByAbort(uint64_t seq, const Status& failure) const;

  // The freeze watchdog. A thread that wakes every few milliseconds (the stall probe,
  // core/job/stall_probe.cc) calls Tick; a tick that comes at least kFrozenAtLeast after the
  // one before means this process did not run in between (stopped by SIGSTOP or a debugger,
  // paused with its VM, or starved of CPU), and the stretch is kept.
  static constexpr Duration kFrozenAtLeast = std::chrono::seconds(1);
  void Tick(TimePoint now);
  // The longest stretch of at least kFrozenAtLeast this process did not run that ended at
  // `since` or later, counting one still going on (`now` long after the last tick: the
  // watchdog has not run since the process resumed); zero when there was none, or no watchdog.
  Duration FrozenSince(TimePoint since, TimePoint now) const;
  // When the last call that succeeded began, on the steady clock (zero before one has, or
  // without a watchdog). A stretch that ended before then did not make the others give up:
  // they took part in that whole call after it. (One that ended inside the call may have:
  // this rank can finish a call on what arrived before it stopped, after the others left.)
  TimePoint last_success_start() const;
  // When a wait that last progressed at `last_progress` runs out of `timeout`, counting only
  // the time this process ran: last_progress + timeout, pushed back by every stretch between
  // then and `now` that the watchdog saw this process not run (one still going on included).
  // A rank stopped and resumed together with its peers (Ctrl-Z of gyrerun, or of a shell
  // running the program) then does not give up on them for the time they were all stopped;
  // the others of a rank stopped alone ran all along, and still give up on it at the timeout.
  // Cheap until last_progress + timeout has passed: no lock is taken before. Times on the
  // steady clock; on another clock (a simulated one) nothing is pushed back.
  // Given `seq` (the operation the wait belongs to), progress another rank made in it that
  // NoteMovingElsewhere reported counts as this wait's own: last_progress is then the later
  // of the two.
  TimePoint ProgressDue(TimePoint last_progress, Duration timeout, TimePoint now,
                        uint64_t seq = 0) const;

  // Any thread (the stall probe). Operation `seq`, if it is the one running here, moved at
  // `when` (steady clock) on rank `rank`, which this rank waits on directly or through ranks
  // that wait on it in turn: the operation is not stuck, it is moving towards this rank over
  // a slow hop, and this rank's progress deadline counts from then (ProgressDue). Only the
  // latest time is kept; another operation's is forgotten when it ends.
  void NoteMovingElsewhere(uint64_t seq, TimePoint when, int rank);
  struct MovingElsewhere {
    TimePoint when{};
    int rank = -1;
  };
  // The latest NoteMovingElsewhere for `seq`, if any: for the error when the deadline passes.
  std::optional<MovingElsewhere> MovedElsewhere(uint64_t seq) const;

 private:
  // StoppedByAbort, with mu_ held.
  bool StoppedByAbortLocked(uint64_t seq, const Status& failure) const;
  const Clock* clock_;
  mutable std::mutex mu_;
  OpRun* current_ = nullptr;
  OpSnapshot snap_;  // op_name and recent are filled in by Snapshot()
  bool began_ = false;
  // The last kRecentCalls calls: a ring, oldest at recent_next_ % kRecentCalls once full.
  // Names are built when a snapshot is taken, not on every call.
  std::array<CallRecord, kRecentCalls> recent_;
  size_t recent_next_ = 0;
  TimePoint last_progress_{};
  TimePoint last_tick_{};     // zero until a watchdog ticks
  TimePoint call_start_{};    // of the call running or last run, when a watchdog ticks
  TimePoint last_success_{};  // the start of the last call that succeeded
  struct Freeze {
    TimePoint end{};
    Duration length{};
  };
  std::array<Freeze, 4> freezes_{};  // the latest ones, a ring
  uint64_t moving_seq_ = 0;          // the operation moving_ is about, 0 for none
  MovingElsewhere moving_;
  size_t freeze_next_ = 0;
  std::map<uint64_t, Status> pending_aborts_;
  std::optional<std::pair<uint64_t, Status>> late_divergence_;
  uint64_t diverged_here_seq_ = 0;  // DivergedHere
  // The latest divergences reported here (DivergenceReported), a ring.
  std::array<uint64_t, 8> reported_divergences_{};
  size_t reported_next_ = 0;
  void NoteDivergenceReportedLocked(uint64_t seq) {
    reported_divergences_[reported_next_++ % reported_divergences_.size()] = seq;
  }
  // A refusal told for a call running here or not started yet (AbortKind::kRefusal): a late
  // divergence if that call completes.
  std::optional<std::pair<uint64_t, Status>> told_refusal_;
  // The latest calls that failed or were refused here, a ring: another rank's verdict on one
  // of them is no news of a call that "completed here" (failed_seq holds only the last, and a
  // verdict on a refused call came after this rank had refused a later one).
  std::array<uint64_t, 16> failed_recent_{};
  size_t failed_next_ = 0;
  void NoteFailedLocked(uint64_t seq);
  bool FailedHereLocked(uint64_t seq) const;
  uint64_t aborted_seq_ = 0;
  uint64_t verdict_seq_ = 0;
  Status verdict_;       // of verdict_seq_
  Status abort_reason_;  // of aborted_seq_
};

}  // namespace gyre
