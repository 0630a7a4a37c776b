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
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/auth/secret.h"
#include "core/base/clock.h"
#include "core/job/bootstrap.h"
#include "core/job/control.h"
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
DEFINE_string(run, "main",
              "without a program: the gyred workload, 'main', 'selftest' or "
              "'bench'");
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
DEFINE_bool(pin, false, "pin rank r's processes (daemon and program) to CPU r mod nproc");
DEFINE_double(hang_timeout, 0,
              "if no rank makes progress for this many seconds, print every "
              "rank's state, save the flight recorders and stop the job "
              "(0 = off)");
DEFINE_string(secret_file, "",
              "the job's secret (hex, mode 0600), e.g. shared with a gyre-store server or with "
              "ranks on other hosts (default: a new random secret in the run folder)");

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

// After a failure: what each rank's flight recorder says it reached, side by side.
void PrintMergedView(const std::string& run_dir, int n) {
  const std::regex event(
      R"re(\{"t_us": (\d+), "kind": "([a-z_]+)", "seq": (\d+), "detail": "((?:[^"\\]|\\.)*)"\})re");
  std::ostringstream view;
  std::string verdict;  // the first verdict any rank computed
  int found = 0;
  for (int r = 0; r < n; ++r) {
    std::ifstream f(run_dir + "/flight-rank" + std::to_string(r) + ".json");
    if (!f) continue;
    std::stringstream buf;
    buf << f.rdbuf();
    const std::string text = buf.str();
    std::string started, ended;
    for (std::sregex_iterator it(text.begin(), text.end(), event), end; it != end; ++it) {
      const std::string kind = (*it)[2];
      if (kind == "verdict" && verdict.empty()) verdict = (*it)[4];
      if (kind == "op_start") started = (*it)[4];
      if (kind == "op_end" || kind == "verdict" || kind == "abort_received") ended = (*it)[4];
    }
    ++found;
    if (ended.size() > 220) ended = ended.substr(0, 217) + "...";
    view << "  rank " << r << ": last started " << (started.empty() ? "nothing" : started)
         << "\n           ended: " << (ended.empty() ? "-" : ended) << "\n";
  }
  if (found == 0) return;
  if (!verdict.empty()) {
    // The collective's root cause, beside the process-level one in the summary above.
    const size_t cut = verdict.find(" [rank ");
    std::cerr << "gyrerun: verdict: " << verdict.substr(0, cut) << "\n";
  }
  std::cerr << "gyrerun: flight recorders of " << found << " of " << n
            << " ranks (where each rank was when the job failed):\n"
            << view.str();
}

// Watches the job over the ranks' control endpoints; on a hang, reports and stops the job
// (by sending gyrerun itself SIGTERM, which the supervisor turns into an orderly stop).
void WatchForHangs(const std::string& store_url, const std::string& job_id, int n,
                   const std::string& run_dir, gyre::auth::Credentials credentials,
                   std::atomic<bool>* done) {
  using namespace gyre;
  Duration limit = Seconds(FLAGS_hang_timeout);
  std::vector<std::string> addresses;
  auto store =
      store::OpenStore(store_url, Deadline::After(*SteadyClock::Get(), Seconds(10)), credentials);
  if (!store.ok()) return;
  while (!*done) {
    std::this_thread::sleep_for(Millis(500));
    if (addresses.size() < static_cast<size_t>(n)) {
      addresses.clear();
      for (int r = 0; r < n; ++r) {
        auto v = (*store)->TryGet(job::ControlKey(job_id, r),
                                  Deadline::After(*SteadyClock::Get(), Seconds(2)));
        if (!v.ok() || !v->has_value()) break;
        addresses.push_back(**v);
      }
      if (addresses.size() < static_cast<size_t>(n)) continue;
    }
    proto::ControlRequest q;
    q.mutable_status();
    auto results = job::QueryAll(addresses, q, Seconds(1), credentials);
    bool any_in_op = false, all_stuck = true;
    for (const auto& r : results) {
      if (r.reach != job::Reach::kAnswered) continue;  // silent ranks cannot progress
      const auto& st = r.response.state();
      // An idle rank while others wait inside a collective is the hang itself (it never
      // called); only ranks inside an operation must be stuck.
      if (!st.in_op()) continue;
      any_in_op = true;
      if (st.seconds_since_progress() < std::chrono::duration<double>(limit).count()) {
        all_stuck = false;
      }
    }
    if (!any_in_op || !all_stuck || *done) continue;
    std::ostringstream os;
    os << "gyrerun: no rank made progress for " << FLAGS_hang_timeout
       << " s (--hang_timeout); stopping the job. State of every rank:\n";
    for (int r = 0; r < n; ++r) {
      const auto& res = results[r];
      if (res.reach != job::Reach::kAnswered) {
        os << "  rank " << r << ": "
           << (res.reach == job::Reach::kSilent ? "alive but not answering (stopped or frozen)"
                                                : "not reachable: " + res.error)
           << "\n";
        continue;
      }
      const auto& st = res.response.state();
      if (!st.in_op()) {
        os << "  rank " << r << ": idle, last completed seq=" << st.last_completed_seq()
           << " (not inside the operation the others wait in)\n";
        continue;
      }
      os << "  rank " << r << ": " << st.op_name() << ", step " << st.steps_done() << "/"
         << st.steps_total() << ", waiting on "
         << (st.waiting_on() >= 0 ? "rank " + std::to_string(st.waiting_on()) : "nobody")
         << ", no progress for " << st.seconds_since_progress() << " s\n";
    }
    proto::ControlRequest d;
    d.mutable_dump();
    auto dumps = job::QueryAll(addresses, d, Seconds(1), credentials);
    for (int r = 0; r < n; ++r) {
      if (dumps[r].reach != job::Reach::kAnswered) continue;
      std::ofstream f(run_dir + "/flight-rank" + std::to_string(r) + ".json");
      f << dumps[r].response.dump_json() << "\n";
    }
    std::cerr << os.str() << std::flush;
    ::kill(::getpid(), SIGTERM);
    return;
  }
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
  if (FLAGS_run != "main" && FLAGS_run != "selftest" && FLAGS_run != "bench") {
    return Usage("--run must be 'main', 'selftest' or 'bench', not '" + FLAGS_run + "'");
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

  // Every connection of the job proves this secret. The ranks get it as a file only this
  // user can read; its path (never its content) goes into their environment.
  std::string secret_file = FLAGS_secret_file;
  const bool own_secret_file = secret_file.empty();
  auth::Secret secret;
  if (own_secret_file) {
    auto generated = auth::Secret::Generate();
    if (!generated.ok()) {
      std::cerr << "gyrerun: cannot make the job secret: " << generated.status() << "\n";
      return 1;
    }
    secret = std::move(*generated);
    secret_file = run_dir + "/secret";
    ::unlink(secret_file.c_str());  // left by an earlier run in a reused --run_dir
    Status written = auth::WriteSecretFile(secret_file, secret);
    if (!written.ok()) {
      std::cerr << "gyrerun: " << written << "\n";
      return 1;
    }
  } else {
    auto loaded = auth::LoadSecretFile(secret_file);
    if (!loaded.ok()) {
      std::cerr << "gyrerun: " << loaded.status() << "\n";
      return 1;
    }
    secret = std::move(*loaded);
  }

  std::unique_ptr<store::TcpStoreServer> store_server;
  std::string store_url;
  if (FLAGS_store == "file") {
    store_url = "file://" + run_dir + "/store";
  } else if (FLAGS_store == "tcp") {
    store::TcpStoreServer::Options store_options;
    store_options.secret = secret;
    store_options.job_id = job_id;
    auto server = store::TcpStoreServer::Start("127.0.0.1", 0, store_options);
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
        {"GYRE_SECRET_FILE", secret_file},
        {"GYRE_TIMEOUT_MS", std::to_string(static_cast<int64_t>(FLAGS_timeout * 1000))},
        {"GYRE_FLIGHT_DIR", run_dir}};
  };
  auto gyred_argv = [&](const std::string& run) {
    std::vector<std::string> a = {
        gyred, "--run=" + run, "--timeout=" + std::to_string(FLAGS_timeout),
        "--rendezvous_timeout=" + std::to_string(FLAGS_rendezvous_timeout),
        "--segment_bytes=" + std::to_string(FLAGS_segment_bytes)};
    if (FLAGS_deterministic) a.push_back("--deterministic");
    a.push_back("--flight_dir=" + run_dir);
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
      p.env = {{"GYRE_SOCKET", socket},          {"GYRE_MODE", "daemon"},
               {"GYRE_RANK", std::to_string(r)}, {"GYRE_WORLD_SIZE", std::to_string(n)},
               {"GYRE_JOB_ID", job_id},          {"GYRE_SECRET_FILE", secret_file}};
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

  if (FLAGS_pin) {
    const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    for (auto& spec : specs) {
      std::vector<std::string> wrapped = {"taskset", "-c", std::to_string(spec.rank % cpus)};
      wrapped.insert(wrapped.end(), spec.argv.begin(), spec.argv.end());
      spec.argv = std::move(wrapped);
    }
  }

  launcher::SupervisorOptions options;
  options.grace_period = Seconds(FLAGS_grace_period);
  options.tail_lines = static_cast<size_t>(std::max(0, FLAGS_tail_lines));
  if (FLAGS_job_timeout > 0) {
    options.job_deadline = Deadline::After(*SteadyClock::Get(), Seconds(FLAGS_job_timeout));
  }
  std::cerr << "gyrerun: job " << job_id << ", " << n << " ranks, store " << store_url
            << (program.empty() ? ", workload " + FLAGS_run : ", mode " + FLAGS_mode) << "\n"
            << "gyrerun: inspect it with: gyrectl status --store " << store_url << " --job_id "
            << job_id << "\n";
  launcher::Supervisor supervisor(options);
  Status st = supervisor.Start(std::move(specs));
  if (!st.ok()) {
    std::cerr << "gyrerun: cannot start the job: " << st << "\n";
    return 1;
  }
  std::atomic<bool> done{false};
  std::thread watcher;
  if (FLAGS_hang_timeout > 0) {
    auth::Credentials credentials;
    credentials.secret = secret;
    credentials.job_id = job_id;
    watcher = std::thread(WatchForHangs, store_url, job_id, n, run_dir, credentials, &done);
  }
  const int code = supervisor.Wait();
  done = true;
  if (watcher.joinable()) watcher.join();
  if (code != 0) PrintMergedView(run_dir, n);
  if (program.empty()) {
    std::ifstream report(report_file);
    if (report) std::cout << report.rdbuf() << std::flush;
  }
  if (store_server) store_server->Stop();
  if (own_secret_file) ::unlink(secret_file.c_str());
  if (!FLAGS_keep_run_dir && FLAGS_run_dir.empty()) {
    // Only the folder gyrerun created; it holds the store, sockets and the report.
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
  }
  return code;
}
