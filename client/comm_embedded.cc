// The embedded Comm: a Communicator joined to the job inside this process.
#include "client/call_queue.h"
#include "client/comm_impl.h"
#include "core/job/bootstrap.h"

namespace gyre::client {
namespace {

class EmbeddedComm final : public CommBase {
 public:
  explicit EmbeddedComm(job::Joined joined) : joined_(std::move(joined)) {}
  int rank() const override { return joined_.comm->rank(); }
  int size() const override { return joined_.comm->size(); }
  std::string mode() const override { return "embedded"; }

 protected:
  Status Call(algo::CollectiveSpec spec, const void* in, void* out, const Options& o) override {
    GYRE_ASSIGN_OR_RETURN(CallOptions co, ToCallOptions(o));
    Status s = joined_.comm->Run(spec, in, out, co);
    const OpResult& r = joined_.comm->last();
    CallInfo info;
    info.algorithm = algo::AlgorithmName(r.spec.algorithm);
    info.seq = r.seq;
    info.elapsed = r.elapsed;
    info.bytes_sent = r.counters.bytes_sent();
    info.msgs_sent = r.counters.msgs_sent();
    info.bytes_recv = r.counters.bytes_recv();
    info.msgs_recv = r.counters.msgs_recv();
    SetLast(info);
    return s;
  }

 private:
  job::Joined joined_;
};

}  // namespace

StatusOr<std::unique_ptr<Comm>> MakeEmbedded() {
  job::IdentityOverrides none;
  GYRE_ASSIGN_OR_RETURN(job::Identity id, job::ResolveIdentity(none, job::ProcessEnvironment()));
  job::JoinOptions jo;
  jo.identity = id;
  if (const char* h = std::getenv("GYRE_LISTEN_HOST")) jo.listen_host = h;
  if (const char* t = std::getenv("GYRE_TIMEOUT_MS")) jo.comm.timeout = Millis(std::atoll(t));
  if (const char* d = std::getenv("GYRE_FLIGHT_DIR")) jo.flight_dir = d;
  return MakeEmbedded(jo);
}

StatusOr<std::unique_ptr<Comm>> MakeEmbedded(const job::JoinOptions& options) {
  GYRE_ASSIGN_OR_RETURN(job::Joined joined, job::JoinJob(options));
  return std::unique_ptr<Comm>(new EmbeddedComm(std::move(joined)));
}

}  // namespace gyre::client
