// Shared plumbing of the two Comm implementations: each collective becomes a
// CollectiveSpec and one Call(); asynchronous calls go through a CallQueue.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>

#include "client/call_queue.h"
#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/comm/communicator.h"
#include "core/job/bootstrap.h"

namespace gyre::client {

StatusOr<CallOptions> ToCallOptions(const Options& o);

class CommBase : public Comm {
 public:
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                   const Options& o) override;
  Status Broadcast(const void* in, void* out, int64_t count, DataType dtype, int root,
                   const Options& o) override;
  Status Reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, int root,
                const Options& o) override;
  Status Allgather(const void* in, void* out, int64_t count, DataType dtype,
                   const Options& o) override;
  Status ReduceScatter(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                       const Options& o) override;
  Status Alltoall(const void* in, void* out, int64_t count, DataType dtype,
                  const Options& o) override;
  Status Gather(const void* in, void* out, int64_t count, DataType dtype, int root,
                const Options& o) override;
  Status Scatter(const void* in, void* out, int64_t count, DataType dtype, int root,
                 const Options& o) override;
  Status Barrier(const Options& o) override;
  Status RefuseCall(const std::string& collective, const Status& why) override;
  Status Close(const Options& o) override;
  std::shared_ptr<Work> AllreduceAsync(const void* in, void* out, int64_t count, DataType dtype,
                                       ReduceOp op, const Options& o) override;
  std::shared_ptr<Work> BroadcastAsync(const void* in, void* out, int64_t count, DataType dtype,
                                       int root, const Options& o) override;
  std::shared_ptr<Work> AllgatherAsync(const void* in, void* out, int64_t count, DataType dtype,
                                       const Options& o) override;
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, int64_t count, DataType dtype,
                                           ReduceOp op, const Options& o) override;
  Status Send(const void* buf, int64_t count, DataType dtype, int peer, int tag,
              const Options& o) override;
  Status Recv(void* buf, int64_t count, DataType dtype, int peer, int tag,
              const Options& o) override;
  std::shared_ptr<Work> SendAsync(const void* buf, int64_t count, DataType dtype, int peer, int tag,
                                  const Options& o) override;
  std::shared_ptr<Work> RecvAsync(void* buf, int64_t count, DataType dtype, int peer, int tag,
                                  const Options& o) override;
  CallInfo last() const override;
  // Page-aligned heap memory; the daemon Comm overrides these with shared memory.
  StatusOr<void*> AllocBuffer(size_t bytes) override;
  Status FreeBuffer(void* block) override;
  ~CommBase() override;

 protected:
  // One send (`send`) or receive, started now or queued; the Work completes with it.
  virtual std::shared_ptr<Work> StartMessage(bool send, void* buf, int64_t count, DataType dtype,
                                             int peer, int tag, const Options& o) = 0;
  // Runs `call` in call order on the queue's thread.
  std::shared_ptr<Work> Queued(std::function<Status()> call);
  // Runs `call` on this thread once every earlier call has finished, and no call with it.
  Status Inline(const std::function<Status()>& call) { return queue_.RunInline(call); }
  // First thing in a derived destructor: no queued call may run on what it destroys.
  void StopCalls() { queue_.Shutdown(); }
  // Refuses one collective in its place in the sequence, with `why` (never Ok).
  virtual Status Refused(const algo::CollectiveSpec& spec, const Status& why) = 0;
  // Runs one collective; implementations set the CallInfo with SetLast.
  virtual Status Call(algo::CollectiveSpec spec, const void* in, void* out, const Options& o) = 0;
  // After Close's exchange with every rank (`met`: it succeeded): the daemon Comm says goodbye
  // to gyred here, and an embedded one removes its records from the job's store.
  virtual void Closing(bool met) {}
  // InvalidArgument once Close has begun: no call may follow it.
  Status RefuseIfClosed() const;
  void SetLast(const CallInfo& info);

 private:
  Status Blocking(algo::CollectiveSpec spec, const void* in, void* out, const Options& o);
  std::shared_ptr<Work> Submitted(const algo::CollectiveSpec& spec, const void* in, void* out,
                                  const Options& o);

  mutable std::mutex last_mu_;
  CallInfo last_;
  std::mutex blocks_mu_;
  std::set<void*> blocks_;  // from the heap AllocBuffer
  CallQueue queue_;
  std::atomic<bool> closed_{false};
};

// A Work that is already done with `status` (a call refused before it started).
std::shared_ptr<Work> FinishedWork(Status status);

StatusOr<std::unique_ptr<Comm>> MakeEmbedded();
// Joins with options the caller chose (identity, store, timeouts): for bindings that bring
// their own rendezvous, such as the torch.distributed backend.
StatusOr<std::unique_ptr<Comm>> MakeEmbedded(const job::JoinOptions& options);
StatusOr<std::unique_ptr<Comm>> MakeDaemonClient(const std::string& socket_path, Deadline deadline);

}  // namespace gyre::client
