// gyrerun: starts a gyre job on this host and supervises it.
//
//   gyrerun -n 4                         the main job: N gyred ranks verify every
//                                        collective and print counters and timings
//   gyrerun -n 4 --run selftest          only the verification table
//   gyrerun -n 4 -- ./my_program args    N daemons plus one program per rank, each
//                                        connected to its daemon (GYRE_SOCKET)
//   gyrerun -n 4 --mode embedded -- ./p  N programs, each joining the job itself
//
// Across hosts (see docs/hosts.md):
//   gyrerun --hosts h0:4,h1:4 [--hostfile F] [--rsh ssh] -- ./p
//                                        fans out over a remote-execution command
//   gyrerun --nnodes 2 --node_rank K --nproc_per_node 4 --store tcp://h0:PORT
//           --secret_file S -- ./p       one gyrerun per host (node 0 serves the store)
//
// It creates the job's store (a folder, or a TCP store server inside gyrerun), a job id and a
// private run folder, prefixes every output line with its rank, and when a process fails it
// stops the rest and prints which rank failed and how. Exit status: 0, or the first failed
// process's exit code, or 128+signal (see launcher/supervisor.h).
#include <fcntl.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/auth/secret.h"
#include "core/base/clock.h"
#include "core/base/fd_limit.h"
#include "core/base/thread.h"
#include "core/base/tool_flags.h"
#include "core/ipc/ipc.h"
#include "core/job/address.h"
#include "core/job/bootstrap.h"
#include "core/job/control.h"
#include "core/job/identity.h"
#include "core/job/inquiry.h"
#include "core/store/rendezvous.h"
#include "core/store/tcp_store_server.h"
#include "launcher/flight_records.h"
#include "launcher/oom_kills.h"
#include "launcher/shell_words.h"
#include "launcher/signal_name.h"
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
DEFINE_double(settle_time, 1.5,
              "after the first rank fails, seconds to keep collecting the others' exits (their "
              "verdicts) before naming the root cause and stopping the rest (a process killed "
              "by a signal within it is preferred as the root cause over one that exited with "
              "an error); it ends early once no survivor is left to report");
DEFINE_double(job_timeout, 0, "stop the whole job after this many seconds (exit 124); 0 = never");
DEFINE_string(job_id, "", "job id (default: a random one)");
DEFINE_string(run_dir, "", "folder for the store, sockets and report (default: a new temp dir)");
DEFINE_bool(keep_run_dir, false, "keep the run folder afterwards");
DEFINE_int32(timing_runs, 7, "main job: runs per timed cell (at least 5)");
DEFINE_bool(deterministic, false,
            "canonical reduction order for every reducing call, daemon or embedded");
DEFINE_bool(tune, false,
            "online tuning of the automatic choice for every rank, daemon or embedded: the "
            "first calls of each size try the cost model's closest candidates, the fastest "
            "is kept");
DEFINE_int64(segment_bytes, 0,
             "pipelining segment size in bytes for every rank, daemon or embedded (0: none)");
DEFINE_string(gyred, "", "path of gyred (default: next to gyrerun)");
DEFINE_int32(tail_lines, 20, "stderr lines per process in the failure summary");
DEFINE_bool(pin, false, "pin rank r's processes (daemon and program) to CPU r mod nproc");
DEFINE_double(hang_timeout, 0,
              "if no rank makes progress for this many seconds, print every "
              "rank's state, save the flight recorders and stop the job "
              "(0 = off)");
DEFINE_string(hosts, "",
              "run the ranks on these hosts, 'host0:4,host1:4' (slots per host, default 1), "
              "numbered host-major; hosts other than localhost are reached with --rsh");
DEFINE_string(hostfile, "", "hosts one per line: 'host', 'host:4' or 'host slots=4' (# comments)");
DEFINE_string(rsh, "ssh",
              "how to run a command on another host: these words, then the host, then the "
              "command (e.g. 'ssh -o BatchMode=yes', or 'ip netns exec' for test hosts); split "
              "into words as a shell would, honouring '...', \"...\" and backslashes, without "
              "expanding anything ($VAR, ~ and * stay as written)");
DEFINE_int32(nnodes, 1, "multi-host: number of hosts, one gyrerun started on each");
DEFINE_int32(node_rank, 0, "multi-host: this host's index; node 0 serves the store");
DEFINE_int32(nproc_per_node, 0, "multi-host: ranks on this host");
DEFINE_string(host_name, "",
              "multi-host: this host's name in messages and for grouping ranks by host "
              "(default: GYRE_HOST, else the host name)");
DEFINE_string(ifaces, "",
              "interfaces whose addresses the ranks advertise, e.g. 'eth*,^docker*' (globs, "
              "'^' excludes); multi-host jobs default to every non-loopback interface");
DEFINE_bool(allow_loopback, false, "let a multi-host job use loopback addresses");
DEFINE_string(store_host, "",
              "address other hosts use to reach the TCP store this gyrerun serves "
              "(default: the first address on --ifaces)");
DEFINE_string(output_dir, "",
              "also write each process's output to files here, without the [rank R] prefix: "
              "rankR.stdout and rankR.stderr (rankR-gyred.* for a program's daemon), in "
              "attemptK/ folders with --max_restarts (K is GYRE_RESTART_COUNT, from 0); an "
              "earlier run's such files there are removed first");
DEFINE_int32(max_restarts, 0,
             "when a rank fails, stop the job and start every rank again, up "
             "to this many times (a fresh store each time; ranks see GYRE_RESTART_COUNT); for "
             "a job this gyrerun runs alone, on its own store");
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

// Marks in the job's store the ranks whose program exited 0 on its own (store::MarkExit), so
// that ranks still waiting for one at the rendezvous stop at once, naming it, where they
// waited out the rendezvous timeout (60 s by default) before. Opens the store at its first
// mark; a store it cannot reach costs at most about a second per mark, and the ranks then
// wait out their timeout as before.
class ExitMarker {
 public:
  ExitMarker(std::string store_url, std::string job_id, std::string launch_id,
             gyre::auth::Credentials credentials, std::string run_dir)
      : store_url_(std::move(store_url)),
        job_id_(std::move(job_id)),
        launch_id_(std::move(launch_id)),
        credentials_(std::move(credentials)),
        run_dir_(std::move(run_dir)) {}

  void Mark(int rank, const gyre::launcher::ProcessResult& r) {
    using namespace gyre;
    // A rank that held its slot left its note (job::JoinedNotePath): nobody waits for it at
    // the rendezvous, and a clean job's end costs no store writes.
    struct stat note {};
    if (::stat(job::JoinedNotePath(run_dir_, launch_id_, rank).c_str(), &note) == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    const Deadline deadline = Deadline::After(*SteadyClock::Get(), Seconds(1));
    if (!store_ && !unreachable_) {
      auto opened = store::OpenStore(store_url_, deadline, credentials_);
      if (opened.ok()) {
        store_ = std::move(*opened);
      } else {
        unreachable_ = true;
        LOG(WARNING) << "gyrerun: cannot mark rank exits in the store: " << opened.status();
      }
    }
    if (!store_) return;
    const Status marked = store::MarkExit(store_.get(), job_id_, launch_id_, rank,
                                          "its process (pid " + std::to_string(r.pid) +
                                              ") exited with status 0 after " +
                                              FormatDuration(r.run_time) + " (seen by gyrerun)",
                                          deadline);
    if (!marked.ok()) {
      LOG(WARNING) << "gyrerun: " << marked;
      return;
    }
    marked_.push_back(rank);
  }

  // Once every process of the run has ended: the marks go, so that a run that ended cleanly
  // leaves nothing in the store.
  void Clear() {
    using namespace gyre;
    std::lock_guard<std::mutex> lock(mu_);
    if (!store_ || marked_.empty()) return;
    const Status cleared = store::ClearExitMarks(store_.get(), job_id_, marked_,
                                                 Deadline::After(*SteadyClock::Get(), Seconds(2)));
    if (!cleared.ok()) LOG(WARNING) << "gyrerun: " << cleared;
    marked_.clear();
  }

 private:
  const std::string store_url_, job_id_, launch_id_;
  const gyre::auth::Credentials credentials_;
  const std::string run_dir_;
  std::mutex mu_;
  std::unique_ptr<gyre::store::Store> store_;
  bool unreachable_ = false;
  std::vector<int> marked_;
};

// The flight records a failed job left in its run folder, by rank, read once: the summary's
// blame and the merged view below both use them.
class RunRecords {
 public:
  // hosts[r]: rank r's host, when known (which side of a cut a rank is on).
  RunRecords(std::string run_dir, int n, std::vector<std::string> hosts)
      : run_dir_(std::move(run_dir)), n_(n), hosts_(std::move(hosts)) {}
  const std::vector<std::optional<std::vector<gyre::launcher::FlightEvent>>>& ByRank() {
    if (by_rank_.empty()) {
      for (int r = 0; r < n_; ++r)
        by_rank_.push_back(gyre::launcher::ReadFlightRecord(run_dir_, r));
    }
    return by_rank_;
  }
  // The rank the ranks' verdicts blame, or the two sides that blame each other.
  gyre::launcher::Blame Blame() {
    std::vector<std::vector<gyre::launcher::FlightEvent>> by_rank;
    for (const auto& events : ByRank())
      by_rank.push_back(events.value_or(std::vector<gyre::launcher::FlightEvent>()));
    return gyre::launcher::BlameOf(by_rank, n_, hosts_);
  }

 private:
  const std::string run_dir_;
  const int n_;
  const std::vector<std::string> hosts_;
  std::vector<std::optional<std::vector<gyre::launcher::FlightEvent>>> by_rank_;
};

// The ranks that claimed their rendezvous slot in the TCP store gyrerun serves, at any time
// since the attempt began: their records leave the store again once every rank has joined,
// so the store's own state at the end says nothing; the server tells of each write
// (TcpStoreServer::Options::on_write). A gyred exits 0 only after it joined, so one reached
// through --rsh whose slot was never claimed did not run: its "exit 0" is the remote shell's.
class SlotClaims {
 public:
  SlotClaims(const std::string& job_id, int n) : claimed_(static_cast<size_t>(n), false) {
    for (int r = 0; r < n; ++r) slots_.emplace(gyre::store::RendezvousSlotKey(job_id, r), r);
  }
  // On the store server's io thread.
  void OnWrite(const std::string& key) {
    const auto it = slots_.find(key);
    if (it == slots_.end()) return;
    std::lock_guard<std::mutex> lock(mu_);
    claimed_[static_cast<size_t>(it->second)] = true;
  }
  bool Claimed(int rank) const {
    std::lock_guard<std::mutex> lock(mu_);
    return rank >= 0 && static_cast<size_t>(rank) < claimed_.size() &&
           claimed_[static_cast<size_t>(rank)];
  }
  // For a new attempt, which meets afresh.
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    claimed_.assign(claimed_.size(), false);
  }

 private:
  std::unordered_map<std::string, int> slots_;  // written once, before the server starts
  mutable std::mutex mu_;
  std::vector<bool> claimed_;
};

// After a failure: what each rank's flight recorder says it reached, side by side.
void PrintMergedView(RunRecords& records, int n,
                     const std::vector<gyre::launcher::ProcessResult>& results) {
  std::ostringstream view;
  std::string verdict;                  // the first verdict any rank computed
  std::vector<std::string> by_rank(n);  // each rank's first verdict
  int found = 0;
  for (int r = 0; r < n; ++r) {
    const auto& events = records.ByRank()[static_cast<size_t>(r)];
    if (!events) continue;
    std::string started, ended;
    for (const gyre::launcher::FlightEvent& e : *events) {
      if (e.kind == "verdict" && verdict.empty()) verdict = e.detail;
      if (e.kind == "verdict" && by_rank[r].empty()) by_rank[r] = e.detail;
      if (e.kind == "op_start") {
        started = e.detail;
        ended.clear();  // what ended before belongs to an earlier operation
      }
      if (e.kind == "op_end" || e.kind == "verdict" || e.kind == "abort_received") {
        ended = e.detail;
      }
    }
    ++found;
    if (ended.size() > 220) ended = ended.substr(0, 217) + "...";
    view << "  rank " << r << ": last started " << (started.empty() ? "nothing" : started)
         << "\n           ended: "
         << (ended.empty() ? (started.empty() ? "-" : "not yet (inside it when recorded)") : ended)
         << "\n";
  }
  if (found == 0) return;
  auto without_own_view = [](const std::string& text) {
    return text.substr(0, text.find(" [rank "));
  };
  const gyre::launcher::Blame blame = records.Blame();
  if (blame.contradicted()) {
    // Either verdict alone would blame one side of a cut; each side's is shown, from its
    // lowest rank that wrote one.
    for (const std::vector<int>* side : {&blame.side_a, &blame.side_b}) {
      for (int r : *side) {
        if (r < 0 || r >= n || by_rank[r].empty()) continue;
        std::cerr << "gyrerun: verdict of rank " << r << ": " << without_own_view(by_rank[r])
                  << "\n";
        break;
      }
    }
  } else if (!verdict.empty()) {
    // The collective's root cause, beside the process-level one in the summary above; led by
    // the blamed rank's own exit when that is why it went.
    std::cerr << "gyrerun: verdict: "
              << gyre::launcher::VerdictLine(blame, without_own_view(verdict), results) << "\n";
  }
  std::cerr << "gyrerun: flight recorders of " << found << " of " << n
            << " ranks (where each rank was when the job failed):\n"
            << view.str();
}

// Watches the job over the ranks' control endpoints; on a hang, reports and stops the job
// (an orderly stop, exit 124 as for --job_timeout).
void WatchForHangs(const std::string& store_url, const std::string& job_id, int n,
                   const std::string& run_dir, gyre::auth::Credentials credentials,
                   gyre::launcher::Supervisor* supervisor, std::atomic<bool>* done) {
  using namespace gyre;
  Duration limit = Seconds(FLAGS_hang_timeout);
  std::vector<std::string> addresses;
  auto store =
      store::OpenStore(store_url, Deadline::After(*SteadyClock::Get(), Seconds(10)), credentials);
  if (!store.ok()) return;
  std::vector<TimePoint> silent_since(static_cast<size_t>(n));  // per rank, since it went silent
  while (!*done) {
    std::this_thread::sleep_for(Millis(500));
    if (addresses.size() < static_cast<size_t>(n)) {
      addresses.clear();
      std::vector<std::string> keys;
      for (int r = 0; r < n; ++r) keys.push_back(job::ControlKey(job_id, r));
      auto values = (*store)->TryGetMany(keys, Deadline::After(*SteadyClock::Get(), Seconds(2)));
      for (size_t r = 0; values.ok() && r < values->size() && (*values)[r].has_value(); ++r) {
        addresses.push_back(*(*values)[r]);
      }
      if (addresses.size() < static_cast<size_t>(n)) continue;
    }
    proto::ControlRequest q;
    q.mutable_status();
    auto results = job::QueryAll(addresses, q, Seconds(1), credentials);
    bool any_in_op = false, all_stuck = true;
    int silent_long = 0;
    const TimePoint now = SteadyClock::Get()->Now();
    // A job stopped by a Ctrl-Z of gyrerun (and this thread with it) made no progress while
    // it stood still, and has had only since it was continued to make some.
    const TimePoint continued = supervisor->LastContinued();
    const double since_continued_s =
        continued == TimePoint{} ? 1e18 : std::chrono::duration<double>(now - continued).count();
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      if (r.reach != job::Reach::kAnswered) {
        // A rank that does not answer makes no progress either: silent for the whole limit,
        // it counts as stuck; and every rank silent that long is a hang too (all stopped or
        // frozen), where no rank answers to say it is inside an operation.
        if (silent_since[i] == TimePoint{} || silent_since[i] < continued) silent_since[i] = now;
        if (now - silent_since[i] >= limit) {
          ++silent_long;
        } else {
          all_stuck = false;
        }
        continue;
      }
      silent_since[i] = TimePoint{};
      const auto& st = r.response.state();
      // An idle rank while others wait inside a collective is the hang itself (it never
      // called); only ranks inside an operation must be stuck. A rank blocked in a send or
      // receive of its own between collectives waits too (two ranks each receiving first);
      // its oldest message has waited since it was posted.
      const double limit_s = std::chrono::duration<double>(limit).count();
      if (st.in_op()) {
        any_in_op = true;
        if (std::min(st.seconds_since_progress(), since_continued_s) < limit_s) all_stuck = false;
      } else if (st.waiting_size() > 0) {
        any_in_op = true;
        if (std::min(st.waiting(0).seconds(), since_continued_s) < limit_s) all_stuck = false;
      }
    }
    if (silent_long == n) any_in_op = true;
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
      if (!st.in_op() && st.waiting_size() > 0) {
        os << "  rank " << r << ": blocked in " << st.waiting(0).name() << " for "
           << st.waiting(0).seconds() << " s";
        if (st.waiting_count() > 1) os << " (and " << st.waiting_count() - 1 << " more)";
        os << ", last completed seq=" << st.last_completed_seq() << "\n";
        continue;
      }
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
    supervisor->RequestStop(
        "no rank made progress for " + FormatDuration(limit) + " (--hang_timeout)",
        gyre::launcher::kExitJobDeadline);
    return;
  }
}

// Why a failed attempt is not started again (--max_restarts), or "" when it is. A restart is
// for a rank that failed, or a hang the watchdog stopped (--hang_timeout). Not for:
//   - a stop the user asked for: a signal to gyrerun (`stop_signal`), even one that came as
//     the attempt ended, or the end of the job's time (--job_timeout);
//   - what would fail alike every time: a program that could not be executed (exit 126 or
//     127 also counts: a `taskset` of --pin cannot say it otherwise), a daemon that exited
//     before it ever served;
//   - a job whose programs all succeeded, where only a daemon failed after them: running them
//     again would repeat what they did;
//   - a process that never exited, even to SIGKILL: it may still hold what the next attempt
//     needs.
std::string WhyNotRestart(int code, int stop_signal,
                          const std::vector<gyre::launcher::ProcessResult>& results,
                          const gyre::launcher::SupervisorOptions& options) {
  using gyre::launcher::ProcessResult;
  if (stop_signal != 0) return "gyrerun received " + gyre::launcher::SignalName(stop_signal);
  if (options.job_deadline.Expired(*gyre::SteadyClock::Get())) {
    return "the job's time ran out (--job_timeout)";
  }
  auto name = [](const ProcessResult& r) {
    return r.name.empty() ? "rank " + std::to_string(r.rank) : r.name;
  };
  bool has_program = false, programs_ok = true;
  for (const ProcessResult& r : results) {
    if (!r.finished()) {
      return name(r) + " (pid " + std::to_string(r.pid) +
             ") did not exit, even to SIGKILL, and may hold what the next attempt needs";
    }
    if (r.service) continue;
    has_program = true;
    if (r.signaled || r.exit_code != 0) programs_ok = false;
  }
  if (programs_ok && has_program && code != gyre::launcher::kExitJobDeadline) {
    return "every program exited 0 (only a daemon failed after them), and a restart would run "
           "them again";
  }
  for (const ProcessResult& r : results) {
    if (!r.root_cause) continue;
    if (!r.launch_error.empty()) {
      return name(r) + " could not be started (" + r.launch_error + "), as it would not be again";
    }
    if (r.exited && (r.exit_code == 126 || r.exit_code == 127)) {
      return name(r) + " exited with " + std::to_string(r.exit_code) +
             ", a command that could not be run, as it could not be again";
    }
    if (r.never_served) return name(r) + " exited before it ever served, as it would again";
    if (!r.exit_zero_refused.empty()) {
      return name(r) + " exited 0 " + r.exit_zero_refused + ", as it would again";
    }
    return "";
  }
  if (code == gyre::launcher::kExitJobDeadline) return "";  // the hang watchdog stopped it
  return "the job ended with exit status " + std::to_string(code) + " and no rank failed";
}

// The first stop signal (launcher::IsStopSignal) gyrerun received while no Supervisor held
// the signals: between the attempts of --max_restarts, where the default action would end
// gyrerun without removing its run folder and secret. A forwarded one (SIGUSR1, SIGUSR2)
// finds no rank running then, and is dropped rather than ending gyrerun.
volatile sig_atomic_t g_stop_signal = 0;
void RecordStopSignal(int sig) {
  if (g_stop_signal == 0 && gyre::launcher::IsStopSignal(sig)) g_stop_signal = sig;
}
void CatchStopSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    struct sigaction old {};
    // nohup's SIGHUP stays ignored.
    if (sig == SIGHUP && sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = RecordStopSignal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, nullptr);
  }
}

constexpr int kMaxRestarts = 1000000;

// The most ranks one gyrerun starts (each is a process with pipes this launcher reads).
constexpr int kMaxRanks = 1024;

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "h0:4,h1" or a hostfile's lines ("h0:4", "h0 slots=4", "h1").
gyre::StatusOr<std::vector<HostSlots>> ParseHosts(const std::string& list,
                                                  const std::string& hostfile) {
  // Each entry as "host" or "host:slots", and how an error quotes it: as the user wrote it
  // ("host 'a:2:3'", or "--hostfile F line 3: 'a:2 slots=3'"), never the joined form, which
  // is in no file.
  struct Item {
    std::string spec;
    std::string quoted;
    std::string where;  // without the entry: "--hosts entry 2", "--hostfile F line 3"
  };
  std::vector<Item> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    items.push_back({item, "host '" + gyre::Printable(item) + "'",
                     "--hosts entry " + std::to_string(items.size() + 1)});
  }
  if (!hostfile.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(hostfile, ec)) {
      return gyre::InvalidArgumentError("--hostfile " + hostfile + " is a directory");
    }
    std::ifstream f(hostfile);
    if (!f) return gyre::InvalidArgumentError("cannot read --hostfile " + hostfile);
    int number = 0;
    for (std::string line; std::getline(f, line);) {
      ++number;
      line = line.substr(0, line.find('#'));
      // Quoted as it stands in the file, without the comment and the blanks around it.
      const size_t first = line.find_first_not_of(" \t\r");
      const std::string written =
          first == std::string::npos
              ? ""
              : line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
      const std::string quoted = "--hostfile " + hostfile + " line " + std::to_string(number) +
                                 ": '" + gyre::Printable(written) + "'";
      std::stringstream words(line);
      std::string host, slots;
      if (!(words >> host)) continue;
      if (words >> slots) {
        if (slots.rfind("slots=", 0) != 0) {
          return gyre::InvalidArgumentError(quoted + " is not 'host slots=N'");
        }
        if (host.find(':') != std::string::npos) {
          return gyre::InvalidArgumentError(quoted +
                                            " gives the slots twice: want 'host slots=N' or "
                                            "'host:N'");
        }
        host += ":" + slots.substr(6);
      }
      // A max_slots=N may follow, as hostfiles often have (gyre places no more than the slots).
      for (std::string extra; words >> extra;) {
        if (extra.rfind("max_slots=", 0) != 0) {
          return gyre::InvalidArgumentError(quoted + " has more than 'host slots=N [max_slots=M]'");
        }
      }
      items.push_back({host, quoted, "--hostfile " + hostfile + " line " + std::to_string(number)});
    }
  }
  std::vector<HostSlots> out;
  for (const Item& item : items) {
    if (item.spec.empty()) continue;
    HostSlots h;
    const size_t colon = item.spec.rfind(':');
    h.host = item.spec.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string n = item.spec.substr(colon + 1);
      if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::atoi(n.c_str()) < 1 || std::atoi(n.c_str()) > kMaxRanks) {
        return gyre::InvalidArgumentError(item.quoted + ": slots must be a number from 1 to " +
                                          std::to_string(kMaxRanks));
      }
      h.slots = std::atoi(n.c_str());
    }
    if (h.host.empty()) return gyre::InvalidArgumentError(item.quoted + " has no name");
    // Said with its length and a prefix: the whole entry may be kilobytes long.
    if (h.host.size() > gyre::job::kMaxHostNameBytes) {
      return gyre::job::CheckHostName("the host name of " + item.where, h.host);
    }
    if (std::any_of(h.host.begin(), h.host.end(),
                    [](unsigned char c) { return c <= 0x20 || c >= 0x7f; })) {
      return gyre::InvalidArgumentError(item.quoted +
                                        " is not a host name (it holds bytes outside "
                                        "printable ASCII)");
    }
    // "localhost:2:3" was taken as a host named "localhost:2", which only ssh then refused.
    if (h.host.find(':') != std::string::npos) {
      return gyre::InvalidArgumentError(item.quoted + ": want 'host' or 'host:slots'");
    }
    out.push_back(h);
  }
  return out;
}

bool IsLocalHost(const std::string& host) {
  return host.empty() || host == "localhost" || host == "127.0.0.1";
}

// Quoting for a remote shell: ssh joins its arguments into one command line.
std::string ShellQuote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%^") == std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// After a failure across hosts: a host none of whose processes survived on its own is named
// as a whole (a machine lost, or its ranks killed together), not rank by rank.
// Only hosts reached through --rsh: a local rank exiting 255 is that program's own code, and
// this host is not lost while gyrerun runs on it.
void PrintLostHosts(const std::vector<gyre::launcher::ProcessResult>& results,
                    const std::vector<std::string>& remote_hosts) {
  std::vector<std::string> hosts;
  for (const auto& r : results) {
    if (std::find(remote_hosts.begin(), remote_hosts.end(), r.host) == remote_hosts.end()) continue;
    if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
  }
  for (const auto& host : hosts) {
    std::vector<int> ranks;
    std::string how;
    bool all_lost = true;
    for (const auto& r : results) {
      if (r.host != host) continue;
      ranks.push_back(r.rank);
      // Over ssh a lost host shows as the remote shell exiting 255.
      const bool lost = r.failed_on_its_own() && (r.signaled || r.exit_code == 255);
      all_lost = all_lost && lost;
      if (lost && how.empty()) {
        how = r.signaled ? "killed by " + gyre::launcher::SignalName(r.signal)
                         : "remote shell exit 255";
      }
    }
    if (!all_lost || ranks.empty()) continue;
    std::cerr << "gyrerun: host " << host << " lost: every process of its "
              << gyre::store::FormatRankList(ranks) << " died (" << how << ")\n";
  }
}

// Where the program starts in argv: at "--", or at the first word that is neither one of
// gyrerun's flags nor the value of one (a non-boolean flag given as "--flag value").
int ProgramStart(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return i;
    const std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    if (name.find('=') != std::string::npos) continue;
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(name.c_str(), &info) && info.type != "bool") ++i;
  }
  return argc;
}

int Usage(const std::string& why) {
  std::cerr << "gyrerun: " << why << "\n"
            << "usage: gyrerun -n N [--store file|tcp|URL] [--timeout S] [-- program args...]\n";
  return 2;
}

// The lock file a gyrerun holds in its run folder (see LockRunDir).
std::string RunDirLockPath(const std::string& dir, int node) {
  return dir + (node >= 0 ? "/gyrerun-node" + std::to_string(node) + ".lock" : "/gyrerun.lock");
}

// Whether a gyrerun has used `dir` as its run folder: each leaves its lock file there.
bool UsedByGyrerun(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "gyrerun.lock" || (name.rfind("gyrerun-node", 0) == 0 && name.size() > 17 &&
                                   name.compare(name.size() - 5, 5, ".lock") == 0)) {
      return true;
    }
  }
  return false;
}

// What an earlier job left in a reused --run_dir that this one must not read as its own: the
// file store folder, report.txt, the secret and the flight records, put in *leftovers. Only a
// folder an earlier gyrerun used (`used_before`) is cleared, and its store folder only if it
// holds nothing but store files; anything else is the user's. Then the answer is why the job
// is refused, and nothing is removed.
std::string RunDirLeftovers(const std::string& dir, bool used_before,
                            std::vector<std::filesystem::path>* leftovers) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool flight = name.rfind("flight-rank", 0) == 0 && name.size() > 16 &&
                        name.compare(name.size() - 5, 5, ".json") == 0;
    if (name == "store" || name == "report.txt" || name == "secret" || flight) {
      leftovers->push_back(entry.path());
      found.push_back(name);
    }
  }
  if (ec) return "cannot list the run folder " + dir + ": " + ec.message();
  if (leftovers->empty()) return "";
  std::sort(found.begin(), found.end());
  std::string names;
  for (const std::string& n : found) names += (names.empty() ? "" : ", ") + n;
  if (!used_before) {
    return "the run folder " + dir + " already holds " + names +
           ", which gyrerun would replace, and no gyrerun has used it (it has no gyrerun.lock): "
           "move them away, or give an empty or new --run_dir";
  }
  const std::filesystem::path store = std::filesystem::path(dir) / "store";
  if (std::filesystem::exists(std::filesystem::symlink_status(store, ec))) {
    if (!std::filesystem::is_directory(std::filesystem::symlink_status(store, ec))) {
      return store.string() +
             " is not a folder, so not a store an earlier job left: move it "
             "away, or give another --run_dir";
    }
    for (const auto& entry : std::filesystem::directory_iterator(store, ec)) {
      const std::string name = entry.path().filename().string();
      const bool store_file =
          name == ".lock" || name.rfind("k.", 0) == 0 || name.rfind(".tmp.", 0) == 0;
      if (!store_file || !entry.is_regular_file(ec)) {
        return store.string() + " holds " + name + ", which is not a file of gyre's store; " +
               "gyrerun clears that folder for every job: move it away, or give another " +
               "--run_dir";
      }
    }
    if (ec) return "cannot list " + store.string() + ": " + ec.message();
  }
  return "";
}

// Holds `dir`/gyrerun.lock (an flock) for as long as gyrerun runs: a second gyrerun given the
// same --run_dir would otherwise clear the running job's store and secret from under it. The
// nodes of one job (`node` >= 0, torchrun style) may share a folder and lock their own
// gyrerun-node<K>.lock. Returns the descriptor that holds it, -2 where the file system has no
// locks (said, and the run goes on unprotected, as before), or -1 with `*why` set.
int LockRunDir(const std::string& dir, int node, std::string* why) {
  const std::string path = RunDirLockPath(dir, node);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    // The holder wrote its pid there; anything else in the file is not shown.
    char buf[16] = {};
    const ssize_t got = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string holder;
    for (ssize_t i = 0; i < got && buf[i] >= '0' && buf[i] <= '9'; ++i) holder += buf[i];
    ::close(fd);
    if (err == EWOULDBLOCK) {
      *why = "the run folder " + dir + " is in use by another gyrerun" +
             (holder.empty() ? "" : " (pid " + holder + ")") +
             ": give each job its own --run_dir, or none (each job then gets a new folder)";
      return -1;
    }
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      std::cerr << "gyrerun: warning: cannot lock " << path << " (" << std::strerror(err)
                << "): nothing stops another gyrerun from using this run folder meanwhile\n";
      return -2;
    }
    *why = "cannot lock " + path + ": " + std::strerror(err);
    return -1;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // Only the message of a second gyrerun loses the pid: the lock is held.
    std::cerr << "gyrerun: warning: cannot write this gyrerun's pid into " << path << ": "
              << std::strerror(errno) << "\n";
  }
  return fd;
}

// Run folders that gyreruns killed by SIGKILL left in `parent` (their job was stopped by the
// group guardian, but nothing removed the folder, the job's secret included): a folder gyrerun
// named itself (gyrerun-XXXXXX), owned by this user, whose lock files no gyrerun holds and that
// still holds its secret (an orderly exit removes the secret before it lets go of the lock; a
// folder kept with --keep_run_dir has none). A folder whose gyrerun has not locked it yet has
// no lock file and stays. Returns how many were removed.
int SweepKilledRunDirs(const std::string& parent) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string dir = entry.path().string();
    struct stat st {};
    if (name.size() != 14 || name.rfind("gyrerun-", 0) != 0 || ::lstat(dir.c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        ::access((dir + "/secret").c_str(), F_OK) != 0) {
      continue;
    }
    int locks = 0;
    bool held = false;
    std::error_code inner;
    for (const auto& file : std::filesystem::directory_iterator(dir, inner)) {
      const std::string f = file.path().filename().string();
      if (f.rfind("gyrerun", 0) != 0 || f.size() < 5 || f.compare(f.size() - 5, 5, ".lock") != 0) {
        continue;
      }
      ++locks;
      const int fd = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) held = true;
      if (fd >= 0) ::close(fd);
    }
    if (inner || locks == 0 || held) continue;
    std::filesystem::remove_all(dir, inner);
    if (!inner) ++removed;
  }
  return removed;
}

// The names gyrerun gives the files of --output_dir: rankR.stdout, rankR.stderr and their
// daemon's rankR-gyred.stdout / .stderr.
bool IsOutputFileName(const std::string& name) {
  if (name.rfind("rank", 0) != 0) return false;
  size_t i = 4;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == 4) return false;
  std::string rest = name.substr(i);
  if (rest.rfind("-gyred", 0) == 0) rest = rest.substr(6);
  return rest == ".stdout" || rest == ".stderr";
}

// An --output_dir used before holds an earlier run's files, and an earlier run's attemptK/
// folders that this run may not write (fewer attempts, or none): read beside this run's, the
// last attempt's folder would be another job's. What gyrerun wrote there is removed before any
// rank starts, and said; anything else in the folder is left alone, and so is a folder that
// holds anything else. `whole_job` is false when other gyreruns (nodes of one job) may share
// the folder: then their files stay. Returns what was removed, or an error.
gyre::StatusOr<std::vector<std::string>> ClearEarlierOutput(const std::string& dir,
                                                            bool whole_job) {
  std::vector<std::string> removed;
  if (!whole_job) return removed;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return removed;
  std::vector<std::filesystem::path> files;
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (entry.is_regular_file(type_ec) && IsOutputFileName(name)) {
      files.push_back(entry.path());
      continue;
    }
    const bool attempt_folder = name.rfind("attempt", 0) == 0 && name.size() > 7 &&
                                name.find_first_not_of("0123456789", 7) == std::string::npos &&
                                entry.is_directory(type_ec) && !entry.is_symlink(type_ec);
    if (!attempt_folder) continue;
    bool only_output = true;
    for (const auto& inner : std::filesystem::directory_iterator(entry.path(), type_ec)) {
      std::error_code inner_ec;
      only_output = only_output && inner.is_regular_file(inner_ec) &&
                    IsOutputFileName(inner.path().filename().string());
    }
    if (only_output && !type_ec) folders.push_back(entry.path());
  }
  if (ec) return gyre::InternalError("cannot list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::sort(folders.begin(), folders.end());
  for (const auto& f : files) {
    if (!std::filesystem::remove(f, ec) && ec) {
      return gyre::InternalError("cannot remove " + f.string() + ": " + ec.message());
    }
    removed.push_back(f.filename().string());
  }
  for (const auto& f : folders) {
    std::filesystem::remove_all(f, ec);
    if (ec) return gyre::InternalError("cannot remove " + f.string() + ": " + ec.message());
    removed.push_back(f.filename().string() + "/");
  }
  return removed;
}

}  // namespace

int main(int argc, char** argv) {
  // gflags takes flags from anywhere in argv: the program's own (`gyrerun -n 2 ./prog -n 3`)
  // would become gyrerun's. Only what comes before the program is gyrerun's.
  const int program_at = ProgramStart(argc, argv);
  std::vector<std::string> program(argv + program_at, argv + argc);
  if (!program.empty() && program.front() == "--") program.erase(program.begin());
  int flag_argc = program_at;
  gyre::ParseToolFlags(&flag_argc, &argv,
                       "gyrerun -n N [flags] [-- program args...]\n"
                       "Without a program, runs gyre's main job on N local ranks.\n"
                       "Every rank's stdin is /dev/null; its stdout and stderr lines are "
                       "relayed with a \"[rank R] \" prefix.\n"
                       "SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the job (exit 128 + the "
                       "signal); SIGUSR1 and SIGUSR2 are passed on to each rank's program; "
                       "SIGTSTP (Ctrl-Z) stops the whole job until gyrerun is continued.");
  // The TCP store it serves and the address planning log through glog: to stderr, without
  // glog's "Logging before InitGoogleLogging()" notice in front.
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // A reader that goes away (`gyrerun ... | head`) drops the rest of the output; the job runs
  // on and ends in order. The ranks get the default back (Supervisor).
  ::signal(SIGPIPE, SIG_IGN);
  using namespace gyre;
  // Where the ranks run: here (-n), on a list of hosts (--hosts/--hostfile), or this host's
  // share of a job with one gyrerun per host (--nnodes/--node_rank/--nproc_per_node).
  struct Placement {
    int rank = 0;
    int local_rank = 0;
    std::string host;     // empty: this host, unnamed
    bool remote = false;  // reached through --rsh
  };
  std::vector<Placement> placements;
  // Two flags for one number must agree: one of them was silently ignored.
  if (FLAGS_n > 0 && FLAGS_np > 0 && FLAGS_n != FLAGS_np) {
    return Usage("-n " + std::to_string(FLAGS_n) + " and -np " + std::to_string(FLAGS_np) +
                 " disagree; give one");
  }
  int n = FLAGS_n > 0 ? FLAGS_n : FLAGS_np;
  // The torchrun-style flags are checked even when they place nothing: a value that cannot
  // mean anything (--nnodes 0, --node_rank 5 of one node) is not ignored without a word.
  if (FLAGS_nnodes < 1)
    return Usage("--nnodes must be at least 1, not " + std::to_string(FLAGS_nnodes));
  if (FLAGS_nproc_per_node < 0) {
    return Usage("--nproc_per_node must be 0 (ranks from -n) or more, not " +
                 std::to_string(FLAGS_nproc_per_node));
  }
  if (FLAGS_node_rank < 0 || FLAGS_node_rank >= FLAGS_nnodes) {
    return Usage("--node_rank " + std::to_string(FLAGS_node_rank) + " is not in 0.." +
                 std::to_string(FLAGS_nnodes - 1) + " (--nnodes " + std::to_string(FLAGS_nnodes) +
                 ")");
  }
  if (!FLAGS_job_id.empty()) {
    if (Status bad = job::CheckJobId(FLAGS_job_id); !bad.ok()) return Usage(bad.message());
  }
  // Every rank would refuse them (job::ResolveIdentity); said once, before any starts.
  if (!FLAGS_host_name.empty()) {
    if (Status bad = job::CheckHostName("--host_name", FLAGS_host_name); !bad.ok()) {
      return Usage(bad.message());
    }
  }
  if (const char* h = std::getenv("GYRE_HOST"); h != nullptr && *h != '\0') {
    if (Status bad = job::CheckHostName("GYRE_HOST", h); !bad.ok()) return Usage(bad.message());
  }
  const bool torchrun = FLAGS_nnodes > 1 || FLAGS_nproc_per_node > 0;
  const bool fan_out = !FLAGS_hosts.empty() || !FLAGS_hostfile.empty();
  if (!FLAGS_hosts.empty() && !FLAGS_hostfile.empty()) {
    return Usage("--hosts and --hostfile both name the hosts; give one");
  }
  if (FLAGS_tail_lines < 0) {
    return Usage("--tail_lines must be 0 (none) or more, not " + std::to_string(FLAGS_tail_lines));
  }
  if (torchrun && fan_out) {
    return Usage(
        "--hosts/--hostfile and --nnodes/--nproc_per_node are two ways to place ranks; "
        "give one");
  }
  if (fan_out) {
    auto hosts = ParseHosts(FLAGS_hosts, FLAGS_hostfile);
    if (!hosts.ok()) return Usage(hosts.status().message());
    int64_t total = 0;
    for (const auto& h : *hosts) total += h.slots;
    if (total == 0) return Usage("--hosts/--hostfile name no host");
    if (n == 0 && total > kMaxRanks) {
      return Usage("--hosts/--hostfile give " + std::to_string(total) + " slots; one gyrerun " +
                   "starts at most " + std::to_string(kMaxRanks) + " ranks (give -n)");
    }
    if (n == 0) n = static_cast<int>(total);
    if (n > total) {
      return Usage("-n " + std::to_string(n) + " is more than the " + std::to_string(total) +
                   " slots of --hosts/--hostfile");
    }
    // This host may be named twice ("localhost:2,127.0.0.1:2"): its ranks share one name, so
    // they know they share a host, and count their local ranks together.
    std::string local_name;
    int local_slots = 0;
    for (const auto& h : *hosts) {
      const bool local = IsLocalHost(h.host);
      if (local && local_name.empty()) local_name = h.host;
      for (int s = 0; s < h.slots && static_cast<int>(placements.size()) < n; ++s) {
        const int local_rank = local ? local_slots++ : s;
        placements.push_back(
            {static_cast<int>(placements.size()), local_rank, local ? local_name : h.host, !local});
      }
    }
  } else if (torchrun) {
    if (FLAGS_nnodes < 1 || FLAGS_nproc_per_node < 1) {
      return Usage("--nnodes and --nproc_per_node must both be at least 1");
    }
    if (int64_t{FLAGS_nnodes} * FLAGS_nproc_per_node > store::kMaxWorldSize ||
        FLAGS_nproc_per_node > kMaxRanks) {
      return Usage("--nnodes x --nproc_per_node is at most " +
                   std::to_string(store::kMaxWorldSize) +
                   " (the most ranks a job may have), and --nproc_per_node at most " +
                   std::to_string(kMaxRanks));
    }
    if (n > 0 && n != FLAGS_nnodes * FLAGS_nproc_per_node) {
      return Usage("-n " + std::to_string(n) + " is not --nnodes x --nproc_per_node (" +
                   std::to_string(FLAGS_nnodes * FLAGS_nproc_per_node) +
                   "): give the ranks one way");
    }
    n = FLAGS_nnodes * FLAGS_nproc_per_node;
    std::string host = FLAGS_host_name;
    if (host.empty() && std::getenv("GYRE_HOST") != nullptr) host = std::getenv("GYRE_HOST");
    if (host.empty()) {
      char name[256] = {0};
      ::gethostname(name, sizeof(name) - 1);
      host = name;
    }
    for (int i = 0; i < FLAGS_nproc_per_node; ++i) {
      placements.push_back({FLAGS_node_rank * FLAGS_nproc_per_node + i, i, host, false});
    }
  } else {
    if (n < 1) return Usage("give the number of ranks with -n N (N >= 1)");
    if (n > kMaxRanks) {
      return Usage("-n " + std::to_string(n) + ": one gyrerun starts at most " +
                   std::to_string(kMaxRanks) + " ranks");
    }
    for (int r = 0; r < n; ++r) placements.push_back({r, r, "", false});
  }
  if (placements.size() > static_cast<size_t>(kMaxRanks)) {
    return Usage(std::to_string(placements.size()) + " ranks: one gyrerun starts at most " +
                 std::to_string(kMaxRanks));
  }
  bool remote = false;
  for (const auto& p : placements) remote = remote || p.remote;
  // A restart starts every rank afresh against a store emptied of the failed attempt's
  // claims, which only a gyrerun that runs the whole job, on a store it owns, can do.
  if (FLAGS_max_restarts < 0 || FLAGS_max_restarts > kMaxRestarts) {
    return Usage("--max_restarts must be 0 (no restart) to " + std::to_string(kMaxRestarts) +
                 ", not " + std::to_string(FLAGS_max_restarts));
  }
  if (FLAGS_max_restarts > 0) {
    if (FLAGS_nnodes > 1) {
      return Usage("--max_restarts with --nnodes " + std::to_string(FLAGS_nnodes) +
                   ": each node's gyrerun would restart its own ranks without the others; "
                   "restarts are for a job one gyrerun runs");
    }
    if (remote) {
      return Usage("--max_restarts with ranks on other hosts: restarts are for jobs on this host");
    }
    if (FLAGS_store != "file" && FLAGS_store != "tcp") {
      return Usage("--max_restarts with --store " + FLAGS_store +
                   ": that store would keep the failed attempt's claims and the next attempt "
                   "could not meet there; restarts need gyrerun's own store (--store file or "
                   "tcp), which it empties for each attempt");
    }
  }
  // Ranks on other hosts need routable addresses, and so does the store they meet at.
  const bool networked = remote || FLAGS_nnodes > 1;
  const std::string ifaces =
      FLAGS_ifaces.empty() && networked ? std::string(job::kDefaultIfaces) : FLAGS_ifaces;
  if (FLAGS_nnodes > 1) {
    if (FLAGS_store.rfind("tcp://", 0) != 0) {
      return Usage("--nnodes " + std::to_string(FLAGS_nnodes) +
                   " needs --store tcp://HOST:PORT (node 0 serves it), not '" + FLAGS_store + "'");
    }
    if (Status form = store::CheckStoreUrl(FLAGS_store); !form.ok()) {
      return Usage("--store: " + form.message());
    }
    if (FLAGS_secret_file.empty()) {
      return Usage("--nnodes " + std::to_string(FLAGS_nnodes) +
                   " needs --secret_file: every host must prove the same job secret");
    }
  }
  if (FLAGS_mode != "daemon" && FLAGS_mode != "embedded") {
    return Usage("--mode must be 'daemon' or 'embedded', not '" + FLAGS_mode + "'");
  }
  if (FLAGS_run != "main" && FLAGS_run != "selftest" && FLAGS_run != "bench") {
    return Usage("--run must be 'main', 'selftest' or 'bench', not '" + FLAGS_run + "'");
  }
  // Each of these was dropped without a word.
  if (!program.empty() && !gflags::GetCommandLineFlagInfoOrDie("run").is_default) {
    return Usage(
        "--run picks gyrerun's own workload, which a program given after it replaces: "
        "give one");
  }
  if (program.empty() && FLAGS_mode == "embedded") {
    return Usage(
        "--mode embedded runs a program's ranks in-process; gyrerun's own workload "
        "(--run) runs in gyred: give a program, or drop --mode");
  }
  const std::string bad = gyre::FirstBadSecondsFlag({
      {"--timeout", FLAGS_timeout, 0.001, 1e9, "from 0.001 to 1e9 seconds"},
      {"--rendezvous_timeout", FLAGS_rendezvous_timeout, 0.001, 1e9, "from 0.001 to 1e9 seconds"},
      {"--grace_period", FLAGS_grace_period, 0, 1e6, "from 0 to 1e6 seconds"},
      {"--settle_time", FLAGS_settle_time, 0, 1e6, "from 0 to 1e6 seconds"},
      {"--job_timeout", FLAGS_job_timeout, 0, 1e9, "0 (never) or up to 1e9 seconds"},
      {"--hang_timeout", FLAGS_hang_timeout, 0, 1e9, "0 (off) or up to 1e9 seconds"},
  });
  if (!bad.empty()) return Usage(bad);
  if (program.empty() && FLAGS_timing_runs < 5) {
    return Usage("--timing_runs must be at least 5 (a median of fewer says little), not " +
                 std::to_string(FLAGS_timing_runs));
  }
  // Checked even for a job on this host alone, which does not use it: a value that cannot
  // mean anything is not ignored without a word.
  StatusOr<std::vector<std::string>> split_rsh = launcher::SplitShellWords(FLAGS_rsh);
  if (!split_rsh.ok()) return Usage("--rsh '" + FLAGS_rsh + "': " + split_rsh.status().message());
  const std::vector<std::string> rsh_words = std::move(*split_rsh);
  if (FLAGS_segment_bytes < 0) {
    return Usage("--segment_bytes must be 0 (no segments) or more, not " +
                 std::to_string(FLAGS_segment_bytes));
  }

  std::string run_dir = FLAGS_run_dir;
  if (run_dir.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    const std::string parent = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
    if (const int swept = SweepKilledRunDirs(parent); swept > 0) {
      std::cerr << "gyrerun: removed " << swept << " run folder" << (swept == 1 ? "" : "s")
                << " in " << parent << " that killed gyreruns left (each with its job's secret)\n";
    }
    std::string tmpl = parent + "/gyrerun-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "gyrerun: cannot create a run folder in " << parent << ": "
                << std::strerror(errno) << " (set TMPDIR, or give one with --run_dir)\n";
      return 1;
    }
    run_dir = tmpl;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(run_dir, ec);
    if (ec) {
      std::cerr << "gyrerun: cannot use --run_dir " << run_dir << ": " << ec.message() << "\n";
      return 1;
    }
  }
  {
    // Absolute: it becomes the store's URL (file:// takes no relative folder) and the
    // sockets' paths, whatever TMPDIR or --run_dir said.
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(run_dir, ec);
    if (!ec) run_dir = absolute.lexically_normal().string();
    while (run_dir.size() > 1 && run_dir.back() == '/') run_dir.pop_back();
  }
  // A Unix socket's path has at most 107 bytes: with a long TMPDIR or --run_dir every rank's
  // program failed on its daemon's socket.
  if (!program.empty() && FLAGS_mode == "daemon") {
    const std::string longest = run_dir + "/rank" + std::to_string(std::max(n, 1) - 1) + ".sock";
    if (longest.size() > 107) {
      std::cerr << "gyrerun: the run folder " << run_dir << " is too long for the daemons' "
                << "sockets (" << longest << " is " << longest.size()
                << " bytes; a socket path has at most 107): give a shorter --run_dir or TMPDIR\n";
      std::error_code ec;
      if (FLAGS_run_dir.empty()) std::filesystem::remove_all(run_dir, ec);
      return 1;
    }
  }
  // Whether an earlier gyrerun used this folder (each leaves its lock file there): only then
  // is what it left (store, report, flight records, secret) cleared for this job.
  const bool used_before = !FLAGS_run_dir.empty() && UsedByGyrerun(run_dir);
  std::string lock_problem;
  if (LockRunDir(run_dir, FLAGS_nnodes > 1 ? FLAGS_node_rank : -1, &lock_problem) == -1) {
    std::cerr << "gyrerun: " << lock_problem << "\n";
    std::error_code ec;
    if (FLAGS_run_dir.empty()) std::filesystem::remove_all(run_dir, ec);  // the one made above
    return 1;
  }
  if (!FLAGS_run_dir.empty()) {
    // A reused folder: what an earlier job left there (its file store, its flight records,
    // its report) would be read as this job's, so it goes; but only what a gyrerun left.
    std::vector<std::filesystem::path> leftovers;
    const std::string refused = RunDirLeftovers(run_dir, used_before, &leftovers);
    if (!refused.empty()) {
      std::cerr << "gyrerun: " << refused << "\n";
      if (!used_before) {  // the lock file this gyrerun just made: the folder is as it was
        ::unlink(RunDirLockPath(run_dir, FLAGS_nnodes > 1 ? FLAGS_node_rank : -1).c_str());
      }
      return 1;
    }
    // The store folder with its files (checked above); the others one file each: one that is
    // a folder stays, and writing there later fails with its own message.
    std::error_code ec;
    for (const auto& path : leftovers) {
      if (path.filename() == "store") {
        std::filesystem::remove_all(path, ec);
      } else {
        std::filesystem::remove(path, ec);
      }
    }
  }
  // On every way out: the folder gyrerun made goes (unless kept), and so does a secret it wrote.
  struct RunDirCleanup {
    std::string dir;
    bool remove_dir = false;
    std::string secret;
    ~RunDirCleanup() {
      if (!secret.empty()) ::unlink(secret.c_str());
      if (remove_dir) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    }
  } cleanup{run_dir, FLAGS_run_dir.empty() && !FLAGS_keep_run_dir, ""};
  std::string job_id = FLAGS_job_id.empty() ? RandomJobId() : FLAGS_job_id;
  if (FLAGS_job_id.empty() && FLAGS_nnodes > 1) {
    // Every host must compute the same id; the store address is what they share.
    job_id = "gyre-" + FLAGS_store.substr(6);
    for (char& c : job_id) {
      if (c == ':' || c == '/') c = '-';
    }
  }
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
    cleanup.secret = secret_file;
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

  // Three pipes to each process it starts (two per rank in daemon mode), the connections its
  // TCP store may serve (one per rank and the tools'), and the margin.
  const uint64_t local_processes = placements.size() * (FLAGS_mode == "daemon" ? 2 : 1);
  const int store_connections = store::TcpStoreServer::ConnectionsFor(n);
  const std::string store_connections_hint =
      "the job's " + std::to_string(n) + " ranks plus " +
      std::to_string(store::TcpStoreServer::kToolConnections) +
      " for tools; gyrerun sizes it from -n, or serve the store with gyre-store --max_ranks";
  if (Status fds = EnsureFileDescriptors(
          3 * local_processes + static_cast<uint64_t>(store_connections) + 64,
          "gyrerun (" + std::to_string(local_processes) +
              " processes to supervise here, a job of " + std::to_string(n) + " ranks)");
      !fds.ok()) {
    std::cerr << "gyrerun: " << fds.message() << "\n";
    return 1;
  }

  std::unique_ptr<store::TcpStoreServer> store_server;
  std::string store_url;
  store::TcpStoreServer::Options store_options;
  store_options.secret = secret;
  store_options.job_id = job_id;
  store_options.max_connections = store_connections;
  store_options.max_connections_hint = store_connections_hint;
  // Which ranks reached the rendezvous, for the exits of gyreds reached through --rsh (a job
  // placed with --hosts: at most kMaxRanks slots to know).
  const auto claims = remote ? std::make_shared<SlotClaims>(job_id, n) : nullptr;
  if (claims) {
    store_options.on_write = [claims](const std::string& key) { claims->OnWrite(key); };
  }
  // A store folder cannot be shared with other hosts: a job reaching them serves TCP.
  const bool serve_tcp = FLAGS_store == "tcp" || (FLAGS_store == "file" && remote);
  if (FLAGS_store == "file" && !remote) {
    store_url = "file://" + run_dir + "/store";
  } else if (serve_tcp) {
    auto server = store::TcpStoreServer::Start(remote ? "0.0.0.0" : "127.0.0.1", 0, store_options);
    if (!server.ok()) {
      std::cerr << "gyrerun: cannot start the TCP store: " << server.status() << "\n";
      return 1;
    }
    store_server = std::move(*server);
    store_url = "tcp://" + store_server->address();
    if (remote) {
      std::string host = FLAGS_store_host;
      if (host.empty()) {
        auto plan = job::PlanAddresses(store_server->address(), ifaces, FLAGS_allow_loopback);
        if (!plan.ok()) {
          std::cerr << "gyrerun: choosing the store's address: " << plan.status() << "\n";
          return 1;
        }
        host = job::HostOf(plan->advertised.front());
      }
      store_url = "tcp://" + job::HostPort(host, job::PortOf(store_server->address()));
    }
  } else if (FLAGS_nnodes > 1 && FLAGS_node_rank == 0) {
    // torchrun style: node 0 serves the store at the port every node was given.
    const int port = job::PortOf(FLAGS_store.substr(6));
    // Every interface, for the other hosts; but a loopback address given means one host, and
    // the store then listens there only.
    const std::string given = job::HostOf(FLAGS_store.substr(6));
    const std::string bind = job::IsLoopbackIp(given) ? given : "0.0.0.0";
    auto server = store::TcpStoreServer::Start(bind, port, store_options);
    if (!server.ok()) {
      std::cerr << "gyrerun: node 0 cannot serve the store on port " << port << ": "
                << server.status() << "\n";
      return 1;
    }
    store_server = std::move(*server);
    store_url = FLAGS_store;
  } else if (FLAGS_store.rfind("file://", 0) == 0 || FLAGS_store.rfind("tcp://", 0) == 0) {
    // Checked here, before any rank starts: every rank would fail on it alike.
    if (Status form = store::CheckStoreUrl(FLAGS_store); !form.ok()) {
      return Usage("--store: " + form.message());
    }
    store_url = FLAGS_store;
    // A store served by another process may start after this job, so the ranks wait for it;
    // one that does not answer now is said at once rather than after the whole wait.
    const std::string kTcp = "tcp://";
    if (store_url.rfind(kTcp, 0) == 0) {
      StatusOr<int> probe = ipc::ConnectTcp(store_url.substr(kTcp.size()),
                                            Deadline::After(*SteadyClock::Get(), Millis(500)));
      if (probe.ok()) {
        ::close(*probe);
      } else if (probe.status().code() != StatusCode::kInvalidArgument) {  // a host name
        std::cerr << "gyrerun: nothing answers at " << store_url << " yet ("
                  << probe.status().message() << "); every rank waits for it up to "
                  << FormatDuration(std::chrono::duration_cast<Duration>(
                         std::chrono::duration<double>(FLAGS_rendezvous_timeout)))
                  << " (--rendezvous_timeout)\n";
      }
    }
  } else {
    return Usage("--store must be file, tcp, file:///dir or tcp://host:port, not '" + FLAGS_store +
                 "'");
  }

  const Placement* placing = nullptr;  // the placement the specs below are built for
  // Ranks that share the placing rank's host: a daemon and its program spin-wait for each
  // other only when every one of them can have a CPU of its own.
  auto local_world = [&] {
    int same = 0;
    for (const Placement& q : placements) same += q.host == placing->host ? 1 : 0;
    return std::to_string(same);
  };
  // The call defaults, for an embedded program to apply and for a program's own layer (the
  // Python one reads the timeout and the deterministic switch) in either mode; gyred takes
  // them as flags. Set even at their defaults, so that gyrerun's flags decide, not a value
  // the launching shell happened to export.
  const std::vector<std::pair<std::string, std::string>> call_defaults = {
      {"GYRE_TIMEOUT_MS", std::to_string(static_cast<int64_t>(FLAGS_timeout * 1000))},
      {"GYRE_RENDEZVOUS_TIMEOUT_MS",
       std::to_string(std::max<int64_t>(1, static_cast<int64_t>(FLAGS_rendezvous_timeout * 1000)))},
      {"GYRE_SEGMENT_BYTES", std::to_string(FLAGS_segment_bytes)},
      {"GYRE_DETERMINISTIC", FLAGS_deterministic ? "1" : "0"},
      {"GYRE_TUNE", FLAGS_tune ? "1" : "0"}};
  // Which attempt this is (--max_restarts), for the program to resume from its checkpoint.
  int attempt = 0;
  // This gyrerun's id of the attempt, under which it marks the exits of ranks in the store
  // (ExitMarker): a new one each attempt, so that no rank reads an earlier one's marks.
  std::string launch_id;
  auto restart_env = [&] {
    return std::vector<std::pair<std::string, std::string>>{
        {"GYRE_RESTART_COUNT", std::to_string(attempt)},
        {"GYRE_MAX_RESTARTS", std::to_string(FLAGS_max_restarts)},
        {"GYRE_LAUNCH_ID", launch_id}};
  };
  auto common_env = [&](int rank) {
    auto env = std::vector<std::pair<std::string, std::string>>{
        {"GYRE_RANK", std::to_string(rank)},
        {"GYRE_WORLD_SIZE", std::to_string(n)},
        {"GYRE_LOCAL_RANK", std::to_string(placing->local_rank)},
        {"GYRE_LOCAL_WORLD_SIZE", local_world()},
        {"GYRE_STORE", store_url},
        {"GYRE_JOB_ID", job_id},
        {"GYRE_SECRET_FILE", secret_file},
        {"GYRE_FLIGHT_DIR", run_dir}};
    if (!placing->host.empty()) env.push_back({"GYRE_HOST", placing->host});
    if (!ifaces.empty()) env.push_back({"GYRE_IFACES", ifaces});
    if (FLAGS_allow_loopback) env.push_back({"GYRE_ALLOW_LOOPBACK", "1"});
    for (auto& kv : call_defaults) env.push_back(kv);
    for (auto& kv : restart_env()) env.push_back(kv);
    return env;
  };
  auto gyred_argv = [&](const std::string& run) {
    std::vector<std::string> a = {
        gyred, "--run=" + run, "--timeout=" + std::to_string(FLAGS_timeout),
        "--rendezvous_timeout=" + std::to_string(FLAGS_rendezvous_timeout),
        "--segment_bytes=" + std::to_string(FLAGS_segment_bytes)};
    if (FLAGS_deterministic) a.push_back("--deterministic");
    if (FLAGS_tune) a.push_back("--tune");
    a.push_back("--flight_dir=" + run_dir);
    return a;
  };

  const std::string report_file = run_dir + "/report.txt";
  launcher::SupervisorOptions options;
  options.grace_period = Seconds(FLAGS_grace_period);
  options.settle_time = Seconds(FLAGS_settle_time);
  options.tail_lines = static_cast<size_t>(std::max(0, FLAGS_tail_lines));
  options.oom_kill_counter = launcher::OwnOomKillCounterPath();
  // Beyond job::kAllAskAtOnce ranks the survivors of a progress timeout ask in turn: while
  // they keep reporting, keep collecting exits until the last in line has waited, asked
  // and told the others (a query timeout each), or its verdict is cut off.
  if (n > job::kAllAskAtOnce) {
    const Duration timeout = Seconds(FLAGS_timeout);
    options.settle_limit = options.settle_time + job::VerdictTurnWait(n - 1, n, timeout) +
                           2 * job::QueryTimeoutFor(timeout);
  }
  if (FLAGS_job_timeout > 0) {
    options.job_deadline = Deadline::After(*SteadyClock::Get(), Seconds(FLAGS_job_timeout));
  }
  // Between attempts (--max_restarts, one host, gyrerun's own store): the failed attempt's
  // claims (the store) and daemon sockets go, so the next attempt meets afresh; its flight
  // records and report move to attemptK/ in the run folder, where they still explain the
  // restart (kept with --run_dir or --keep_run_dir) and are not read as the next attempt's. A
  // TCP store is served anew, at a new port.
  auto renew_for_restart = [&]() -> Status {
    std::error_code ec;
    const std::filesystem::path kept =
        std::filesystem::path(run_dir) / ("attempt" + std::to_string(attempt));
    std::filesystem::create_directories(kept, ec);
    if (ec) return InternalError("cannot make " + kept.string() + ": " + ec.message());
    for (const auto& entry : std::filesystem::directory_iterator(run_dir, ec)) {
      const std::string name = entry.path().filename().string();
      const bool flight =
          name.rfind("flight-rank", 0) == 0 && (name.find(".json") != std::string::npos);
      if (flight || name == "report.txt") {
        std::filesystem::rename(entry.path(), kept / name, ec);
        if (ec) std::filesystem::remove(entry.path(), ec);
      }
    }
    // This job's sockets only: a --run_dir may hold the user's own files.
    for (const Placement& p : placements) {
      std::filesystem::remove(run_dir + "/rank" + std::to_string(p.rank) + ".sock", ec);
    }
    if (store_url == "file://" + run_dir + "/store") {
      std::filesystem::remove_all(run_dir + "/store", ec);
      if (ec) {
        return InternalError("cannot empty the store folder " + run_dir +
                             "/store: " + ec.message());
      }
    }
    if (store_server) {
      store_server->Stop();
      store_server.reset();
      auto server = store::TcpStoreServer::Start("127.0.0.1", 0, store_options);
      if (!server.ok()) return server.status().WithContext("serving the TCP store anew");
      store_server = std::move(*server);
      store_url = "tcp://" + store_server->address();
    }
    if (claims) claims->Clear();
    return Status::Ok();
  };
  if (!FLAGS_output_dir.empty()) {
    StatusOr<std::vector<std::string>> cleared =
        ClearEarlierOutput(FLAGS_output_dir, FLAGS_nnodes <= 1);
    if (!cleared.ok()) {
      std::cerr << "gyrerun: the output folder " << FLAGS_output_dir
                << " (--output_dir) holds an earlier run's output that cannot be removed: "
                << cleared.status().message() << "\n";
      if (store_server) store_server->Stop();
      return 1;
    }
    if (!cleared->empty()) {
      std::string list;
      for (size_t i = 0; i < cleared->size() && i < 6; ++i) {
        list += (i == 0 ? "" : ", ") + (*cleared)[i];
      }
      if (cleared->size() > 6) list += ", ...";
      std::cerr << "gyrerun: the output folder " << FLAGS_output_dir
                << " (--output_dir) held an earlier run's output (" << list
                << "); removed, so that it is not read as this run's\n";
    }
  }
  // From here a signal between two attempts is recorded, not fatal: gyrerun ends in order.
  if (FLAGS_max_restarts > 0) CatchStopSignals();
  for (;; ++attempt) {
    launch_id = RandomJobId() + "-" + std::to_string(attempt);
    auth::Credentials marker_credentials;
    marker_credentials.secret = secret;
    marker_credentials.job_id = job_id;
    const auto exit_marker =
        std::make_shared<ExitMarker>(store_url, job_id, launch_id, marker_credentials, run_dir);
    std::vector<launcher::ProcessSpec> specs;
    for (const Placement& placement : placements) {
      placing = &placement;
      const int r = placement.rank;
      if (program.empty()) {
        launcher::ProcessSpec s;
        s.rank = r;
        s.argv = gyred_argv(FLAGS_run);
        // A rank on another host cannot write here; it prints its report instead.
        if (!placement.remote) s.argv.push_back("--report_file=" + report_file);
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
        d.service = true;  // stopped if the program ends without (or after) calling it
        // gyred makes its socket once it serves; a remote one's is not to be seen from here.
        if (!placement.remote) d.ready_path = socket;
        specs.push_back(std::move(d));
        launcher::ProcessSpec p;
        p.rank = r;
        p.argv = program;
        p.env = {{"GYRE_SOCKET", socket},
                 {"GYRE_MODE", "daemon"},
                 {"GYRE_RANK", std::to_string(r)},
                 {"GYRE_WORLD_SIZE", std::to_string(n)},
                 {"GYRE_JOB_ID", job_id},
                 {"GYRE_SECRET_FILE", secret_file},
                 {"GYRE_LOCAL_WORLD_SIZE", local_world()}};
        for (auto& kv : call_defaults) p.env.push_back(kv);
        for (auto& kv : restart_env()) p.env.push_back(kv);
        specs.push_back(std::move(p));
      } else {
        launcher::ProcessSpec p;
        p.rank = r;
        p.argv = program;
        p.env = common_env(r);
        p.env.push_back({"GYRE_MODE", "embedded"});
        // A rank whose program ends before it joins leaves the others waiting for it at the
        // rendezvous: its exit is marked in the store for them.
        p.on_exit_zero = [exit_marker, r](const launcher::ProcessResult& res) {
          exit_marker->Mark(r, res);
        };
        specs.push_back(std::move(p));
      }
    }

    // Names carry the host once there is more than one, and remote processes run behind --rsh.
    // The environment travels inside the command, since ssh does not pass it on.
    const std::vector<std::string>& rsh = rsh_words;
    const std::string rsh_name = rsh.empty() ? "" : rsh[0].substr(rsh[0].rfind('/') + 1);
    const bool quote = rsh_name == "ssh" || rsh_name == "rsh";
    if (remote && rsh.empty()) return Usage("--rsh is empty but some --hosts are not this host");
    for (auto& spec : specs) {
      const Placement& placement =
          *std::find_if(placements.begin(), placements.end(),
                        [&](const Placement& p) { return p.rank == spec.rank; });
      if (!placement.host.empty() && (remote || torchrun)) {
        if (spec.name.empty()) spec.name = "rank " + std::to_string(spec.rank);
        spec.name = placement.host + " " + spec.name;
        spec.host = placement.host;
      }
      if (!placement.remote) continue;
      spec.remote = true;
      // A gyred exits 0 only once it has joined the job. Where gyrerun serves the store it
      // sees each rank's claim of its slot; without one, the "exit 0" is the remote shell's
      // (`--rsh true`, or a wrapper that drops the command) and no rank ever ran there.
      // A program is not asked: it may rightly end without using gyre (`-- hostname`).
      if (claims && store_server && (program.empty() || spec.service)) {
        spec.check_exit_zero = [claims, rank = spec.rank]() -> std::string {
          if (claims->Claimed(rank)) return "";
          return "before joining the job: gyrerun's store saw no claim of rank " +
                 std::to_string(rank) +
                 "'s rendezvous slot, so its gyred never ran or never reached the rendezvous: "
                 "is --rsh running the command? (--rsh '" +
                 FLAGS_rsh + "')";
        };
      }
      std::vector<std::string> command = {"env"};
      for (const auto& [k, v] : spec.env) command.push_back(k + "=" + v);
      command.insert(command.end(), spec.argv.begin(), spec.argv.end());
      std::vector<std::string> wrapped = rsh;
      wrapped.push_back(placement.host);
      for (const auto& w : command) wrapped.push_back(quote ? ShellQuote(w) : w);
      spec.argv = std::move(wrapped);
    }

    if (!FLAGS_output_dir.empty()) {
      // With restarts each attempt keeps its own files: the failed attempt's are what
      // explains the restart.
      const std::string dir = FLAGS_max_restarts > 0
                                  ? FLAGS_output_dir + "/attempt" + std::to_string(attempt)
                                  : FLAGS_output_dir;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) {
        std::cerr << "gyrerun: cannot make the output folder " << dir
                  << " (--output_dir): " << ec.message() << "\n";
        if (store_server) store_server->Stop();
        return 1;
      }
      for (auto& spec : specs) {
        spec.log_prefix =
            dir + "/rank" + std::to_string(spec.rank) + (spec.service ? "-gyred" : "");
      }
    }
    if (FLAGS_pin && !remote) {
      const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
      for (auto& spec : specs) {
        std::vector<std::string> wrapped = {"taskset", "-c", std::to_string(spec.rank % cpus)};
        wrapped.insert(wrapped.end(), spec.argv.begin(), spec.argv.end());
        spec.argv = std::move(wrapped);
      }
    }

    std::cerr << "gyrerun: job " << job_id << ", " << n << " ranks"
              << (torchrun ? " (node " + std::to_string(FLAGS_node_rank) + " of " +
                                 std::to_string(FLAGS_nnodes) + ": ranks " +
                                 std::to_string(placements.front().rank) + "-" +
                                 std::to_string(placements.back().rank) + ")"
                           : "")
              << ", store " << store_url
              << (program.empty() ? ", workload " + FLAGS_run : ", mode " + FLAGS_mode) << "\n"
              << "gyrerun: inspect it with: gyrectl status --store " << store_url << " --job_id "
              << job_id
              // gyrectl finds the secret beside a file store in the run folder, not otherwise.
              << (store_url == "file://" + run_dir + "/store" ? ""
                                                              : " --secret_file " + secret_file)
              << "\n";
    std::vector<std::string> rank_hosts(n);
    for (const Placement& p : placements) {
      if (p.rank >= 0 && p.rank < n) rank_hosts[p.rank] = p.host;
    }
    RunRecords records(run_dir, n, rank_hosts);
    launcher::SupervisorOptions attempt_options = options;
    attempt_options.blame = [&records] { return records.Blame(); };
    launcher::Supervisor supervisor(attempt_options);
    Status st = supervisor.Start(std::move(specs));
    if (!st.ok()) {
      std::cerr << "gyrerun: cannot start the job: " << st << "\n";
      return 1;
    }
    // A signal after the last look between attempts, before the Supervisor took the signals.
    if (g_stop_signal != 0) {
      supervisor.RequestStop("gyrerun received " + launcher::SignalName(g_stop_signal),
                             128 + g_stop_signal);
    }
    std::atomic<bool> done{false};
    std::thread watcher;
    if (FLAGS_hang_timeout > 0) {
      auth::Credentials credentials;
      credentials.secret = secret;
      credentials.job_id = job_id;
      const Status watching =
          StartThread(&watcher, "gyrerun", "watching for hangs (--hang_timeout)", [&, credentials] {
            WatchForHangs(store_url, job_id, n, run_dir, credentials, &supervisor, &done);
          });
      // The job still runs under the ranks' own deadlines: it goes on, unwatched, and says so.
      if (!watching.ok()) std::cerr << "gyrerun: " << watching.message() << "; running unwatched\n";
    }
    const int code = supervisor.Wait();
    exit_marker->Clear();
    // Pushed back by any time the job stood stopped: a next attempt, and the check below of
    // whether the deadline ended this one, see it as the job did.
    options.job_deadline = supervisor.job_deadline();
    done = true;
    if (watcher.joinable()) watcher.join();
    if (code != 0) PrintMergedView(records, n, supervisor.results());
    if (code != 0 && remote) {
      std::vector<std::string> remote_hosts;
      for (const Placement& p : placements) {
        if (p.remote) remote_hosts.push_back(p.host);
      }
      PrintLostHosts(supervisor.results(), remote_hosts);
    }
    // The ranks' relayed output is the job's output too: lines lost on the way (a full disk)
    // fail a job that would otherwise succeed, naming what was lost.
    // (Of the last attempt only: a restarted one's loss was said above.)
    const std::string lost = supervisor.LostOutput();
    if (!lost.empty()) std::cerr << "gyrerun: " << lost << "\n";
    int stop_signal = supervisor.ReceivedSignal();
    if (stop_signal == 0) stop_signal = g_stop_signal;
    const std::string why_not =
        code == 0 ? "" : WhyNotRestart(code, stop_signal, supervisor.results(), options);
    const int64_t attempts = int64_t{FLAGS_max_restarts} + 1;
    // Attempt K+1 counted from one is GYRE_RESTART_COUNT K and folder attemptK/ (both from
    // 0): the line gives both numbers, so that "attempt 1" and "attempt0/" name the same
    // attempt.
    const std::string which = "attempt " + std::to_string(attempt + 1) + " of " +
                              std::to_string(attempts) +
                              " (GYRE_RESTART_COUNT=" + std::to_string(attempt) + ")";
    const std::string kept_in =
        FLAGS_output_dir.empty() || FLAGS_max_restarts == 0
            ? ""
            : "; its output is in " + FLAGS_output_dir + "/attempt" + std::to_string(attempt);
    if (code != 0 && attempt < FLAGS_max_restarts && why_not.empty()) {
      std::cerr << "gyrerun: " << which << " failed (exit status " << code << kept_in
                << "); restarting every rank (restart " << attempt + 1 << " of "
                << FLAGS_max_restarts << ")\n";
      Status renewed = renew_for_restart();
      if (!renewed.ok()) std::cerr << "gyrerun: cannot restart the job: " << renewed << "\n";
      if (g_stop_signal != 0) {
        std::cerr << "gyrerun: received " << launcher::SignalName(g_stop_signal)
                  << " between two attempts; not starting another\n";
      }
      if (renewed.ok() && g_stop_signal == 0) continue;
      if (store_server) store_server->Stop();
      return g_stop_signal != 0 ? 128 + g_stop_signal : code;
    }
    if (code != 0 && FLAGS_max_restarts > 0) {
      std::cerr << "gyrerun: " << which << " failed (exit status " << code << kept_in << ")"
                << (attempt < FLAGS_max_restarts ? "; not restarting: " + why_not
                                                 : "; no restart left (--max_restarts " +
                                                       std::to_string(FLAGS_max_restarts) + ")")
                << "\n";
    }
    // A stop asked for ends the job as the stop's: 128 + the signal, as the Supervisor's own.
    int exit_code =
        code != 0 && stop_signal != 0 && FLAGS_max_restarts > 0 ? 128 + stop_signal : code;
    if (program.empty()) {
      std::ifstream report(report_file);
      // (An empty report writes nothing, which `<<` of a buffer counts as a failure.)
      if (report && report.peek() != std::ifstream::traits_type::eof()) {
        std::cout << report.rdbuf() << std::flush;
        // The report is the job's result: one that did not reach stdout fails the run.
        if (!std::cout) {
          std::cerr << "gyrerun: cannot write the job's report to stdout\n";
          if (exit_code == 0) exit_code = 1;
        }
      }
    }
    if (!lost.empty() && exit_code == 0) exit_code = 1;
    if (store_server) store_server->Stop();
    return exit_code;  // `cleanup` removes the secret, and the folder if gyrerun made it
  }
}
