// gyrerun: starts a gyre job on this host and supervises it.
//
//   gyrerun -n 4                         the main job: N gyred ranks verify every
//                                        collective and print counters and timings
//   gyrerun -n 4 --run selftest          only the verification table
//   gyrerun -n 4 -- ./my_program args    N daemons plus one program per rank, each
//                                        connected to its daemon (GYRE_SOCKET)
//   gyrerun -n 4 --mode embedded -- ./p  N programs, each joining the job itself
//
// It creates the job's store (a folder, or a TCP store server inside gyrerun), a job id and a
// private run folder, prefixes every output line with its rank, and when a process fails it
// stops the rest and prints which rank failed and how. Exit status: 0, or the first failed
// process's exit code, or 128+signal (see launcher/supervisor.h).
#include <gflags/gflags.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/store/tcp_store_server.h"
#include "launcher/supervisor.h"

DEFINE_int32(n, 0, "number of ranks");
DEFINE_int32(np, 0, "same as -n");
DEFINE_string(store, "file",
              "rendezvous store: 'file' (a folder in the run folder), 'tcp' (a "
              "TCP store served by gyrerun on 127.0.0.1), or a URL file:///dir "
              "or tcp://host:port");
DEFINE_string(mode, "daemon",
              "with a program: 'daemon' (program talks to its rank's gyred) or "
              "'embedded' (program joins the job itself)");
DEFINE_string(run, "main", "without a program: the gyred workload, 'main' or 'selftest'");
DEFINE_double(timeout, 30, "progress timeout in seconds for every rank");
DEFINE_double(rendezvous_timeout, 60, "seconds for all ranks to meet");
DEFINE_double(grace_period, 3, "seconds between SIGTERM and SIGKILL when stopping the job");
DEFINE_double(job_timeout, 0, "stop the whole job after this many seconds (exit 124); 0 = never");
DEFINE_string(job_id, "", "job id (default: a random one)");
DEFINE_string(run_dir, "", "folder for the store, sockets and report (default: a new temp dir)");
DEFINE_bool(keep_run_dir, false, "keep the run folder afterwards");
DEFINE_int32(timing_runs, 7, "main job: runs per timed cell");
DEFINE_bool(deterministic, false, "canonical reduction order for every reducing call");
DEFINE_int64(segment_bytes, 0, "pipelining segment size passed to every rank");
DEFINE_string(gyred, "", "path of gyred (default: next to gyrerun)");
DEFINE_int32(tail_lines, 20, "stderr lines per process in the failure summary");

namespace {

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string RandomJobId() {
  std::random_device rd;
  std::ostringstream os;
  os << "gyre-" << std::hex << rd() << rd();
  return os.str();
}

int Usage(const std::string& why) {
  std::cerr << "gyrerun: " << why << "\n"
            << "usage: gyrerun -n N [--store file|tcp|URL] [--timeout S] [-- program args...]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "gyrerun -n N [flags] [-- program args...]\n"
      "Without a program, runs gyre's main job on N local ranks.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  using namespace gyre;
  const int n = FLAGS_n > 0 ? FLAGS_n : FLAGS_np;
  if (n < 1) return Usage("give the number of ranks with -n N (N >= 1)");
  if (n > 1024) return Usage("-n " + std::to_string(n) + " is more than 1024 local ranks");
  if (FLAGS_mode != "daemon" && FLAGS_mode != "embedded") {
    return Usage("--mode must be 'daemon' or 'embedded', not '" + FLAGS_mode + "'");
  }
  if (FLAGS_run != "main" && FLAGS_run != "selftest") {
    return Usage("--run must be 'main' or 'selftest', not '" + FLAGS_run + "'");
  }
  std::vector<std::string> program(argv + 1, argv + argc);

  std::string run_dir = FLAGS_run_dir;
  if (run_dir.empty()) {
    char tmpl[] = "/tmp/gyrerun-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::cerr << "gyrerun: cannot create a run folder in /tmp: " << std::strerror(errno) << "\n";
      return 1;
    }
    run_dir = tmpl;
  }
  const std::string job_id = FLAGS_job_id.empty() ? RandomJobId() : FLAGS_job_id;
  const std::string gyred = FLAGS_gyred.empty() ? SelfDir() + "/gyred" : FLAGS_gyred;

  std::unique_ptr<store::TcpStoreServer> store_server;
  std::string store_url;
  if (FLAGS_store == "file") {
    store_url = "file://" + run_dir + "/store";
  } else if (FLAGS_store == "tcp") {
    auto server = store::TcpStoreServer::Start("127.0.0.1", 0);
    if (!server.ok()) {
      std::cerr << "gyrerun: cannot start the TCP store: " << server.status() << "\n";
      return 1;
    }
    store_server = std::move(*server);
    store_url = "tcp://" + store_server->address();
  } else if (FLAGS_store.rfind("file://", 0) == 0 || FLAGS_store.rfind("tcp://", 0) == 0) {
    store_url = FLAGS_store;
  } else {
    return Usage("--store must be file, tcp, file:///dir or tcp://host:port, not '" + FLAGS_store +
                 "'");
  }

  auto common_env = [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"GYRE_RANK", std::to_string(rank)},
        {"GYRE_WORLD_SIZE", std::to_string(n)},
        {"GYRE_LOCAL_RANK", std::to_string(rank)},
        {"GYRE_STORE", store_url},
        {"GYRE_JOB_ID", job_id},
        {"GYRE_TIMEOUT_MS", std::to_string(static_cast<int64_t>(FLAGS_timeout * 1000))}};
  };
  auto gyred_argv = [&](const std::string& run) {
    std::vector<std::string> a = {
        gyred, "--run=" + run, "--timeout=" + std::to_string(FLAGS_timeout),
        "--rendezvous_timeout=" + std::to_string(FLAGS_rendezvous_timeout),
        "--segment_bytes=" + std::to_string(FLAGS_segment_bytes)};
    if (FLAGS_deterministic) a.push_back("--deterministic");
    return a;
  };

  const std::string report_file = run_dir + "/report.txt";
  std::vector<launcher::ProcessSpec> specs;
  for (int r = 0; r < n; ++r) {
    if (program.empty()) {
      launcher::ProcessSpec s;
      s.rank = r;
      s.argv = gyred_argv(FLAGS_run);
      s.argv.push_back("--report_file=" + report_file);
      s.argv.push_back("--timing_runs=" + std::to_string(FLAGS_timing_runs));
      s.env = common_env(r);
      specs.push_back(std::move(s));
      continue;
    }
    if (FLAGS_mode == "daemon") {
      const std::string socket = run_dir + "/rank" + std::to_string(r) + ".sock";
      launcher::ProcessSpec d;
      d.rank = r;
      d.name = "rank " + std::to_string(r) + " gyred";
      d.argv = gyred_argv("serve");
      d.argv.push_back("--socket=" + socket);
      d.env = common_env(r);
      specs.push_back(std::move(d));
      launcher::ProcessSpec p;
      p.rank = r;
      p.argv = program;
      p.env = {{"GYRE_SOCKET", socket},
               {"GYRE_MODE", "daemon"},
               {"GYRE_RANK", std::to_string(r)},
               {"GYRE_WORLD_SIZE", std::to_string(n)},
               {"GYRE_JOB_ID", job_id}};
      specs.push_back(std::move(p));
    } else {
      launcher::ProcessSpec p;
      p.rank = r;
      p.argv = program;
      p.env = common_env(r);
      p.env.push_back({"GYRE_MODE", "embedded"});
      specs.push_back(std::move(p));
    }
  }

  launcher::SupervisorOptions options;
  options.grace_period = Seconds(FLAGS_grace_period);
  options.tail_lines = static_cast<size_t>(std::max(0, FLAGS_tail_lines));
  if (FLAGS_job_timeout > 0) {
    options.job_deadline = Deadline::After(*SteadyClock::Get(), Seconds(FLAGS_job_timeout));
  }
  std::cerr << "gyrerun: job " << job_id << ", " << n << " ranks, store " << store_url
            << (program.empty() ? ", workload " + FLAGS_run : ", mode " + FLAGS_mode) << "\n";
  launcher::Supervisor supervisor(options);
  Status st = supervisor.Start(std::move(specs));
  if (!st.ok()) {
    std::cerr << "gyrerun: cannot start the job: " << st << "\n";
    return 1;
  }
  const int code = supervisor.Wait();
  if (program.empty()) {
    std::ifstream report(report_file);
    if (report) std::cout << report.rdbuf() << std::flush;
  }
  if (store_server) store_server->Stop();
  if (!FLAGS_keep_run_dir && FLAGS_run_dir.empty()) {
    // Only the folder gyrerun created; it holds the store, sockets and the report.
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
  }
  return code;
}
