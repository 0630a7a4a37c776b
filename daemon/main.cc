// gyred: one rank of a gyre job. It finds out who it is (flags, then GYRE_*, torchrun, Open
// MPI or Slurm variables), joins the job through the store, connects to its peers over TCP,
// and then either serves local programs on a Unix socket or runs a built-in workload.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/job/bootstrap.h"
#include "core/job/identity.h"
#include "daemon/client_server.h"
#include "daemon/workloads.h"

DEFINE_int32(rank, -1, "this rank (default: from the environment)");
DEFINE_int32(world_size, -1, "number of ranks (default: from the environment)");
DEFINE_string(store, "",
              "rendezvous store: file:///dir or tcp://host:port (default: GYRE_STORE, "
              "or tcp://MASTER_ADDR:MASTER_PORT)");
DEFINE_string(job_id, "",
              "job id; every store key and every connection carries it "
              "(default: GYRE_JOB_ID)");
DEFINE_string(listen, "127.0.0.1:0", "address:port for peer connections (port 0: any)");
DEFINE_string(socket, "", "Unix socket for local clients (serve mode; default: GYRE_SOCKET)");
DEFINE_string(run, "serve", "what to do once joined: serve | selftest | main");
DEFINE_double(timeout, 30,
              "progress timeout in seconds: how long to wait for the next byte "
              "from a peer before failing the operation");
DEFINE_double(rendezvous_timeout, 60, "seconds to wait for every rank at rendezvous");
DEFINE_bool(exit_with_client, true, "serve mode: exit once the first client disconnects");
DEFINE_string(report_file, "", "write the workload report here (rank 0) instead of stdout");
DEFINE_int32(timing_runs, 7, "main job: runs per timed cell (at least 5)");
DEFINE_bool(deterministic, false, "canonical reduction order for every reducing call");
DEFINE_int64(segment_bytes, 0, "pipelining segment size for chunked algorithms (0: none)");

namespace {

std::atomic<bool> g_stop{false};
gyre::daemon::ClientServer* g_server = nullptr;

void OnSignal(int) {
  g_stop = true;
  if (g_server != nullptr) g_server->Stop();
}

int Fail(const std::string& prefix, const gyre::Status& s) {
  LOG(ERROR) << prefix << s.ToString();
  std::cerr << prefix << "gyred: " << s.ToString() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "gyred: one rank of a gyre job.\n"
      "  gyred --rank 0 --world_size 4 --store file:///tmp/job --job_id J --run main\n"
      "Usually started by gyrerun.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  using namespace gyre;
  job::IdentityOverrides o;
  if (FLAGS_rank >= 0) o.rank = FLAGS_rank;
  if (FLAGS_world_size >= 0) o.world_size = FLAGS_world_size;
  if (!FLAGS_store.empty()) o.store_url = FLAGS_store;
  if (!FLAGS_job_id.empty()) o.job_id = FLAGS_job_id;
  auto id = job::ResolveIdentity(o, job::ProcessEnvironment());
  if (!id.ok()) return Fail("", id.status());
  const std::string prefix = "[rank " + std::to_string(id->rank) + "] ";
  LOG(INFO) << prefix << "rank " << id->rank << " of " << id->world_size << ", job " << id->job_id
            << ", store " << id->store_url << " (identity from " << id->source << ")";

  job::JoinOptions jo;
  jo.identity = *id;
  const std::string& listen = FLAGS_listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return Fail(prefix, InvalidArgumentError("--listen '" + listen + "' is not host:port"));
  }
  jo.listen_host = listen.substr(0, colon);
  jo.listen_port = std::atoi(listen.c_str() + colon + 1);
  jo.rendezvous_timeout = Seconds(FLAGS_rendezvous_timeout);
  jo.comm.timeout = Seconds(FLAGS_timeout);
  jo.comm.deterministic = FLAGS_deterministic;
  jo.comm.segment_bytes = FLAGS_segment_bytes;
  auto joined = job::JoinJob(jo);
  if (!joined.ok()) return Fail(prefix, joined.status());
  LOG(INFO) << prefix << "joined as pid " << getpid() << ", listening for peers on "
            << joined->address;

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Communicator& comm = *joined->comm;
  if (FLAGS_run == "serve") {
    std::string path = FLAGS_socket;
    if (path.empty()) {
      if (const char* s = std::getenv("GYRE_SOCKET")) path = s;
    }
    if (path.empty()) {
      return Fail(prefix, InvalidArgumentError("serve mode needs --socket or GYRE_SOCKET"));
    }
    daemon::ClientServer server(&comm, id->job_id, prefix);
    Status ls = server.Listen(path);
    if (!ls.ok()) return Fail(prefix, ls);
    g_server = &server;
    server.Serve(FLAGS_exit_with_client);
    g_server = nullptr;
    LOG(INFO) << prefix << "served " << server.calls_served() << " calls; exiting"
              << (g_stop ? " on a signal" : "");
    // Close the peer connections first so the other ranks see this one leave at once, then
    // exit without waiting for a client thread that may be inside a collective.
    comm.transport()->Shutdown();
    std::fflush(nullptr);
    ::_exit(g_stop ? 128 + SIGTERM : 0);
  }
  if (FLAGS_run == "selftest" || FLAGS_run == "main") {
    std::ostringstream report;
    daemon::WorkloadOptions wo;
    wo.timing_runs = FLAGS_timing_runs;
    const bool ok = FLAGS_run == "main" ? daemon::RunMainJob(comm, report, wo)
                                        : daemon::RunSelftest(comm, report);
    if (comm.rank() == 0) {
      if (!FLAGS_report_file.empty()) {
        std::ofstream f(FLAGS_report_file);
        f << report.str();
        if (!f) {
          return Fail(prefix,
                      ResourceExhaustedError("cannot write the report to " + FLAGS_report_file));
        }
      } else {
        std::cout << report.str() << std::flush;
      }
    }
    return ok ? 0 : 1;
  }
  return Fail(prefix, InvalidArgumentError("--run '" + FLAGS_run +
                                           "' is not one of serve, selftest, main"));
}
