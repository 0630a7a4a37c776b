// The embedded Comm: a Communicator joined to the job inside this process.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <shared_mutex>
#include <string>

#include "client/call_queue.h"
#include "client/comm_impl.h"
#include "core/job/bootstrap.h"
#include "core/job/inquiry.h"
#include "glog/logging.h"

namespace gyre::client {
namespace {

// What a message's Work reaches its communicator through: `comm` is null once the Comm that
// owns it is destroyed (under an exclusive lock, so never while a Work is using it).
struct CommLink {
  std::shared_mutex mu;
  Communicator* comm = nullptr;
};

// A message posted on the communicator; waiting enforces its progress timeout. Waited on
// after its Comm was destroyed, it reports how it ended, or Aborted if it had not.
class MessageWork final : public Work {
 public:
  MessageWork(std::shared_ptr<CommLink> link, std::shared_ptr<PendingMessage> m, CallOptions co,
              std::function<void(const CallInfo&)> record)
      : link_(std::move(link)), m_(std::move(m)), co_(co), record_(std::move(record)) {}
  // Abandoned while posted: withdraw it, so the transport lets go of the caller's buffer.
  ~MessageWork() override {
    std::shared_lock<std::shared_mutex> lock(link_->mu);
    if (link_->comm != nullptr && !Done()) {
      link_->comm->transport()->CancelOperation(
          m_->seq, AbortedError(m_->name + ": its Work was destroyed before it finished"));
    }
  }
  Status Wait(Deadline deadline) override {
    std::shared_lock<std::shared_mutex> lock(link_->mu);
    Communicator* comm = link_->comm;
    if (comm == nullptr) {
      std::lock_guard<std::mutex> m_lock(m_->mu);
      if (m_->done) return m_->status;
      return AbortedError(m_->name + ": its Comm was destroyed before it finished");
    }
    Status s = comm->WaitMessage(*m_, co_, deadline);
    if (Done() && record_) {
      CallInfo info;
      info.algorithm = "direct";
      info.seq = m_->seq;
      info.elapsed = comm->transport()->clock().Now() - m_->posted;
      const int64_t moved = s.ok() ? m_->bytes : 0;
      (m_->send ? info.bytes_sent : info.bytes_recv) = moved;
      (m_->send ? info.msgs_sent : info.msgs_recv) = s.ok() ? 1 : 0;
      record_(info);
      record_ = nullptr;
    }
    return s;
  }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(m_->mu);
    return m_->done;
  }

 private:
  std::shared_ptr<CommLink> link_;
  std::shared_ptr<PendingMessage> m_;
  CallOptions co_;
  std::function<void(const CallInfo&)> record_;  // once, when the message is done
};

class EmbeddedComm final : public CommBase {
 public:
  explicit EmbeddedComm(job::Joined joined) : joined_(std::move(joined)) {
    link_->comm = joined_.comm.get();
  }
  ~EmbeddedComm() override {
    StopCalls();
    TellIfLeavingEarly();
    // Messages still posted end now (a thread waiting on one returns Aborted), and no Work
    // reaches the communicator after this.
    std::vector<std::shared_ptr<PendingMessage>> open;
    {
      std::lock_guard<std::mutex> lock(posted_mu_);
      for (const auto& w : posted_) {
        if (auto m = w.lock()) open.push_back(std::move(m));
      }
    }
    for (const auto& m : open) {
      joined_.comm->transport()->CancelOperation(
          m->seq, AbortedError(m->name + ": its Comm was destroyed before it finished"));
    }
    std::unique_lock<std::shared_mutex> lock(link_->mu);
    link_->comm = nullptr;
  }
  int rank() const override { return joined_.comm->rank(); }
  int size() const override { return joined_.comm->size(); }
  std::string mode() const override { return "embedded"; }

 protected:
  // Every rank has joined once Close's exchange met them all: this rank's records leave the
  // store, so that the job id can be used again there.
  void Closing(bool met) override {
    closed_with_everyone_ = met;
    if (met) job::LeaveJobOrWarn(joined_, "rank " + std::to_string(rank()) + ": ");
  }
  Status Refused(const algo::CollectiveSpec& spec, const Status& why) override {
    return joined_.comm->Refuse(spec, why);
  }
  Status Call(algo::CollectiveSpec spec, const void* in, void* out, const Options& o) override {
    const StatusOr<CallOptions> co = ToCallOptions(o);
    // Refused, it still takes its place in the sequence, as any refusal inside Run does.
    Status s =
        co.ok() ? joined_.comm->Run(spec, in, out, *co) : joined_.comm->Refuse(spec, co.status());
    const OpResult& r = joined_.comm->last();
    CallInfo& info = info_;  // reused: its algorithm string keeps its storage
    info.algorithm.assign(algo::AlgorithmName(r.spec.algorithm));
    info.seq = r.seq;
    info.elapsed = r.elapsed;
    info.bytes_sent = r.counters.bytes_sent();
    info.msgs_sent = r.counters.msgs_sent();
    info.bytes_recv = r.counters.bytes_recv();
    info.msgs_recv = r.counters.msgs_recv();
    SetLast(info);
    return s;
  }

  std::shared_ptr<Work> StartMessage(bool send, void* buf, int64_t count, DataType dtype, int peer,
                                     int tag, const Options& o) override {
    auto co = ToCallOptions(o);
    if (!co.ok()) return FinishedWork(co.status());
    Communicator& c = *joined_.comm;
    auto m =
        send ? c.PostSend(buf, count, dtype, peer, tag) : c.PostRecv(buf, count, dtype, peer, tag);
    if (!m.ok()) return FinishedWork(m.status());
    {
      std::lock_guard<std::mutex> lock(posted_mu_);
      if (posted_.size() >= prune_at_) {
        posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                                     [](const auto& w) { return w.expired(); }),
                      posted_.end());
        prune_at_ = std::max<size_t>(64, 2 * posted_.size());
      }
      posted_.push_back(*m);
    }
    return std::make_shared<MessageWork>(link_, std::move(*m), *co,
                                         [this](const CallInfo& info) { SetLast(info); });
  }

 private:
  // Destroyed without a Close that met every rank, this rank makes no more calls while the
  // others may: they are told before its connections close, so that a call of theirs it never
  // makes fails naming it as having left, not as dead (a program that finished its own work
  // may well exit 0). As gyred does for its program (daemon/main.cc), not after a call of its
  // own failed: the others, still judging that call, must not take its leaving for the cause.
  void TellIfLeavingEarly() {
    if (closed_with_everyone_ || joined_.directory == nullptr || size() < 2) return;
    const OpSnapshot snap = joined_.comm->monitor()->Snapshot();
    if (snap.LastCallFailed()) return;
    PeerDeparture left;
    left.program_pid = ::getpid();
    left.how = job::kLeftWithoutClose;
    left.last_completed_seq = snap.last_completed_seq;
    left.on_purpose = true;
    const int told = job::TellDeparture(*joined_.directory, rank(), left,
                                        job::QueryTimeoutFor(joined_.comm->progress_timeout()));
    VLOG(1) << "rank " << rank() << ": left after seq=" << left.last_completed_seq << "; told "
            << told << " of " << size() - 1 << " other ranks";
  }

  job::Joined joined_;
  bool closed_with_everyone_ = false;  // Close's exchange met every rank
  std::shared_ptr<CommLink> link_ = std::make_shared<CommLink>();
  std::mutex posted_mu_;
  std::vector<std::weak_ptr<PendingMessage>> posted_;  // messages posted, maybe still open
  size_t prune_at_ = 64;
  CallInfo info_;  // Call's, filled in place
};

// A whole-number environment variable in [min, max] (job::ParseEnvInteger); nullopt when it
// is unset or empty, as gyre's Python layer reads them.
StatusOr<std::optional<int64_t>> EnvInteger(const char* name, int64_t min, int64_t max) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::optional<int64_t>();
  GYRE_ASSIGN_OR_RETURN(int64_t v, job::ParseEnvInteger(name, raw, min, max));
  return std::optional<int64_t>(v);
}

// GYRE_DETERMINISTIC, GYRE_TUNE (job::ParseEnvSwitch); nullopt when unset or empty, as the
// Python layer reads them.
StatusOr<std::optional<bool>> EnvSwitch(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::optional<bool>();
  GYRE_ASSIGN_OR_RETURN(bool v, job::ParseEnvSwitch(name, raw));
  return std::optional<bool>(v);
}

}  // namespace

StatusOr<std::unique_ptr<Comm>> MakeEmbedded() {
  job::IdentityOverrides none;
  GYRE_ASSIGN_OR_RETURN(job::Identity id, job::ResolveIdentity(none, job::ProcessEnvironment()));
  job::JoinOptions jo;
  jo.identity = id;
  if (const char* h = std::getenv("GYRE_LISTEN_HOST")) jo.listen_host = h;
  // At most 1e12 ms (gyrerun's 1e9 s): the nanoseconds of a Duration hold about 9.2e12 ms.
  GYRE_ASSIGN_OR_RETURN(std::optional<int64_t> timeout_ms,
                        EnvInteger("GYRE_TIMEOUT_MS", 1, int64_t{1000000000000}));
  if (timeout_ms) jo.comm.timeout = Millis(*timeout_ms);
  GYRE_ASSIGN_OR_RETURN(std::optional<int64_t> rendezvous_ms,
                        EnvInteger("GYRE_RENDEZVOUS_TIMEOUT_MS", 1, int64_t{1000000000000}));
  if (rendezvous_ms) jo.rendezvous_timeout = Millis(*rendezvous_ms);
  if (const char* d = std::getenv("GYRE_FLIGHT_DIR")) jo.flight_dir = d;
  // The pipelining segment (gyrerun --segment_bytes; gyred takes it as a flag).
  GYRE_ASSIGN_OR_RETURN(std::optional<int64_t> segment,
                        EnvInteger("GYRE_SEGMENT_BYTES", 0, int64_t{1} << 50));
  if (segment) jo.comm.segment_bytes = *segment;
  GYRE_ASSIGN_OR_RETURN(std::optional<bool> det, EnvSwitch("GYRE_DETERMINISTIC"));
  if (det) jo.comm.deterministic = *det;
  GYRE_ASSIGN_OR_RETURN(std::optional<bool> tune, EnvSwitch("GYRE_TUNE"));
  if (tune) jo.comm.tune = *tune;
  return MakeEmbedded(jo);
}

StatusOr<std::unique_ptr<Comm>> MakeEmbedded(const job::JoinOptions& options) {
  GYRE_ASSIGN_OR_RETURN(job::Joined joined, job::JoinJob(options));
  return std::unique_ptr<Comm>(new EmbeddedComm(std::move(joined)));
}

}  // namespace gyre::client
