// libgyre: the public API for programs. A gyre::Comm runs collectives either through this
// rank's daemon (gyred, over a Unix socket with payloads in shared memory) or embedded in
// the program (a Communicator joined to the job directly, for the lowest latency). Both
// behave the same: every call is bounded by deadlines and returns a Status whose message
// carries the full explanation from the rank that saw the failure.
//
// Collectives are matched across ranks by the order each rank makes them in: calls from
// several threads on one Comm run one at a time, in an order the ranks do not agree on, so
// give each thread its own order (one thread per Comm, or the async calls from one thread).
//
//   auto comm = gyre::Comm::FromEnvironment();   // gyrerun sets the environment
//   if (!comm.ok()) { ... }
//   std::vector<float> grad(n);
//   gyre::Status s = (*comm)->Allreduce(grad.data(), grad.data(), n, gyre::DataType::kFloat32,
//                                       gyre::ReduceOp::kSum);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/dtype.h"
#include "core/base/status.h"

namespace gyre {

struct CallOptions;  // core/comm/communicator.h

// The longest progress timeout a call takes (about 31 years); Options::timeout is capped here.
inline constexpr Duration kMaxCallTimeout = std::chrono::seconds(1000000000);

// Per-call options. Algorithm names are those of docs/algorithms.md ("ring", "tree", ...),
// empty for automatic choice.
struct Options {
  std::string algorithm;
  int deterministic = -1;  // -1: job default; 0 off; 1 canonical order; others refused
  // Progress timeout; zero: the job default; negative is refused; at most kMaxCallTimeout
  // (longer ones, Duration::max() included, are taken as that).
  Duration timeout = Duration::zero();
  // Total deadline of the call. One already passed when the call starts is refused at once
  // (DeadlineExceeded), in the call's place in the sequence: the other ranks hear "refused".
  Deadline deadline = Deadline::Infinite();
};

// What the last call did.
struct CallInfo {
  std::string algorithm;  // the algorithm that ran
  uint64_t seq = 0;
  Duration elapsed{};
  int64_t bytes_sent = 0, msgs_sent = 0, bytes_recv = 0, msgs_recv = 0;
  // Bytes this program copied into and out of the daemon's staging area for the call: zero
  // embedded, and through the daemon when the call's buffers came from AllocBuffer.
  int64_t bytes_staged = 0;
};

class Work;

class Comm {
 public:
  // Waits for the call that is running to finish; asynchronous calls still queued are not
  // run, and their Work reports Aborted ("not run: its Comm was destroyed ...").
  virtual ~Comm() = default;

  // Connects to the daemon listening on `socket_path`, retrying until `deadline`. Once the
  // channel to the daemon fails (the daemon exited, or sent no heartbeat for 10 s during a
  // call), every later call of that Comm fails at once with the first failure: the request
  // it gave up on may still run in the daemon, so nothing more is sent. Make a new Comm.
  static StatusOr<std::unique_ptr<Comm>> ConnectDaemon(const std::string& socket_path,
                                                       Deadline deadline);
  // Joins the job in-process. Identity and store come from the environment (as gyred
  // reads them: GYRE_RANK, GYRE_WORLD_SIZE, GYRE_STORE, GYRE_JOB_ID, or torchrun's, Open
  // MPI's, Slurm's variables).
  static StatusOr<std::unique_ptr<Comm>> Embedded();
  // GYRE_SOCKET set: the daemon; GYRE_MODE=embedded: in-process; the launcher sets these.
  static StatusOr<std::unique_ptr<Comm>> FromEnvironment();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string mode() const = 0;  // "daemon" or "embedded"

  // Counts and buffers follow NCCL: allreduce/broadcast/reduce `count` is the buffer;
  // allgather/gather `count` is each rank's part (output holds size()*count);
  // reduce_scatter `count` is each rank's result (input holds size()*count); alltoall
  // `count` is one block; scatter `count` is each rank's part. Unused buffers may be null.
  // Input and output must not overlap, except as one buffer for an allreduce, a broadcast or
  // the root of a reduce (in place); size() * count elements must fit in 2^60 bytes. A call
  // refused for its arguments (InvalidArgument naming the value and the rule) still takes
  // its place in the call sequence, so a rank's next call meets the others' next call; when
  // only this rank refused, the other ranks' same call fails naming this rank and why (a rank
  // that needed nothing from this one in it, such as another rank of a gather whose root
  // refused, reports it there or in its next call).
  // ReduceOp::kAvg (floating types) divides the sum by size(); float16 divides each input
  // first, so a mean stays finite where the sum would pass 65504 (docs/algorithms.md).
  virtual Status Allreduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                           const Options& o = {}) = 0;
  virtual Status Broadcast(const void* in, void* out, int64_t count, DataType dtype, int root,
                           const Options& o = {}) = 0;
  virtual Status Reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                        int root, const Options& o = {}) = 0;
  virtual Status Allgather(const void* in, void* out, int64_t count, DataType dtype,
                           const Options& o = {}) = 0;
  virtual Status ReduceScatter(const void* in, void* out, int64_t count, DataType dtype,
                               ReduceOp op, const Options& o = {}) = 0;
  virtual Status Alltoall(const void* in, void* out, int64_t count, DataType dtype,
                          const Options& o = {}) = 0;
  virtual Status Gather(const void* in, void* out, int64_t count, DataType dtype, int root,
                        const Options& o = {}) = 0;
  virtual Status Scatter(const void* in, void* out, int64_t count, DataType dtype, int root,
                         const Options& o = {}) = 0;
  virtual Status Barrier(const Options& o = {}) = 0;

  // Refuses, in its place in the call sequence, a `collective` call ("allreduce", ...) that
  // this program will not make because its own check of the arguments failed first (a
  // binding's: a buffer too small, an unknown op name). Like a call refused here for its
  // arguments it takes a seq, so this rank's next call meets the others' next call, and the
  // others' same call fails naming this rank and `why`; skipping the call instead would pair
  // every later call of this rank with the others' previous one. Returns `why` (InvalidArgument
  // for an unknown name; refused as any other call once Close has begun).
  virtual Status RefuseCall(const std::string& collective, const Status& why) = 0;

  // Asynchronous allreduce: returns at once; the buffers must stay valid until the Work
  // completes. Calls (blocking and asynchronous) run in the order they were made.
  virtual std::shared_ptr<Work> AllreduceAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, ReduceOp op,
                                               const Options& o = {}) = 0;
  virtual std::shared_ptr<Work> BroadcastAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, int root, const Options& o = {}) = 0;
  virtual std::shared_ptr<Work> AllgatherAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, const Options& o = {}) = 0;
  virtual std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count,
                                                   DataType dtype, ReduceOp op,
                                                   const Options& o = {}) = 0;

  // Point-to-point, as MPI_Send / MPI_Recv: `count` elements to or from `peer` under `tag`
  // (0..65535). Messages of one (sender, receiver, tag) arrive in the order sent; a receive
  // names the same count and dtype as its send, or fails naming both. A send returns once
  // its bytes are on their way (the receiver holds early messages), so two ranks may send
  // to each other before either receives. A receive whose message does not come within
  // the progress timeout fails naming the peer; it had taken its message number, and what
  // comes under it is dropped, so a later receive from that peer under that tag is refused
  // (Aborted, naming the one that gave up) rather than matched with the next message. Sends
  // that give up do the same for their (peer, tag).
  virtual Status Send(const void* buf, int64_t count, DataType dtype, int peer, int tag = 0,
                      const Options& o = {}) = 0;
  virtual Status Recv(void* buf, int64_t count, DataType dtype, int peer, int tag = 0,
                      const Options& o = {}) = 0;
  // Asynchronous forms (MPI_Isend / MPI_Irecv); the buffer stays valid until the Work
  // completes. Embedded, the message is posted at once, beside the ordered collectives, so
  // receives may be posted before the sends they match. Through the daemon it runs in call
  // order with the other calls: post each receive after the sends this rank owes first.
  virtual std::shared_ptr<Work> SendAsync(const void* buf, int64_t count, DataType dtype, int peer,
                                          int tag = 0, const Options& o = {}) = 0;
  virtual std::shared_ptr<Work> RecvAsync(void* buf, int64_t count, DataType dtype, int peer,
                                          int tag = 0, const Options& o = {}) = 0;

  virtual CallInfo last() const = 0;

  // Memory for call buffers, as MPI_Alloc_mem. Through the daemon a block is shared memory
  // that the daemon maps too, so a call whose buffers lie inside blocks from here runs on
  // them in place; an ordinary buffer is copied into a staging area before the call and out
  // of it after (CallInfo::bytes_staged counts those bytes). Embedded, a block is ordinary
  // page-aligned memory. Free each block with FreeBuffer; blocks still allocated when the
  // Comm is destroyed are freed with it, so none may be used after that.
  virtual StatusOr<void*> AllocBuffer(size_t bytes) = 0;
  // Frees a block from AllocBuffer once the asynchronous collectives submitted before this
  // have finished (one may still use it); any other pointer is refused with InvalidArgument.
  // A SendAsync or RecvAsync on the block must be waited for first: it is not in that queue.
  virtual Status FreeBuffer(void* block) = 0;

  // Ends this rank's part in the job, as MPI_Finalize does: waits until every rank has closed,
  // bounded like any call, and reports a call the ranks made differently that this rank
  // finished without seeing (its broadcast's root was another rank's elsewhere: a root returns
  // as soon as it has sent, and its program would otherwise end believing the call
  // succeeded). Every rank hears from every other directly (an alltoall of one byte each), so
  // a message of that call still on its way is read first. Through the daemon it then tells
  // gyred the program is leaving on purpose. Every collective and message after it, and a
  // second Close, is refused (InvalidArgument). Destroying a Comm without Close is allowed;
  // only Close reports a mismatch in the last call. (The default, for other implementations of
  // this interface, is a barrier.)
  virtual Status Close(const Options& o = {}) { return Barrier(o); }

  // Typed conveniences.
  template <typename T>
  Status Allreduce(std::vector<T>& inout, ReduceOp op, const Options& o = {});
};

// A pending asynchronous call.
class Work {
 public:
  virtual ~Work() = default;
  // The call's Status, or DeadlineExceeded if it has not finished by `deadline` (the call
  // goes on; Wait again).
  // bounded: the call it waits for is bounded by gyre's own deadlines.
  virtual Status Wait(Deadline deadline = Deadline::Infinite()) = 0;
  virtual bool Done() const = 0;
};

template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<int8_t> {
  static constexpr DataType kValue = DataType::kInt8;
};
template <>
struct DataTypeOf<uint8_t> {
  static constexpr DataType kValue = DataType::kUint8;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType kValue = DataType::kInt32;
};
template <>
struct DataTypeOf<uint32_t> {
  static constexpr DataType kValue = DataType::kUint32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType kValue = DataType::kInt64;
};
template <>
struct DataTypeOf<uint64_t> {
  static constexpr DataType kValue = DataType::kUint64;
};
template <>
struct DataTypeOf<float> {
  static constexpr DataType kValue = DataType::kFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType kValue = DataType::kFloat64;
};

template <typename T>
Status Comm::Allreduce(std::vector<T>& inout, ReduceOp op, const Options& o) {
  return Allreduce(inout.data(), inout.data(), static_cast<int64_t>(inout.size()),
                   DataTypeOf<T>::kValue, op, o);
}

}  // namespace gyre
