// gyred: one rank of a gyre job. It finds out who it is (flags, then GYRE_*, torchrun, Open
// MPI or Slurm variables), joins the job through the store, connects to its peers over TCP,
// and then either serves local programs on a Unix socket or runs a built-in workload.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/algo/model_select.h"
#include "core/base/file_io.h"
#include "core/base/stdout_check.h"
#include "core/base/thread.h"
#include "core/base/tool_flags.h"
#include "core/ipc/ipc.h"
#include "core/job/bootstrap.h"
#include "core/job/identity.h"
#include "core/job/inquiry.h"
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
DEFINE_string(secret_file, "",
              "the job's secret (hex, mode 0600) that every store, peer and client connection "
              "must prove (default: GYRE_SECRET_FILE; none: the job runs unauthenticated)");
DEFINE_string(listen, "127.0.0.1:0", "address:port for peer connections (port 0: any)");
DEFINE_string(ifaces, "",
              "advertise the addresses of these interfaces, e.g. 'eth*,^docker*' (globs, '^' "
              "excludes), listening on all of them (default: GYRE_IFACES; none: --listen only)");
DEFINE_bool(allow_loopback, false,
            "let a job spanning hosts use loopback addresses (default: GYRE_ALLOW_LOOPBACK)");
DEFINE_string(host_name, "", "this host's name for the job (default: GYRE_HOST, hostname)");
DEFINE_string(socket, "", "Unix socket for local clients (serve mode; default: GYRE_SOCKET)");
DEFINE_string(run, "serve", "what to do once joined: serve | selftest | main | bench");
DEFINE_int64(bench_max_bytes, 16 << 20, "bench: the largest allreduce size");
DEFINE_double(timeout, 30,
              "progress timeout in seconds: how long to wait for the next byte "
              "from a peer before failing the operation");
DEFINE_double(rendezvous_timeout, 60, "seconds to wait for every rank at rendezvous");
DEFINE_bool(exit_with_client, true, "serve mode: exit once the first client disconnects");
DEFINE_double(linger_after_failure, 3,
              "serve mode: seconds the rank keeps answering the other ranks' control queries "
              "after its client left on a failed operation, so that their verdicts see it "
              "as a survivor rather than a dead rank (ends early on SIGTERM)");
DEFINE_string(report_file, "", "write the workload report here (rank 0) instead of stdout");
DEFINE_int32(timing_runs, 7, "main job: runs per timed cell (at least 5)");
DEFINE_bool(deterministic, false, "canonical reduction order for every reducing call");
DEFINE_int64(segment_bytes, 0, "pipelining segment size for chunked algorithms (0: none)");
DEFINE_bool(tune, false,
            "online tuning of the automatic choice: the first calls of each size try the "
            "model's closest candidates and the fastest is kept (every rank alike)");
DEFINE_string(flight_dir, "",
              "where the flight recorder is written on failure and on SIGUSR1 "
              "(default: stderr on SIGUSR1 only)");
DEFINE_string(trace_jsonl, "", "append one JSON line per operation to this file");
DEFINE_string(calibration, "",
              "machine model for automatic algorithm choice, written by gyre-bench --calibrate "
              "--calibration_out (default: $GYRE_CALIBRATION, else built in)");
DEFINE_int32(metrics_port, -1,
             "serve Prometheus metrics on 127.0.0.1:PORT (0: any port, -1: "
             "off)");
DEFINE_string(metrics_host, "127.0.0.1", "address the metrics endpoint binds");

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};  // the signal that set g_stop, for the exit code 128 + it
std::atomic<bool> g_dump{false};

void OnUsr1(int) { g_dump = true; }

// Serves GET /metrics (any path) in Prometheus' text format, one request per connection.
// Connections wait together for their request (each for at most a second, at most 64 of
// them, the oldest dropped for a newcomer), so an idle or slow client holds up no scrape.
void ServeMetrics(int listen_fd, gyre::Communicator* comm) {
  struct Waiting {
    int fd;
    std::chrono::steady_clock::time_point since;
  };
  constexpr size_t kMaxWaiting = 64;
  std::vector<Waiting> waiting;
  std::vector<pollfd> fds;
  while (!g_stop) {
    fds.assign(1, pollfd{listen_fd, POLLIN, 0});
    for (const Waiting& w : waiting) fds.push_back(pollfd{w.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 200) < 0) continue;
    const auto now = std::chrono::steady_clock::now();
    std::vector<Waiting> still;
    for (size_t i = 0; i < waiting.size(); ++i) {
      const int fd = waiting[i].fd;
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        if (now - waiting[i].since < std::chrono::seconds(1)) {
          still.push_back(waiting[i]);
        } else {
          ::close(fd);  // no request within the second
        }
        continue;
      }
      // Read (and ignore) the request head, bounded in size.
      char buf[2048];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      std::string resp;
      if (n >= 4 && std::memcmp(buf, "GET ", 4) == 0) {
        const std::string body = comm->metrics().Render(comm->rank());
        resp = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body;
      } else if (n > 0) {
        resp = "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      }
      if (!resp.empty()) (void)::send(fd, resp.data(), resp.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
    }
    waiting.swap(still);
    if ((fds[0].revents & POLLIN) != 0) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (waiting.size() >= kMaxWaiting) {
          ::close(waiting.front().fd);
          waiting.erase(waiting.begin());
        }
        waiting.push_back(Waiting{fd, now});
      }
    }
  }
  for (const Waiting& w : waiting) ::close(w.fd);
}
std::atomic<gyre::daemon::ClientServer*> g_server{nullptr};

// Only atomic stores: a lock taken here could be the one the interrupted thread holds.
void OnSignal(int signal_number) {
  g_stop_signal = signal_number;
  g_stop = true;
  if (gyre::daemon::ClientServer* server = g_server.load()) server->RequestStop();
}

int Fail(const std::string& prefix, const gyre::Status& s) {
  LOG(ERROR) << prefix << s.ToString();
  std::cerr << prefix << "gyred: " << s.ToString() << std::endl;
  return 1;
}

// "SIGTERM" for the stop signals this daemon handles.
std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal " + std::to_string(signal_number);
  }
}

// The flags whose mistakes would otherwise surface only after this rank joined the job: a
// rank that fails then leaves its slot claimed in the store, so the next run of the same job
// id fails too, and a bad timeout fails every call at once (Seconds() turns NaN into zero).
gyre::Status CheckFlags() {
  using gyre::InvalidArgumentError;
  if (FLAGS_run != "serve" && FLAGS_run != "selftest" && FLAGS_run != "main" &&
      FLAGS_run != "bench") {
    return InvalidArgumentError("--run '" + FLAGS_run +
                                "' is not one of serve, selftest, main, bench");
  }
  // The ranges are gyrerun's, which passes these flags on.
  const std::string bad = gyre::FirstBadSecondsFlag({
      {"--timeout", FLAGS_timeout, 0.001, 1e9, "from 0.001 to 1e9 seconds"},
      {"--rendezvous_timeout", FLAGS_rendezvous_timeout, 0.001, 1e9, "from 0.001 to 1e9 seconds"},
      {"--linger_after_failure", FLAGS_linger_after_failure, 0, 1e6, "from 0 to 1e6 seconds"},
  });
  if (!bad.empty()) return InvalidArgumentError(bad);
  if (FLAGS_segment_bytes < 0) {
    return InvalidArgumentError("--segment_bytes " + std::to_string(FLAGS_segment_bytes) +
                                " must be 0 (no segments) or more");
  }
  if (FLAGS_timing_runs < 5) {
    return InvalidArgumentError("--timing_runs " + std::to_string(FLAGS_timing_runs) +
                                " must be at least 5 (a median of fewer says little)");
  }
  // The bench holds an input and an output buffer of the largest size, and the transport
  // scratch beside them: asked past the host's memory it was killed by the OOM killer.
  const int64_t memory = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) *
                         static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  const int64_t most = std::max<int64_t>(4, memory / 4);
  if (FLAGS_bench_max_bytes < 4 || FLAGS_bench_max_bytes > most) {
    return InvalidArgumentError("--bench_max_bytes " + std::to_string(FLAGS_bench_max_bytes) +
                                " must be from 4 to " + std::to_string(most) +
                                " (a quarter of this host's memory)");
  }
  if (FLAGS_metrics_port < -1 || FLAGS_metrics_port > 65535) {
    return InvalidArgumentError("--metrics_port " + std::to_string(FLAGS_metrics_port) +
                                " is not in 0..65535 (or -1: off)");
  }
  // The report is written at the end, after the whole workload: a path it cannot go to is
  // found out now. Nothing is opened (a FIFO would block, and serve mode writes no report):
  // the path must not be a directory, and its folder must be one this process can write in.
  if (!FLAGS_report_file.empty() && FLAGS_run != "serve") {
    struct stat st {};
    if (::stat(FLAGS_report_file.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        return InvalidArgumentError("--report_file " + FLAGS_report_file + " is a directory");
      }
    } else {
      const size_t slash = FLAGS_report_file.rfind('/');
      const std::string folder = slash == std::string::npos ? "."
                                 : slash == 0               ? "/"
                                                            : FLAGS_report_file.substr(0, slash);
      if (::access(folder.c_str(), W_OK | X_OK) != 0) {
        return InvalidArgumentError("--report_file " + FLAGS_report_file +
                                    " cannot be created: " + folder + ": " + std::strerror(errno));
      }
    }
  }
  // The communicator appends to the trace file and drops the trace quietly if it cannot:
  // a trace the user asked for is checked here, where the failure can still be said.
  if (!FLAGS_trace_jsonl.empty()) {
    gyre::StatusOr<std::FILE*> trace = gyre::OpenForAppend(FLAGS_trace_jsonl);
    if (!trace.ok()) return InvalidArgumentError("--trace_jsonl " + trace.status().message());
    std::fclose(*trace);
  }
  return gyre::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(
      &argc, &argv,
      "gyred: one rank of a gyre job.\n"
      "  gyred --rank 0 --world_size 4 --store file:///tmp/job --job_id J --run main\n"
      "Usually started by gyrerun.");
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  using namespace gyre;
  // -1 is "from the environment"; any other negative value was taken as that too, and the
  // error then said the rank could not be told.
  if (FLAGS_rank < -1) {
    return Fail("", InvalidArgumentError("--rank " + std::to_string(FLAGS_rank) +
                                         " must be 0 or more (or unset: from the environment)"));
  }
  if (FLAGS_world_size < -1 || FLAGS_world_size == 0) {
    return Fail("", InvalidArgumentError("--world_size " + std::to_string(FLAGS_world_size) +
                                         " must be 1 or more (or unset: from the environment)"));
  }
  // Given but empty (a variable that expanded to nothing, say) was taken for not given, and
  // the rank joined job "default".
  if (FLAGS_job_id.empty() && !gflags::GetCommandLineFlagInfoOrDie("job_id").is_default) {
    return Fail("", InvalidArgumentError("--job_id is empty (leave it out to take the job id "
                                         "from the environment)"));
  }
  job::IdentityOverrides o;
  if (FLAGS_rank >= 0) o.rank = FLAGS_rank;
  if (FLAGS_world_size >= 0) o.world_size = FLAGS_world_size;
  if (!FLAGS_store.empty()) o.store_url = FLAGS_store;
  if (!FLAGS_job_id.empty()) o.job_id = FLAGS_job_id;
  if (!FLAGS_secret_file.empty()) o.secret_file = FLAGS_secret_file;
  if (!FLAGS_ifaces.empty()) o.ifaces = FLAGS_ifaces;
  if (FLAGS_allow_loopback) o.allow_loopback = true;
  if (!FLAGS_host_name.empty()) o.host = FLAGS_host_name;
  auto id = job::ResolveIdentity(o, job::ProcessEnvironment());
  if (!id.ok()) return Fail("", id.status());
  const std::string prefix = "[rank " + std::to_string(id->rank) + "] ";
  if (Status flags = CheckFlags(); !flags.ok()) return Fail(prefix, flags);
  // A flight recorder that cannot be written would be found out only when it is needed most,
  // after a failure: check the folder now.
  if (!FLAGS_flight_dir.empty()) {
    struct stat st {};
    if (::stat(FLAGS_flight_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return Fail(prefix, gyre::InvalidArgumentError("--flight_dir " + FLAGS_flight_dir +
                                                     " is not a folder"));
    }
    if (::access(FLAGS_flight_dir.c_str(), W_OK | X_OK) != 0) {
      return Fail(prefix,
                  gyre::InvalidArgumentError("--flight_dir " + FLAGS_flight_dir +
                                             " is not a writable folder: " + std::strerror(errno)));
    }
  }
  LOG(INFO) << prefix << "rank " << id->rank << " of " << id->world_size << ", job " << id->job_id
            << ", store " << id->store_url << " (identity from " << id->source << ")";
  // Serve mode: the client socket's path, checked now so that a path this rank cannot take
  // (a file that is not a socket, another daemon's live socket) fails it before it joins.
  std::string socket_path = FLAGS_socket;
  if (FLAGS_run == "serve") {
    if (socket_path.empty()) {
      if (const char* s = std::getenv("GYRE_SOCKET")) socket_path = s;
    }
    if (socket_path.empty()) {
      return Fail(prefix, InvalidArgumentError("serve mode needs --socket or GYRE_SOCKET"));
    }
    if (Status usable = ipc::CheckUnixSocketPath(socket_path); !usable.ok()) {
      return Fail(prefix, usable);
    }
  }

  job::JoinOptions jo;
  jo.identity = *id;
  if (!id->secret_file.empty()) {
    auto secret = auth::LoadSecretFile(id->secret_file);
    if (!secret.ok()) return Fail(prefix, secret.status());
    jo.secret = std::move(*secret);
  }
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
  jo.comm.tune = FLAGS_tune;
  jo.comm.trace_jsonl = FLAGS_trace_jsonl;
  jo.comm.calibration_file = FLAGS_calibration;
  if (!FLAGS_calibration.empty()) {
    auto model = gyre::algo::ReadMachineModel(FLAGS_calibration);  // fail now, not per call
    if (!model.ok()) return Fail(prefix, model.status());
  }
  jo.flight_dir = FLAGS_flight_dir;
  // Caught from the rendezvous on: a rank stopped while it waits there for the others gives
  // its slot back, where the default action left it claimed and the next run under the same
  // job id was refused. Before, the default action ends it, holding nothing in the store.
  jo.before_rendezvous = [] {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  };
  jo.stop_requested = [] { return g_stop.load(); };
  auto joined = job::JoinJob(jo);
  if (!joined.ok()) {
    if (g_stop) {
      const std::string how = "gyred: stopped by " + SignalName(g_stop_signal) +
                              " before it joined job " + id->job_id + ": " +
                              joined.status().message();
      LOG(INFO) << prefix << how;
      std::cerr << prefix << how << std::endl;
      return 128 + g_stop_signal;
    }
    return Fail(prefix, joined.status());
  }
  LOG(INFO) << prefix << "joined as pid " << getpid() << ", listening for peers on "
            << joined->address;
  signal(SIGPIPE, SIG_IGN);

  Communicator& comm = *joined->comm;
  struct sigaction usr1 {};
  usr1.sa_handler = OnUsr1;
  sigaction(SIGUSR1, &usr1, nullptr);
  // SIGUSR1 dumps the flight recorder without disturbing the rank.
  const std::string who = "rank " + std::to_string(comm.rank()) + "'s gyred";
  std::thread dumper;
  Status dumper_started =
      StartThread(&dumper, who, "dumping the flight recorder on SIGUSR1", [&comm, prefix] {
        while (true) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          if (!g_dump.exchange(false)) continue;
          if (FLAGS_flight_dir.empty()) {
            std::cerr << comm.recorder()->DumpJson(comm.rank()) << std::endl;
            continue;
          }
          auto path = job::WriteFlightRecord(&comm, FLAGS_flight_dir);
          LOG(INFO) << prefix << "flight recorder "
                    << (path.ok() ? "written to " + *path : path.status().ToString());
        }
      });
  if (!dumper_started.ok()) return Fail(prefix, dumper_started);
  dumper.detach();
  if (FLAGS_metrics_port >= 0) {
    std::string bound;
    auto fd = ipc::ListenTcp(FLAGS_metrics_host, FLAGS_metrics_port, &bound);
    if (!fd.ok()) return Fail(prefix, fd.status());
    LOG(INFO) << prefix << "metrics on http://" << bound << "/metrics";
    std::thread metrics;
    Status metrics_started = StartThread(&metrics, who, "serving metrics",
                                         [fd = *fd, &comm] { ServeMetrics(fd, &comm); });
    if (!metrics_started.ok()) return Fail(prefix, metrics_started);
    metrics.detach();
  }
  // Once every rank is known to have joined, this rank's records leave the store, so that the
  // job id can be used again there (a hand-started job run twice against one folder).
  auto leave_store = [&] { job::LeaveJobOrWarn(*joined, prefix); };
  if (FLAGS_run == "serve") {
    daemon::ClientServer server(&comm, id->job_id, prefix);
    server.SetSecret(jo.secret);
    server.OnProgram([control = joined->control.get()](int64_t pid) {
      if (control != nullptr) control->SetProgramPid(pid);
    });
    Status ls = server.Listen(socket_path);
    if (!ls.ok()) return Fail(prefix, ls);
    g_server = &server;
    if (g_stop) server.RequestStop();  // a signal while it joined, before the server was there
    server.Serve(FLAGS_exit_with_client);
    g_server = nullptr;
    const gyre::OpSnapshot at_exit = comm.monitor()->Snapshot();
    const bool own_call_failed = at_exit.LastCallFailed();
    // Not after a call of its own failed: its program then left because of that failure, and
    // the others, still finding out who caused it, must not take this rank for the cause
    // (the linger below answers them instead).
    if (const auto gone = server.departure(); gone && !g_stop && !own_call_failed) {
      // Before the peer connections close: a rank that then finds this one gone names the
      // program and how it went, not this daemon's pid.
      PeerDeparture told_them;
      told_them.program_pid = gone->program_pid;
      told_them.how = gone->how;
      told_them.last_completed_seq = at_exit.last_completed_seq;
      told_them.on_purpose = gone->on_purpose;
      comm.recorder()->Record(gone->on_purpose ? "program_left" : "program_gone",
                              told_them.last_completed_seq,
                              "pid " + std::to_string(gone->program_pid) + ": " + gone->how);
      const int told = job::TellDeparture(*joined->directory, comm.rank(), told_them,
                                          job::QueryTimeoutFor(jo.comm.timeout));
      (gone->on_purpose ? LOG(INFO) : LOG(WARNING))
          << prefix << "its program (pid " << gone->program_pid << ") "
          << (gone->on_purpose ? "left" : "went away")
          << " after seq=" << told_them.last_completed_seq << "; told " << told << " of "
          << comm.size() - 1 << " other ranks";
    }
    if (!g_stop && own_call_failed) {
      // The others may still be composing their verdict on this failure: a rank that
      // vanished now would look dead to them and be named instead of the real cause.
      LOG(INFO) << prefix << "client left after seq=" << at_exit.failed_seq
                << " failed; answering control queries for " << FLAGS_linger_after_failure
                << " s more";
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(FLAGS_linger_after_failure);
      while (!g_stop && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    // The program's Close met every rank, and nothing failed since.
    if (server.program_closed() && !g_stop && !own_call_failed) leave_store();
    LOG(INFO) << prefix << "served " << server.calls_served() << " calls; exiting"
              << (g_stop ? " on a signal" : "");
    // Close the peer connections first so the other ranks see this one leave at once, then
    // exit without waiting for a client thread that may be inside a collective.
    comm.transport()->Shutdown();
    std::fflush(nullptr);
    ::_exit(g_stop ? 128 + (g_stop_signal != 0 ? g_stop_signal.load() : SIGTERM) : 0);
  }
  // CheckFlags allowed only serve and these.
  std::ostringstream report;
  daemon::WorkloadOptions wo;
  wo.timing_runs = FLAGS_timing_runs;
  wo.stop = &g_stop;
  daemon::FirstFailure failure;
  const bool ok = FLAGS_run == "main" ? daemon::RunMainJob(comm, report, wo, &failure)
                  : FLAGS_run == "bench"
                      ? daemon::RunBench(comm, report, FLAGS_bench_max_bytes, wo, &failure)
                      : daemon::RunSelftest(comm, report, wo, &failure);
  // A workload that finished before the signal counts as finished.
  const int stop_signal = !ok && g_stop ? g_stop_signal.load() : 0;
  if (stop_signal != 0 && comm.rank() == 0) {
    report << "--run " << FLAGS_run << ": stopped by " << SignalName(stop_signal)
           << " before it finished\n";
  }
  if (comm.rank() == 0) {
    if (!FLAGS_report_file.empty()) {
      errno = 0;
      std::ofstream f(FLAGS_report_file);
      f << report.str();
      f.flush();
      if (!f) {
        return Fail(prefix,
                    ResourceExhaustedError("cannot write the report to " + FLAGS_report_file +
                                           ": " + std::strerror(errno != 0 ? errno : EIO)));
      }
    } else {
      std::cout << report.str();
      if (Status written = FlushStdout(); !written.ok()) return Fail(prefix, written);
    }
  }
  if (stop_signal != 0) {
    LOG(INFO) << prefix << "--run " << FLAGS_run << " stopped by " << SignalName(stop_signal);
    std::cerr << prefix << "gyred: --run " << FLAGS_run << " stopped by " << SignalName(stop_signal)
              << std::endl;
    // As in serve mode: the other ranks see this one leave at once, and no call in flight on
    // another thread is waited for.
    comm.transport()->Shutdown();
    std::fflush(nullptr);
    ::_exit(128 + stop_signal);
  }
  if (!ok) {
    // Every failing rank says why, not only rank 0 in its report.
    const std::string why =
        failure.empty() ? "every call here succeeded and its results were right; a check failed "
                          "on another rank (rank 0's report has the table)"
                        : "first failure on this rank: " + failure.text();
    LOG(ERROR) << prefix << "--run " << FLAGS_run << " failed: " << why;
    std::cerr << prefix << "gyred: --run " << FLAGS_run << " failed: " << why << std::endl;
    return 1;
  }
  // Every workload that succeeds has finished an allreduce here, which needed every rank's data.
  leave_store();
  return 0;
}
