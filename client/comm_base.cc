#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "client/comm_impl.h"
#include "core/base/large_memory.h"
#include "core/job/identity.h"

namespace gyre {

StatusOr<std::unique_ptr<Comm>> Comm::ConnectDaemon(const std::string& socket_path,
                                                    Deadline deadline) {
  return client::MakeDaemonClient(socket_path, deadline);
}

StatusOr<std::unique_ptr<Comm>> Comm::Embedded() { return client::MakeEmbedded(); }

StatusOr<std::unique_ptr<Comm>> Comm::FromEnvironment() {
  const char* mode = std::getenv("GYRE_MODE");
  const char* socket = std::getenv("GYRE_SOCKET");
  if (mode != nullptr && std::string(mode) == "embedded") return Embedded();
  if (socket != nullptr && *socket) {
    // The daemon serves its socket once it has joined: wait as long as a rendezvous may take
    // (gyrerun's --rendezvous_timeout reaches the program as GYRE_RENDEZVOUS_TIMEOUT_MS; 60 s
    // unset), and 5 s more, so that a daemon whose rendezvous fails says why first.
    Duration wait = Seconds(60);
    if (const char* ms = std::getenv("GYRE_RENDEZVOUS_TIMEOUT_MS"); ms != nullptr && *ms) {
      GYRE_ASSIGN_OR_RETURN(int64_t v, job::ParseEnvInteger("GYRE_RENDEZVOUS_TIMEOUT_MS", ms, 1,
                                                            int64_t{1000000000000}));
      wait = Millis(v);
    }
    return ConnectDaemon(socket, Deadline::After(*SteadyClock::Get(), wait + Seconds(5)));
  }
  if (mode != nullptr && std::string(mode) != "daemon") {
    return InvalidArgumentError(std::string("GYRE_MODE='") + mode +
                                "' is not 'daemon' or 'embedded'");
  }
  return InvalidArgumentError(
      "no gyre job in the environment: run under gyrerun, or set GYRE_SOCKET (the daemon's "
      "socket) or GYRE_MODE=embedded with GYRE_RANK, GYRE_WORLD_SIZE and GYRE_STORE");
}

namespace client {

using algo::Collective;
using algo::CollectiveSpec;

StatusOr<CallOptions> ToCallOptions(const Options& o) {
  CallOptions c;
  if (!o.algorithm.empty() && o.algorithm != "auto") {
    GYRE_ASSIGN_OR_RETURN(c.algorithm, algo::ParseAlgorithm(o.algorithm));
  }
  // Any other value used to be taken as "on" without a word, where every other field is
  // refused by name.
  if (o.deterministic < -1 || o.deterministic > 1) {
    return InvalidArgumentError("Options::deterministic is " + std::to_string(o.deterministic) +
                                ": want -1 (the job's default), 0 (off) or 1 (canonical order)");
  }
  c.deterministic = o.deterministic;
  if (o.timeout < Duration::zero()) {
    return InvalidArgumentError("Options::timeout is negative (" + FormatDuration(o.timeout) +
                                "); zero means the job's default");
  }
  // "Forever" (Duration::max()) is 1e9 s: a progress deadline is the last progress plus it.
  c.timeout = std::min<Duration>(o.timeout, kMaxCallTimeout);
  // A deadline already passed is this caller's alone: refused here, in its place in the
  // sequence (the others hear "refused"), not run until it fails and others are blamed for
  // it, nor (through the daemon, where it went as 1 ms) run anyway.
  if (!o.deadline.infinite() && o.deadline.Expired(*SteadyClock::Get())) {
    return DeadlineExceededError("the call's deadline (Options::deadline) had passed " +
                                 FormatDuration(SteadyClock::Get()->Now() - o.deadline.when()) +
                                 " before the call started");
  }
  c.deadline = o.deadline;
  return c;
}

std::shared_ptr<Work> CommBase::Queued(std::function<Status()> call) {
  auto work = queue_.Submit(std::move(call), rank());
  if (!work.ok()) return FinishedWork(work.status());
  return std::move(*work);
}

Status CommBase::RefuseIfClosed() const {
  if (!closed_.load()) return Status::Ok();
  return InvalidArgumentError("this Comm was closed (Comm::Close): no call may follow it");
}

Status CommBase::Blocking(CollectiveSpec spec, const void* in, void* out, const Options& o) {
  GYRE_RETURN_IF_ERROR(RefuseIfClosed());
  return queue_.RunInline([&] { return Call(spec, in, out, o); });
}

std::shared_ptr<Work> CommBase::Submitted(const CollectiveSpec& spec, const void* in, void* out,
                                          const Options& o) {
  if (Status closed = RefuseIfClosed(); !closed.ok()) return FinishedWork(closed);
  return Queued([this, spec, in, out, o] { return Call(spec, in, out, o); });
}

Status CommBase::Allreduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                           const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kAllreduce, count, dtype, op, 0), in, out, o);
}
Status CommBase::Broadcast(const void* in, void* out, int64_t count, DataType dtype, int root,
                           const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kBroadcast, count, dtype, ReduceOp::kSum, root), in,
                  out, o);
}
Status CommBase::Reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                        int root, const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kReduce, count, dtype, op, root), in, out, o);
}
Status CommBase::Allgather(const void* in, void* out, int64_t count, DataType dtype,
                           const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kAllgather, count, dtype, ReduceOp::kSum, 0), in, out,
                  o);
}
Status CommBase::ReduceScatter(const void* in, void* out, int64_t count, DataType dtype,
                               ReduceOp op, const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kReduceScatter, count, dtype, op, 0), in, out, o);
}
Status CommBase::Alltoall(const void* in, void* out, int64_t count, DataType dtype,
                          const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kAlltoall, count, dtype, ReduceOp::kSum, 0), in, out,
                  o);
}
Status CommBase::Gather(const void* in, void* out, int64_t count, DataType dtype, int root,
                        const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kGather, count, dtype, ReduceOp::kSum, root), in, out,
                  o);
}
Status CommBase::Scatter(const void* in, void* out, int64_t count, DataType dtype, int root,
                         const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kScatter, count, dtype, ReduceOp::kSum, root), in, out,
                  o);
}
Status CommBase::RefuseCall(const std::string& collective, const Status& why) {
  StatusOr<Collective> c = algo::ParseCollective(collective);
  if (!c.ok()) return c.status();
  GYRE_RETURN_IF_ERROR(RefuseIfClosed());
  const Status reason =
      why.ok() ? InvalidArgumentError("the program refused the call without a reason") : why;
  const CollectiveSpec spec = algo::MakeSpec(*c, 0, DataType::kUint8);
  return queue_.RunInline([&] { return Refused(spec, reason); });
}

Status CommBase::Barrier(const Options& o) {
  return Blocking(algo::MakeSpec(Collective::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, 0),
                  nullptr, nullptr, o);
}

Status CommBase::Close(const Options& o) {
  // The first Close wins; a call made from here on, on any thread, is refused.
  if (closed_.exchange(true)) return RefuseIfClosed();
  // Every rank hears directly from every other (an alltoall of one byte each, pairwise): a
  // message of an earlier call still on its way from any rank comes on the same connection
  // before that rank's message here, so it has been read, and checked, when this completes.
  // A barrier's rounds would not hear from every rank, and could finish first.
  const int p = size();
  std::vector<uint8_t> sent(static_cast<size_t>(p), 1), heard(static_cast<size_t>(p), 0);
  Options exchange = o;
  exchange.algorithm = "pairwise";
  const CollectiveSpec spec = algo::MakeSpec(Collective::kAlltoall, 1, DataType::kUint8,
                                             ReduceOp::kSum, algo::kClosingExchangeRoot);
  Status met = queue_.RunInline([&] { return Call(spec, sent.data(), heard.data(), exchange); });
  queue_
      .RunInline([this, &met] {
        Closing(met.ok());
        return Status::Ok();
      })
      .IgnoreError();
  if (!met.ok()) return met.WithContext("Comm::Close on rank " + std::to_string(rank()));
  return Status::Ok();
}

std::shared_ptr<Work> CommBase::AllreduceAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, ReduceOp op, const Options& o) {
  CollectiveSpec spec = algo::MakeSpec(Collective::kAllreduce, count, dtype, op, 0);
  return Submitted(spec, in, out, o);
}

std::shared_ptr<Work> CommBase::BroadcastAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, int root, const Options& o) {
  CollectiveSpec spec = algo::MakeSpec(Collective::kBroadcast, count, dtype, ReduceOp::kSum, root);
  return Submitted(spec, in, out, o);
}

std::shared_ptr<Work> CommBase::AllgatherAsync(const void* in, void* out, int64_t count,
                                               DataType dtype, const Options& o) {
  CollectiveSpec spec = algo::MakeSpec(Collective::kAllgather, count, dtype, ReduceOp::kSum, 0);
  return Submitted(spec, in, out, o);
}

std::shared_ptr<Work> CommBase::ReduceScatterAsync(const void* in, void* out, int64_t count,
                                                   DataType dtype, ReduceOp op, const Options& o) {
  CollectiveSpec spec = algo::MakeSpec(Collective::kReduceScatter, count, dtype, op, 0);
  return Submitted(spec, in, out, o);
}

namespace {

class FinishedWorkImpl final : public Work {
 public:
  explicit FinishedWorkImpl(Status s) : status_(std::move(s)) {}
  Status Wait(Deadline) override { return status_; }
  bool Done() const override { return true; }

 private:
  Status status_;
};

}  // namespace

std::shared_ptr<Work> FinishedWork(Status status) {
  return std::make_shared<FinishedWorkImpl>(std::move(status));
}

Status CommBase::Send(const void* buf, int64_t count, DataType dtype, int peer, int tag,
                      const Options& o) {
  return SendAsync(buf, count, dtype, peer, tag, o)->Wait();
}

Status CommBase::Recv(void* buf, int64_t count, DataType dtype, int peer, int tag,
                      const Options& o) {
  return RecvAsync(buf, count, dtype, peer, tag, o)->Wait();
}

std::shared_ptr<Work> CommBase::SendAsync(const void* buf, int64_t count, DataType dtype, int peer,
                                          int tag, const Options& o) {
  if (Status closed = RefuseIfClosed(); !closed.ok()) return FinishedWork(closed);
  return StartMessage(true, const_cast<void*>(buf), count, dtype, peer, tag, o);
}

std::shared_ptr<Work> CommBase::RecvAsync(void* buf, int64_t count, DataType dtype, int peer,
                                          int tag, const Options& o) {
  if (Status closed = RefuseIfClosed(); !closed.ok()) return FinishedWork(closed);
  return StartMessage(false, buf, count, dtype, peer, tag, o);
}

CallInfo CommBase::last() const {
  std::lock_guard<std::mutex> lock(last_mu_);
  return last_;
}

StatusOr<void*> CommBase::AllocBuffer(size_t bytes) {
  // As the daemon's shared memory is: more than the host has is refused now, and a block is
  // written through now, so the next one is judged by what is really left. Untouched, a
  // block larger than the memory left was granted and its first use ended in the OOM killer.
  GYRE_RETURN_IF_ERROR(CheckAvailableMemory(bytes, "AllocBuffer: cannot allocate"));
  void* p = nullptr;
  const size_t n = std::max<size_t>(bytes, 1);
  if (::posix_memalign(&p, 4096, n) != 0) {
    return ResourceExhaustedError("AllocBuffer: cannot allocate " + std::to_string(bytes) +
                                  " bytes");
  }
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
  // Whole pages of the block only (it may share its last page with other heap memory); where
  // the kernel cannot populate (older than 5.14), the pages come at first use, as before.
  const size_t span = n / 4096 * 4096;
  if (span > 0 && ::madvise(p, span, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    const int err = errno;
    std::free(p);
    return ResourceExhaustedError("AllocBuffer: cannot allocate " + std::to_string(bytes) +
                                  " bytes: " + std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(blocks_mu_);
  blocks_.insert(p);
  return p;
}

Status CommBase::FreeBuffer(void* block) {
  // As through the daemon: after the asynchronous collectives submitted before it, so a block
  // one of them still reads or writes is never freed (and handed out again) under it.
  return queue_.RunInline([&]() -> Status {
    {
      std::lock_guard<std::mutex> lock(blocks_mu_);
      if (blocks_.erase(block) == 0) {
        return InvalidArgumentError(
            "FreeBuffer: the pointer is not a block from AllocBuffer of "
            "this Comm (or was freed already)");
      }
    }
    std::free(block);
    return Status::Ok();
  });
}

CommBase::~CommBase() {
  for (void* p : blocks_) std::free(p);
}

void CommBase::SetLast(const CallInfo& info) {
  std::lock_guard<std::mutex> lock(last_mu_);
  last_ = info;
}

}  // namespace client
}  // namespace gyre
