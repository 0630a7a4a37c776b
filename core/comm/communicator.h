// Communicator: one rank's view of a job — its transport, sequence numbers, algorithm
// choice, schedule cache and counters. This is gyre's embedded, in-process API: a program
// that owns a Transport calls collectives here directly; the daemon calls the same object
// on behalf of its clients.
//
// Thread-safety: calls are serialised (one operation at a time per communicator); every
// rank must call the same collectives in the same order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "core/algo/collective.h"
#include "core/algo/model_select.h"
#include "core/algo/schedule.h"
#include "core/algo/select.h"
#include "core/base/clock.h"
#include "core/base/dtype.h"
#include "core/comm/flight_recorder.h"
#include "core/comm/metrics.h"
#include "core/comm/tuner.h"
#include "core/exec/executor.h"
#include "core/exec/monitor.h"
#include "core/transport/transport.h"

namespace gyre {

inline constexpr int64_t kMaxSegmentsPerCall = 1024;

struct CommOptions {
  // Progress timeout T: how long to wait for the next byte from a peer (RELIABILITY.md).
  Duration timeout = Seconds(30);
  // Canonical reduction order for every reducing call unless the call says otherwise.
  bool deterministic = false;
  // Pipelining segment for the algorithms that cut chunks; 0 = one message per chunk. A call
  // is cut into at most kMaxSegmentsPerCall segments: smaller ones are widened to
  // count / kMaxSegmentsPerCall elements (a 1-byte segment made a 16 KiB call build a
  // schedule of millions of steps and hang for minutes).
  int64_t segment_bytes = 0;
  // Verify each schedule (all ranks, symbolically) the first time it is built, in worlds of
  // up to verify_max_ranks ranks. Each rank builds and checks the whole world's schedule,
  // whose symbolic chunks grow with p: a ring allreduce takes 0.1 s and 17 MB at 64 ranks,
  // 3.7 s and 466 MB at 256, 27 s and 3.2 GB at 512, per rank and per new call shape.
  // Larger worlds build only their own rank's steps, from builders that the tests and the
  // simulator verify.
  bool verify_schedules = true;
  int verify_max_ranks = 64;
  // Automatic choice: when thresholds are set they decide every call (select.h); else the
  // cost model (model_select.h) calibrated by this file, or by $GYRE_CALIBRATION when this
  // is empty, or built in when both are. A file that cannot be read or parsed fails every
  // automatic call with its error. Every rank must choose alike: job::JoinJob refuses a job
  // whose ranks' choice_basis() differ.
  std::optional<algo::SelectionThresholds> thresholds;
  std::string calibration_file;
  // Ranks per host when the job spans hosts in equal host-major blocks (0: one host, or an
  // irregular layout). Automatic choice then uses hierarchical allreduce for large messages.
  int local_size = 0;
  // Append one JSON line per operation to this file (empty: off).
  std::string trace_jsonl;
  // Online tuning of the model's choice (tuner.h): the first calls of each size bucket try
  // the model's closest candidates in turn and the ranks keep the fastest. Every rank must
  // agree on this switch. It applies to calls of 1 MiB and more (OnlineTuner::kMinBytes), not
  // with `thresholds`, across hosts, or to a call that forces an algorithm or asks for the
  // canonical order.
  bool tune = false;
};

struct CallOptions {
  algo::Algorithm algorithm = algo::Algorithm::kAuto;
  int deterministic = -1;                    // -1: the communicator's default; 0 / 1 override
  Duration timeout = Duration::zero();       // zero: the communicator's progress timeout
  Deadline deadline = Deadline::Infinite();  // total deadline of this one call
  int64_t segment_bytes = -1;                // -1: the communicator's default
};

// One posted send or receive (Communicator::PostSend / PostRecv).
struct PendingMessage {
  bool send = false;
  int peer = -1;
  int tag = 0;
  uint64_t seq = 0;
  int64_t bytes = 0;
  std::string name;  // "recv from rank 1 (tag 0, 12 x int32) on rank 0 #3"
  TimePoint posted;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // under mu
  Status status;      // under mu, once done
  // Progress seen by the waits so far (under mu).
  uint64_t bytes_mark = 0;
  TimePoint last_progress;
  bool accounted = false;  // counted in the communicator's totals
  // When the first WaitMessage on it began (under mu): a caller waiting in slices (a binding
  // that checks for signals between them) has waited since then, not since its last slice.
  std::optional<TimePoint> wait_began;
};

// A point-to-point message a thread is blocked on in WaitMessage, for the control path: a
// rank waiting in a receive is not idle.
struct MessageWait {
  std::string name;  // PendingMessage::name
  int peer = -1;
  bool send = false;
  Duration waited{};  // since the first wait on it began
};

struct OpResult {
  uint64_t seq = 0;
  algo::CollectiveSpec spec;  // with the algorithm actually run
  OpCounters counters;
  Duration elapsed{};
  Status status;
};

// What decides a communicator's automatic algorithm choice, for the ranks of a job to compare
// when they join (job::JoinJob): ranks whose choices differ would run different algorithms for
// one call, and fail it as if the program had made different calls.
struct ChoiceBasis {
  // Digests (never 0) of everything Resolve's automatic choice reads, for a job whose ranks
  // share one host (the cost model at this world size and its cores, online tuning, fixed
  // thresholds) and for one spread over hosts in blocks (where the model is not used).
  uint64_t one_host = 0;
  uint64_t across_hosts = 0;
  // Where the choice comes from, for messages: "calibration file /x/cal.txt", "the built-in
  // one, no calibration file", with ", online tuning" when that is on.
  std::string source;
};

class Communicator {
 public:
  Communicator(std::unique_ptr<Transport> transport, CommOptions options = {});
  ~Communicator();

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  Transport* transport() { return transport_.get(); }

  // Counts follow collective.h: allreduce/broadcast/reduce `count` is the buffer; allgather
  // and gather `count` is each rank's part (output p*count); reduce_scatter `count` is each
  // rank's result (input p*count); alltoall `count` is one block; scatter `count` is each
  // rank's part. Buffers may be null where unused (reduce/gather output off the root,
  // broadcast/scatter input off the root). `in` may equal `out` for allreduce and for
  // broadcast at the root.
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                   const CallOptions& opts = {});
  Status Broadcast(const void* in, void* out, int64_t count, DataType dtype, int root,
                   const CallOptions& opts = {});
  Status Reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, int root,
                const CallOptions& opts = {});
  Status Allgather(const void* in, void* out, int64_t count, DataType dtype,
                   const CallOptions& opts = {});
  Status ReduceScatter(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                       const CallOptions& opts = {});
  Status Alltoall(const void* in, void* out, int64_t count, DataType dtype,
                  const CallOptions& opts = {});
  Status Gather(const void* in, void* out, int64_t count, DataType dtype, int root,
                const CallOptions& opts = {});
  Status Scatter(const void* in, void* out, int64_t count, DataType dtype, int root,
                 const CallOptions& opts = {});
  Status Barrier(const CallOptions& opts = {});

  // Point-to-point: `count` elements of `dtype` to or from `peer` under `tag` (0..65535).
  // Only the two ranks take part; the collectives' sequence is untouched, and a message
  // may be posted while a collective runs on another thread. Messages of one (sender,
  // receiver, tag) match in the order they were posted, as in MPI; a receive must name the
  // same count and dtype as its send, else it fails naming both. A send completes once its
  // bytes are handed to the transport (the receiver holds early messages, up to the
  // transport's cap), so two ranks may send to each other before either receives.
  // Post* returns at once; the buffer must stay valid until WaitMessage returns. Send and
  // Recv are Post* then WaitMessage.
  StatusOr<std::shared_ptr<PendingMessage>> PostSend(const void* buf, int64_t count, DataType dtype,
                                                     int peer, int tag);
  StatusOr<std::shared_ptr<PendingMessage>> PostRecv(void* buf, int64_t count, DataType dtype,
                                                     int peer, int tag);
  // Blocks until the message completes, or fails it (and withdraws it from the transport)
  // when no byte came from the peer for the progress timeout or opts.deadline passed: the
  // error names the peer and the tag. Waiting again returns the same Status. If `return_by`
  // passes first, returns DeadlineExceeded and the message stays posted (wait again).
  // bounded: without `return_by` the progress timeout still ends the wait.
  Status WaitMessage(PendingMessage& message, const CallOptions& opts = {},
                     Deadline return_by = Deadline::Infinite());
  // The messages threads are blocked on in WaitMessage now, the longest waited first; at
  // most `max`, and *total (if given) says how many there are.
  std::vector<MessageWait> WaitingMessages(size_t max = 4, size_t* total = nullptr) const;
  Status Send(const void* buf, int64_t count, DataType dtype, int peer, int tag,
              const CallOptions& opts = {});
  Status Recv(void* buf, int64_t count, DataType dtype, int peer, int tag,
              const CallOptions& opts = {});

  // Any collective from its spec (world_size is filled in; algorithm kAuto selects).
  Status Run(algo::CollectiveSpec spec, const void* in, void* out, const CallOptions& opts = {});
  // A call refused for its arguments before Run could see it (a caller's own check, such as
  // a daemon client's): it takes its place in the sequence as a refusal inside Run does, so
  // this rank's next call still meets the others' next call, and the monitor keeps why, for
  // the verdict of a rank left waiting on it. Returns `why` naming the call and this rank.
  Status Refuse(algo::CollectiveSpec spec, const Status& why);

  // The concrete spec a call would run with (algorithm chosen, deterministic applied). With
  // tuning on, a call may run another of the model's candidates than this (last() says).
  StatusOr<algo::CollectiveSpec> Resolve(algo::CollectiveSpec spec, const CallOptions& opts) const;

  // What to do when an operation fails: the job layer installs one that asks the other
  // ranks for their state and returns the verdict (core/job/verdict.h). It gets the
  // failed operation's result and returns the Status the caller sees.
  using FailureHandler = std::function<Status(const OpResult& failed)>;
  void SetFailureHandler(FailureHandler handler) { failure_handler_ = std::move(handler); }
  // Told of every call refused for its arguments (Refuse, or a Run whose arguments fail its
  // checks), before the refusal returns to the caller: the job layer installs one that tells
  // the other ranks (job::TellRefusal). Those that needed nothing from this rank in that call
  // (the others of a gather whose root refused) complete it, and would otherwise go on as if
  // it had run.
  using RefusalHandler = std::function<void(uint64_t seq, const Status& why)>;
  void SetRefusalHandler(RefusalHandler handler) { refusal_handler_ = std::move(handler); }
  // Told when this rank finds that the ranks' calls at `seq` differ (a peer's message of
  // another call came for one of its calls), with a verdict naming both calls: the job layer
  // installs one that tells the other ranks (job::TellDivergence), since the ranks that made
  // the other call may still wait in it, and would otherwise fail later, on this rank's going.
  using DivergenceHandler = std::function<void(uint64_t seq, const std::string& verdict)>;
  void SetDivergenceHandler(DivergenceHandler handler) { divergence_handler_ = std::move(handler); }
  // The job's shape, learnt at rendezvous (CommOptions::local_size). Call before any
  // collective.
  void SetLocalSize(int ranks_per_host) { options_.local_size = ranks_per_host; }

  OpMonitor* monitor() { return &monitor_; }
  FlightRecorder* recorder() { return &recorder_; }
  const Metrics& metrics() const { return metrics_; }

  // Whether online tuning is on (CommOptions::tune).
  bool tuning() const { return options_.tune; }
  // What decides the automatic choice here (fixed at construction).
  const ChoiceBasis& choice_basis() const { return choice_basis_; }
  // OK, or why the calibration file (CommOptions::calibration_file, GYRE_CALIBRATION) cannot
  // be used: every automatic choice would fail with it.
  const Status& calibration_status() const { return selector_status_; }
  Duration progress_timeout() const { return options_.timeout; }
  const OpResult& last() const { return last_; }
  const OpCounters& total_counters() const { return total_; }
  uint64_t next_seq() const { return next_seq_; }
  // Schedules built and verified so far (CommOptions::verify_schedules).
  int64_t schedules_verified() const { return schedules_verified_; }

 private:
  StatusOr<std::shared_ptr<const algo::RankSchedule>> GetSchedule(const algo::CollectiveSpec& spec);
  // A divergence another rank found in a call this rank had completed
  // (OpMonitor::TakeLateDivergence), described, once; nullopt when there is none.
  std::optional<std::string> LateDivergence();
  // That, or else a message held for a call before `before` that this rank made differently
  // from its sender (Transport::TakeStale), described; nullopt when there is none. Under mu_.
  std::optional<std::string> EarlierDivergence(uint64_t before);
  // Records call `seq` as refused with `why` (already naming it); returns `why`. Under mu_.
  Status RefuseLocked(uint64_t seq, const algo::CollectiveSpec& spec, const Status& why);
  // Appends one record to trace_; a write that fails is logged and counted, never fatal.
  void WriteTraceLine(const std::string& line);
  // Whether online tuning applies to a call asked as `asked` and resolved as `resolved`.
  bool Tunes(const algo::CollectiveSpec& asked, const CallOptions& opts,
             const algo::CollectiveSpec& resolved) const;
  // The tuner's algorithm for `spec` (the model's choice), after the ranks' agreement when its
  // trials are over; *trial names the candidate a trial call times (-1: none).
  StatusOr<algo::CollectiveSpec> Tune(algo::CollectiveSpec spec, const CallOptions& opts,
                                      int* trial);
  // Runs a resolved spec's schedule under sequence number `seq`, counting into *counters.
  Status Execute(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
                 const void* in, void* out, const CallOptions& opts, uint64_t seq,
                 OpCounters* counters);
  StatusOr<std::shared_ptr<PendingMessage>> Post(bool send, void* buf, int64_t count,
                                                 DataType dtype, int peer, int tag);

  std::unique_ptr<Transport> transport_;
  CommOptions options_;
  OpMonitor monitor_;
  FlightRecorder recorder_;
  Metrics metrics_;
  FailureHandler failure_handler_;
  RefusalHandler refusal_handler_;
  DivergenceHandler divergence_handler_;
  std::FILE* trace_ = nullptr;
  int64_t trace_records_ = 0;  // lines written to trace_, and those lost
  int64_t trace_lost_ = 0;
  std::mutex mu_;
  uint64_t next_seq_ = 1;
  Executor executor_;
  OpResult last_;
  OpCounters total_;
  // Everything a schedule depends on.
  using CacheKey = std::tuple<int, int, int64_t, int, int, int, int64_t, bool, int, int>;
  std::map<CacheKey, std::shared_ptr<const algo::RankSchedule>> cache_;
  int64_t schedules_verified_ = 0;
  // The automatic choice (thread-safe; Resolve is const), or why the model cannot be loaded.
  std::shared_ptr<algo::ModelSelector> selector_;
  Status selector_status_;
  ChoiceBasis choice_basis_;
  OnlineTuner tuner_;  // under mu_
  // Messages posted to / from (peer, tag) so far: the n of the next one.
  std::mutex p2p_mu_;
  std::map<std::pair<int, int>, uint64_t> p2p_sent_, p2p_received_;
  // (peer, tag) whose sends or receives can no longer be matched in order: a message of
  // theirs was withdrawn when its wait gave up, after its number was taken (what the other
  // side sends under that number is dropped), and why. Later posts there are refused.
  std::map<std::pair<int, int>, std::string> p2p_sends_broken_, p2p_recvs_broken_;
  // The messages in WaitMessage now, once per waiting thread (the caller holds each alive),
  // each with when that wait began.
  mutable std::mutex waits_mu_;
  std::vector<std::pair<const PendingMessage*, TimePoint>> waiting_;
};

// Point-to-point messages travel under sequence numbers of their own, outside the
// collectives' sequence: bit 63 set, then sender, receiver and tag, then the message's
// index n among those of that (sender, receiver, tag). The fingerprint's collective field
// holds kPointToPointDesc.
inline constexpr uint8_t kPointToPointDesc = 0xF0;
inline constexpr int kMaxPointToPointRanks = 4096;
inline constexpr int kMaxPointToPointTag = 65535;
uint64_t PointToPointSeq(int sender, int receiver, int tag, uint64_t n);

// "allreduce(count=12, float32, sum, algo=ring)": installed as the transport's OpDesc
// formatter so mismatch errors read well.
std::string FormatOpDesc(const OpDesc& d);
OpDesc MakeOpDesc(const algo::CollectiveSpec& spec);

}  // namespace gyre
