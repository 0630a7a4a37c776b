// The executor: runs one rank's schedule over any Transport. It issues every step whose
// dependencies are done, runs reductions on the calling thread while the transport moves
// the next messages, counts bytes and messages per peer, enforces the progress deadline
// and the operation deadline, and finishes each operation exactly once with a Status.
//
// Threading: Run() blocks its caller; transport callbacks only enqueue completions, so all
// schedule state is touched by the calling thread alone. Over a DrivenTransport
// (core/transport/driven.h) the calling thread also moves the bytes while it waits, so a
// message costs no thread switch. OpRun exposes the same machine
// step by step for drivers that own the clock (the network simulator).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/algo/schedule.h"
#include "core/base/clock.h"
#include "core/base/dtype.h"
#include "core/base/large_memory.h"
#include "core/transport/driven.h"
#include "core/transport/transport.h"

namespace gyre {

struct PeerCounters {
  int64_t bytes_sent = 0;
  int64_t msgs_sent = 0;
  int64_t bytes_recv = 0;
  int64_t msgs_recv = 0;
};

struct OpCounters {
  std::vector<PeerCounters> peers;  // indexed by rank
  int64_t bytes_reduced = 0;
  int64_t bytes_copied = 0;

  int64_t bytes_sent() const;
  int64_t msgs_sent() const;
  int64_t bytes_recv() const;
  int64_t msgs_recv() const;
  void Add(const OpCounters& other);
};

struct ExecOptions {
  // How long to wait for the next byte from the peer this rank depends on. A peer that
  // keeps sending never trips it, however large the message; a silent one trips it after
  // this long, whatever the size.
  Duration progress_timeout = Seconds(30);
  // A limit on the whole operation (Infinite by default).
  Deadline total_deadline = Deadline::Infinite();
  // Optional: published progress, and aborts from other threads (core/exec/monitor.h).
  class OpMonitor* monitor = nullptr;
};

// "allreduce seq=41 (ring, 4.0 MiB float32)": how errors, the monitor and the flight
// recorder name an operation.
std::string OpName(const OpDesc& desc, uint64_t seq);

struct OpContext {
  uint64_t seq = 0;
  OpDesc desc;
  // Empty: the name is OpName(desc, seq), built only when something prints it (an error, a
  // snapshot), so a call that succeeds builds no string.
  std::string name;
  std::string Name() const { return name.empty() ? OpName(desc, seq) : name; }
};

struct OpBuffers {
  const void* input = nullptr;
  void* output = nullptr;
};

// One rank's run of one schedule, as an event-driven state machine: Start() issues every
// step whose dependencies are done; transport completions are queued (from any thread) and
// applied by Poll() on the driving thread, which runs reductions and copies and issues what
// became ready. The blocking Executor::Run drives it with the real clock; the network
// simulator drives it from its own event loop with simulated time.
class OpRun {
 public:
  // Everything referenced must outlive the OpRun. `scratch` holds at least
  // schedule.scratch_count elements. With `phantom`, no byte is touched: reductions and
  // copies are skipped and messages carry sizes only (for a transport that models time).
  // `storage` (optional) is working memory kept from an earlier run, so a run allocates
  // nothing once its shape has been seen; one run at a time may use it.
  struct Storage;
  OpRun(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
        const OpContext& context, OpBuffers buffers, unsigned char* scratch, Transport* transport,
        bool phantom = false, Storage* storage = nullptr);
  ~OpRun();
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  // Checks buffers and the reduction kernel; InvalidArgument naming the buffer otherwise.
  Status Prepare();
  void Start();
  // Applies the completions that arrived and issues newly ready steps.
  void Poll();
  // Blocks until a completion is queued or `until` passes; with a driver, moves the
  // transport's bytes on this thread meanwhile.
  void WaitForCompletion(TimePoint until);
  // `driver` (optional, must outlive the run) is a transport whose lease the driving thread
  // holds. Call before Start.
  void SetDriver(DrivenTransport* driver) { driver_ = driver; }
  // Fails the operation with `reason` (the first failure wins) and cancels its messages.
  void Fail(Status reason);
  // Any thread: makes the driving thread fail the operation with `reason` at its next Poll
  // (and wakes it if it waits).
  void Interrupt(Status reason);

  // All steps done, or failed with every issued transport call completed.
  bool finished() const;
  const Status& status() const { return failure_; }
  const OpCounters& counters() const { return counters_; }
  int completed_steps() const { return completed_; }
  int total_steps() const { return static_cast<int>(steps_.size()); }
  int outstanding() const { return outstanding_; }
  // When the last message of this operation completed, or bytes from a peer arrived. A
  // completion is stamped when this is next read (Poll does not read the clock).
  TimePoint last_progress() const;
  TimePoint start_time() const { return start_time_; }
  // Samples the transport's per-peer byte counters; bytes still streaming in are progress.
  void SampleProgress();
  // The receive this rank has waited on longest (-1 if none): the peer it depends on.
  int OldestPendingStep() const;
  int PeerOfStep(int step) const { return steps_[step].peer; }
  // "step #5 of 12 (receive from rank 3 (127.0.0.1:4011), p2.r1.s0, 1.0 KiB)"
  std::string DescribeStep(int step) const;
  int64_t bytes_received_from(int peer) const { return op_bytes_from_[peer]; }

 private:
  struct Queue;
  // Applies the completions queued so far.
  void Drain();
  void Issue();
  // Posts send or receive step `i` to the transport.
  void IssueTransfer(int i);
  // Runs reduce or copy step `i` in slices, serving completions between them (ServeTransfers).
  void RunLocal(int i);
  // Applies the completions queued so far and posts the sends and receives they made ready,
  // leaving ready local steps to Issue: a long reduction does not hold back a receive that
  // could land directly in its buffer instead of the transport's early-message store.
  void ServeTransfers();
  void ApplyCompletion(int i, Status s);
  void Release(int step);
  unsigned char* Address(const algo::Region& r) const;  // null when phantom

  const std::vector<algo::Step>& steps_;
  const algo::CollectiveSpec& spec_;
  const OpContext& ctx_;
  OpBuffers buffers_;
  unsigned char* scratch_;
  Transport* transport_;
  DrivenTransport* driver_ = nullptr;
  bool phantom_;
  size_t esize_;
  ReduceFn reduce_fn_ = nullptr;
  std::unique_ptr<Storage> own_storage_;  // when the caller gave none
  Storage& storage_;
  std::shared_ptr<Queue>& queue_;
  std::vector<int>& remaining_;
  // Step i's dependents are dependents_[dependents_begin_[i] .. dependents_begin_[i + 1]).
  std::vector<int>& dependents_begin_;
  std::vector<int>& dependents_;
  std::vector<int>& ready_;
  std::vector<char>& pending_;
  std::vector<uint64_t>& issued_order_;  // when each pending transfer was issued, in order
  std::vector<int64_t>& op_bytes_from_;
  std::vector<uint64_t>& progress_mark_;
  uint64_t issued_count_ = 0;
  TimePoint start_time_;
  mutable TimePoint last_progress_;
  mutable bool progress_unstamped_ = false;  // a completion since last_progress_ was read
  int completed_ = 0;
  int outstanding_ = 0;
  bool cancelled_ = false;
  Status failure_;
  OpCounters& counters_;
};

class Executor {
 public:
  Executor();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs `schedule` (rank transport->rank()'s part of `spec`) to the end. On failure the
  // operation's pending messages are cancelled before returning, and the error names the
  // operation, sequence number, step, the peer and the bytes received from it so far.
  // `counters` (optional) receives this operation's counts, also on failure.
  Status Run(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
             const OpContext& context, OpBuffers buffers, Transport* transport,
             const ExecOptions& options, OpCounters* counters);

 private:
  // Scratch memory, reused across operations. Not zero-filled, and large areas are mapped
  // (in huge pages where the kernel allows, core/base/large_memory.h), so only the pages a
  // schedule actually writes become resident: a schedule's scratch_count is an upper bound
  // on its layout, not a promise to touch all of it.
  class Scratch {
   public:
    // At least `bytes` bytes; earlier contents are not kept. Null if the system refuses.
    unsigned char* Reserve(size_t bytes);

   private:
    LargeBytes data_;
    size_t size_ = 0;
  };
  Scratch scratch_;
  Scratch scaled_input_;  // a float16 average's input divided by p, where the output cannot hold it
  std::unique_ptr<OpRun::Storage> storage_;
};

}  // namespace gyre
