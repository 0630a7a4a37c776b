// Supervisor: starts a job's processes on this host, relays their output line by line with a
// "[rank R] " prefix, and stops the whole job as soon as one process fails, then explains
// which process failed first and how. It is what `gyrerun` runs; it knows nothing about gyre
// daemons or collectives, so any program can be supervised.
//
// Semantics
// ---------
// Start(specs) forks one child per ProcessSpec. Each child:
//   - gets stdin from /dev/null, stdout and stderr into pipes read by the supervisor, and no
//     other inherited descriptor;
//   - is put in one new process group shared by the whole job, so a Ctrl-C at the terminal
//     reaches only the launcher, which then decides;
//   - has PR_SET_PDEATHSIG = SIGKILL, so no rank outlives a launcher that crashes. The signal
//     follows the *thread* that forked: call Start() from a thread that lives until Wait()
//     returns (normally the main thread);
//   - has signal dispositions reset to default and an empty signal mask;
//   - runs argv[0] (looked up in $PATH when it holds no '/') with the launcher's environment
//     plus ProcessSpec::env (which wins on a clash), in ProcessSpec::cwd if set.
// The group is led by a small "guardian" process forked first: it ignores every catchable
// signal and watches a pipe from the launcher. Its life keeps the group id from being reused
// while the supervisor may signal the group, and if the launcher dies (even by SIGKILL) the
// pipe's EOF makes it SIGKILL the whole group, so the ranks' own children die too. It is not
// a ProcessSpec and does not appear in results().
//
// A child that cannot be executed (or cannot enter cwd) is that process's failure: its result
// reads "cannot execute <path>: <strerror>" and exit code 127, like a shell. Start() itself
// fails only for caller errors (InvalidArgument), when the launcher runs out of processes or
// descriptors (ResourceExhausted), or if a child is not in the job's group (Internal); then
// every child already started is killed and reaped.
//
// Wait() runs one single-threaded loop: poll() over every output pipe plus a self-pipe fed by
// the signal handlers (SIGCHLD and the launcher signals below), with a timeout of at most
// kMaxPollIntervalMs, and a waitid(WNOHANG) sweep of the live children on every turn (so a lost
// wakeup costs at most one interval). Output is split into lines; each line, prefixed with
// "[<name>] " (name defaults to "rank R"), is written to its stream with one write and a flush, so
// lines of different processes never mix mid-line. A line longer than kMaxLineBytes is cut into
// pieces; a last line without '\n' is still printed at EOF. Writing to options.out/err may block if
// their reader stalls (e.g. a paused pager); that is the one wait the loop does not bound.
//
// The job ends when every process has exited. It is cut short by the first of:
//   - a process exiting non-zero or by a signal: that process is the ROOT CAUSE (if several
//     are seen in the same sweep, the one given first to Start());
//   - SIGINT, SIGTERM, SIGHUP or SIGQUIT to the launcher (a second one escalates to SIGKILL at
//     once);
//   - options.job_deadline passing;
//   - RequestStop() from another thread (a watchdog).
// SIGUSR1 or SIGUSR2 to the launcher does not stop the job: it is passed on to every live
// process that is neither a ProcessSpec::service nor ProcessSpec::remote (each rank's program;
// a remote shell would die of it and lose its host), as mpirun passes them on.
// SIGTSTP (Ctrl-Z at the terminal, which reaches only the launcher's group) stops the whole job
// and then the launcher: SIGSTOP to the job's process group (the guardian is continued at once,
// so it still watches the launcher), a line on options.err, and the launcher stops by the
// signal's default action. Once the launcher is continued (`fg`, SIGCONT) it sends SIGCONT to
// the group, says how long the job stood still, and pushes every deadline of its own back by
// that time (job_deadline, settle, grace, service linger; LastContinued() for a watchdog on
// another thread): a stop is not a hang. The ranks do likewise with their progress deadlines
// (OpMonitor::ProgressDue). SIGTTIN and SIGTTOU keep their default action (IsJobControlStop).
// A ProcessSpec::remote process is the local remote shell: it stops, the program on the other
// host does not, and may time out on ranks that did.
// A ProcessSpec::service process whose rank's other processes all exited 0 is stopped on its
// own after options.service_linger, without failing the job.
// Shutdown sends SIGTERM (and SIGCONT, so a stopped process can act on it) to every live
// child and to the job's process group, then SIGKILL to all of them once grace_period has
// passed. Processes signalled this way are "terminated by gyrerun", never a root cause. When
// every child has exited, whatever is left in the process group (descendants of the ranks,
// even of ranks that exited 0) is SIGKILLed and reaped: the launcher makes itself a child
// subreaper (PR_SET_CHILD_SUBREAPER) so such orphans are re-parented to it, and reaps those
// that exit while the job runs on every sweep. A descendant that
// leaves the process group (setsid) is out of reach. Only pids this supervisor started, and
// its own process group, are ever signalled, and only this supervisor's children are reaped.
//
// Wait() returns the exit status for the launcher:
//   0        every process exited 0;
//   N        the root cause exited with N (127 when it could not be executed);
//   128+S    the root cause died by signal S (SIGKILL: 137);
//   130/143/129/131  the launcher got SIGINT/SIGTERM/SIGHUP/SIGQUIT;
//   124      the job deadline passed.
// On any non-zero result it prints FailureSummary() to options.err: one row per process
// (rank, name, pid, host, how it ended, "<- root cause" on the first failure), then the last
// tail_lines stderr lines of the root cause and of every other process that failed on its own.
//
// Threading: a Supervisor is used from one thread. Only one Supervisor may be running (between
// Start() and the end of Wait()) per process, because it owns the handlers of SIGCHLD and of
// the launcher signals for that time; the previous handlers are restored when Wait() returns.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::launcher {

// How long one poll() may block; also bounds how late a deadline or a missed SIGCHLD is seen.
inline constexpr int kMaxPollIntervalMs = 100;
// Longest line relayed in one piece.
inline constexpr size_t kMaxLineBytes = 64 * 1024;
// How long to wait for SIGKILLed processes to be reaped before giving up on them.
inline constexpr int kKillWaitMs = 5000;
// How long to wait, once every process is gone, for output still in the pipes.
inline constexpr int kDrainWaitMs = 1000;
// Signals to the launcher that stop the job in order, as SIGTERM does (exit 128 + the
// signal): Ctrl-C, `kill`, a closed terminal or dropped ssh session, Ctrl-\.
bool IsStopSignal(int sig);
// Signals to the launcher passed on to each rank's program while the job goes on.
bool IsForwardedSignal(int sig);
// Signals to the launcher that stop the whole job, then the launcher, until it is continued:
// SIGTSTP (Ctrl-Z). Not SIGTTIN (the launcher never reads its terminal) nor SIGTTOU: caught,
// a write of a background launcher to a `stty tostop` terminal would raise it again on every
// retry instead of stopping; it keeps its default action and stops the launcher alone.
bool IsJobControlStop(int sig);

// Exit statuses Wait() returns for causes that are not a process's own status.
inline constexpr int kExitCannotExecute = 127;
inline constexpr int kExitJobDeadline = 124;

struct ProcessResult;

struct ProcessSpec {
  int rank = 0;
  // Shown in the prefix and the summary: "rank 3", or "rank 3 program" when a rank has several
  // processes. Empty means "rank <rank>".
  std::string name;
  // argv[0] is the program; it is looked up in $PATH when it has no '/'. Must not be empty.
  std::vector<std::string> argv;
  // Added to (and overriding) the launcher's own environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Working directory; empty means the launcher's.
  std::string cwd;
  // The host the process runs on when argv reaches another machine (an ssh or similar
  // prefix), for the summary; empty means this one.
  std::string host;
  // argv reaches another machine (an rsh prefix): the local process is the remote shell, which
  // a signal meant for the program (IsForwardedSignal) would end.
  bool remote = false;
  // Serves the other processes of its rank (a daemon beside a program). Once every one of
  // them has exited 0 and it is still running SupervisorOptions::service_linger later, it is
  // stopped (SIGTERM, SIGKILL after the grace period) and the job does not fail for it: a
  // program that ends without ever calling its daemon must not leave the job waiting forever.
  bool service = false;
  // For a service on this machine: a path that exists once it serves (a daemon's socket).
  // A service that exits 0 while a program of its rank still runs, and before this path was
  // ever there, never served that program: the job fails at once (the program would wait
  // for it until its own timeout). Empty: not checked.
  std::string ready_path;
  // For a process whose exit 0 is to be trusted only once it has done something the
  // launcher can see (a gyred reached through a remote shell exits 0 only after it joined
  // the job; a remote shell that never ran it, `--rsh true`, exits 0 at once): asked when it
  // exits 0 on its own, answers "" when it has, else why the exit is not a success ("before
  // joining the job: ..."; what comes before the first ':' is its short form, for the
  // summary's table). Then the exit fails the job (ProcessResult::exit_zero_refused).
  // Called on the thread that runs Wait(). Empty: not asked.
  std::function<std::string()> check_exit_zero;
  // Told when the process exits 0 on its own (not stopped by the launcher; an exit
  // check_exit_zero refused is a failure, not told): gyrerun marks a rank's exit in the job's
  // store here, so that ranks still waiting for it at the rendezvous stop waiting. Called on
  // the thread that runs Wait(), so it must be quick. Empty: not told.
  std::function<void(const ProcessResult&)> on_exit_zero;
  // When set, every line the process writes to stdout is also written to
  // <log_prefix>.stdout, and every stderr line to <log_prefix>.stderr, without the "[name] "
  // prefix (files created, or emptied, at Start). A line that cannot be written there counts
  // in LostOutput; the job goes on.
  std::string log_prefix;
};

// The rank a failed job's own verdict blames, and how ("stalled", "diverged", ...).
struct Blame {
  Blame() = default;
  Blame(int blamed_rank, int64_t blamed_pid, std::string how)
      : rank(blamed_rank), pid(blamed_pid), what(std::move(how)) {}

  int rank = -1;    // none
  int64_t pid = 0;  // the rank's process it saw, when known: a daemon, say, not its program
  std::string what;
  // Or the verdicts contradict each other: the ranks of one side blame a rank of the other,
  // and those of the other blame one of the first (a cut network between two groups of
  // ranks: each side finds the other unreachable). No one rank is at fault then: both sides
  // are set (ascending) and `rank` is -1. `what_a` and `what_b` are the classes each side
  // gave the other, as most of its ranks did.
  std::vector<int> side_a, side_b;
  std::string what_a, what_b;
  bool contradicted() const { return !side_a.empty() && !side_b.empty(); }
};

struct SupervisorOptions {
  // From SIGTERM to SIGKILL during a shutdown.
  Duration grace_period = Seconds(3);
  // Stderr lines kept per process for the failure summary.
  size_t tail_lines = 20;
  // Put "[<name>] " in front of every relayed line.
  bool prefix_output = true;
  // Where children's stdout / stderr lines (and the summary, on err) go. Not owned; must
  // outlive the Supervisor.
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  // The whole job must end by then (on SteadyClock). Infinite by default.
  Deadline job_deadline = Deadline::Infinite();
  // After the first failure, how long to keep collecting exits before choosing the root
  // cause and stopping the rest: long enough for the survivors to report the verdict, and a
  // process killed by a signal in that time is preferred over one that exited with an error
  // (usually reporting the killed one). It ends early once no survivor is left to report
  // (NoSurvivorLeftToReport).
  Duration settle_time = Millis(1500);
  // When above settle_time: each further failed exit in the window starts it again, up to
  // this long after the first failure (survivors that report in turn, in large jobs).
  Duration settle_limit = Duration::zero();
  // Catch the stop signals sent to the launcher and shut the job down (exit 128 + the signal),
  // and pass the forwarded ones on to the ranks' programs (IsStopSignal, IsForwardedSignal).
  // Turn off when the embedding program handles these itself.
  bool handle_termination_signals = true;
  // How long a ProcessSpec::service process may outlive the rest of its rank (a daemon
  // normally exits with its client at once, and lingers up to 3 s after a failed call).
  Duration service_linger = Seconds(5);
  // Asked once, when the summary of a failed job is written: the rank the ranks' own verdict
  // blames (gyrerun reads their flight records). When it names a rank other than that of
  // the first process to fail, and that process was not killed by a signal, the summary
  // names the blamed rank as the root cause: ranks that time out on a stopped or late rank
  // all exit reporting it, and the first of them to exit is only the fastest reporter. The
  // exit status stays the first failure's. When the verdicts contradict each other
  // (Blame::contradicted), the summary says so, naming both sides, and marks only the first
  // process to exit, as such: the first to report is no more the cause than the others.
  std::function<Blame()> blame;
  // The file that counts the out-of-memory kills of the launcher's memory cgroup
  // (launcher/oom_kills.h: OwnOomKillCounterPath()); empty: none. Read at Start and when the
  // summary names a process killed by SIGKILL as the root cause: a count that rose in between
  // adds "(likely the kernel's out-of-memory killer: ...)" to the summary's first line. Where
  // it cannot be read, nothing is said.
  std::string oom_kill_counter;
};

// What became of one process. Filled in as the job runs; final once Wait() returned.
struct ProcessResult {
  int rank = 0;
  std::string name;
  pid_t pid = -1;
  std::string host;
  bool exited = false;    // exited normally; exit_code is valid
  bool signaled = false;  // died by a signal; signal is valid
  int exit_code = 0;
  int signal = 0;
  // The launcher signalled it (SIGTERM, maybe then SIGKILL) before it ended.
  bool killed_by_launcher = false;
  // ...because it was a service whose rank's other processes had all exited 0; not a failure.
  bool stopped_as_service = false;
  // ...and SIGTERM was not enough within the grace period (or a second Ctrl-C came).
  bool sigkilled_by_launcher = false;
  // A service that exited 0 before it ever served, while its rank's program still ran
  // (ProcessSpec::ready_path): the program has nothing to call.
  bool never_served = false;
  // An exit 0 that ProcessSpec::check_exit_zero refused, and why ("before joining the job
  // ..."); empty otherwise.
  std::string exit_zero_refused;
  // ProcessSpec::service, as given.
  bool service = false;
  // The first process to fail on its own; at most one per job.
  bool root_cause = false;
  // "cannot execute <path>: <strerror>" when the child never ran the program.
  std::string launch_error;
  // The last SupervisorOptions::tail_lines lines it wrote to stderr.
  std::vector<std::string> stderr_tail;
  // From Start() until its exit was seen.
  Duration run_time{0};

  bool finished() const { return exited || signaled; }
  // Ended by itself with a non-zero status or a signal, a service that never served, or an
  // exit 0 that was refused.
  bool failed_on_its_own() const {
    return finished() && !killed_by_launcher &&
           (signaled || exit_code != 0 || never_served || !exit_zero_refused.empty());
  }
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options = {});
  // If the job is still running (Wait() not called), SIGKILLs and reaps it.
  ~Supervisor();

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Spawns every process. Call once. On error nothing is left running.
  Status Start(std::vector<ProcessSpec> specs);

  // Supervises until every process has exited; returns the launcher's exit status (see the
  // top of this file). REQUIRES: Start() returned OK. Call once.
  int Wait();

  // Stops the job from another thread (a watchdog): an orderly shutdown as for SIGTERM, but
  // Wait() returns `exit_status` and the summary opens with `reason`. Ignored once the job
  // has ended or is already stopping. Thread-safe.
  void RequestStop(const std::string& reason, int exit_status);

  // One entry per ProcessSpec, in Start() order.
  std::vector<ProcessResult> results() const;
  // The first stop signal (IsStopSignal) the launcher received while the job ran, 0 if none:
  // also one that came once every process had ended, which no longer changes the exit status
  // but tells a caller that would start the job again (gyrerun --max_restarts) not to.
  int ReceivedSignal() const { return received_signal_; }
  // The job deadline as it stands: SupervisorOptions::job_deadline pushed back by the time the
  // job was stopped (IsJobControlStop). Final once Wait() returned.
  Deadline job_deadline() const { return options_.job_deadline; }
  // Thread-safe, for a watchdog that must not count a stop either: when (on SteadyClock) the
  // job was last continued after a stop (IsJobControlStop); zero if it never stopped.
  TimePoint LastContinued() const { return TimePoint(Duration(continued_at_ns_.load())); }
  // The job's process group, or -1 before Start().
  pid_t process_group() const { return pgid_; }
  // The text printed after a failed job; empty while running or when the job succeeded.
  std::string FailureSummary() const { return summary_; }
  // Empty when every relayed line was written; otherwise what was lost, as "N lines of the
  // ranks' stdout (the first from rank 2) could not be written: <reason>" (a full disk,
  // /dev/full, a closed pipe), and likewise for lines that did not reach a process's log
  // files (ProcessSpec::log_prefix). The job goes on either way; the caller decides (gyrerun
  // fails a job that would otherwise exit 0). Final once Wait() returned.
  std::string LostOutput() const;

 private:
  class SignalRelay;
  struct Stream;
  struct Child;

  Status SpawnGuardian();
  Status SpawnOne(Child* child);
  void SweepExits();
  // Reaps exited descendants of the ranks that were re-parented to the launcher (it is a child
  // subreaper), so their pids are not held until the job ends. Only the job's process group.
  void ReapOrphans();
  // Stops the ProcessSpec::service processes whose rank's other processes ended, as above.
  void StopIdleServices();
  void RecordExit(Child* child, int code, int status);
  // Whether a non-service process of `rank` is still running (not merely unreaped).
  bool ProgramOfRankRunning(int rank) const;
  void BeginShutdown(const std::string& reason);
  void SignalLive(int sig);
  // Passes a forwarded signal on to every live program on this host (IsForwardedSignal).
  void ForwardToPrograms(int sig);
  void HandleSignalBytes();
  // SIGTSTP and the like (IsJobControlStop): stops every process of the job and then the
  // launcher; once continued, continues the job and pushes every deadline back by the stop.
  void StopJobAndSelf(int sig);
  // One bounded poll() over the relay pipe and every open output pipe.
  void PollOnce(int timeout_ms);
  void ReadStream(Child* child, Stream* stream);
  void ReadLaunchReport(Child* child);
  void EmitLine(Child* child, Stream* stream, const std::string& line);
  // After every direct child ended: SIGKILL and reap what is left of the process group.
  void FinishGroup();
  void DrainOutput(Deadline deadline);
  void CloseAll();
  // Start() failed or Wait() was never called: SIGKILL everything and reap, bounded.
  void KillAllAndReap();
  bool HasOpenFds() const;
  size_t LiveCount() const;
  // After a failure: every process still running is a service (a daemon) of the root
  // cause's rank (stopped, say) or of a rank whose programs have ended (lingering after a
  // failed call), so no survivor is left to report and the settle window can end.
  bool NoSurvivorLeftToReport() const;
  // Per rank, of its processes that are not services: whether it has any, whether all have
  // exited 0, and whether one is still running.
  struct RankPrograms {
    bool served = false;
    bool all_ok = true;
    bool running = false;
  };
  std::unordered_map<int, RankPrograms> ProgramsByRank() const;
  int ComputeExitStatus() const;
  std::string BuildSummary() const;
  // The ranks' verdicts (SupervisorOptions::blame), asked only where the summary names a
  // failure a verdict may explain: not under a stop, a signal or the job deadline, nor over a
  // first failure that was a crash or a process that never ran.
  Blame VerdictsOnFirstFailure() const;
  // The process `blame` names over the first failure, or null; *how says how the verdict
  // classed its rank.
  const Child* BlamedOverFirstFailure(const Blame& blame, std::string* how) const;

  SupervisorOptions options_;
  const Clock* clock_ = SteadyClock::Get();
  std::string host_;
  std::unique_ptr<SignalRelay> relay_;
  std::vector<std::unique_ptr<Child>> children_;
  // The job's process group is led by the guardian; while it lives the group id is ours.
  pid_t pgid_ = -1;
  pid_t guardian_pid_ = -1;
  int guardian_fd_ = -1;  // write end of the pipe the guardian watches
  // The group has been emptied and reaped: its id may be reused, never signal it.
  bool group_released_ = false;
  bool started_ = false;
  bool waited_ = false;
  TimePoint start_time_{};

  bool shutting_down_ = false;
  bool finishing_ = false;  // every child has ended; launcher signals are ignored
  std::string shutdown_reason_;
  TimePoint sigterm_time_{};
  TimePoint sigkill_time_{};
  Deadline kill_deadline_ = Deadline::Infinite();
  Deadline kill_wait_deadline_ = Deadline::Infinite();
  bool sent_sigkill_ = false;
  int launcher_signal_ = 0;  // the stop signal received by the launcher
  int received_signal_ = 0;  // the first of them, even one that came as the job finished
  // RequestStop: guarded by stop_mu_ until Wait() has read them.
  std::mutex stop_mu_;
  bool stop_requested_ = false;
  bool stop_accepted_ = true;  // false once Wait() no longer reads the relay pipe
  std::string stop_reason_;
  int stop_status_ = 0;
  bool stopped_on_request_ = false;
  bool deadline_fired_ = false;
  // The end of the last stop (StopJobAndSelf), in ns on SteadyClock: LastContinued.
  std::atomic<int64_t> continued_at_ns_{0};
  Child* root_cause_ = nullptr;
  Deadline settle_deadline_ = Deadline::Infinite();
  Deadline settle_limit_ = Deadline::Infinite();
  Deadline signal_preferred_until_ = Deadline::Infinite();
  std::vector<std::string> notes_;  // extra summary lines, e.g. processes that would not die
  std::string summary_;
  // Relayed lines that did not reach options_.out / options_.err, and the first loss.
  struct Lost {
    int64_t lines = 0;
    std::string first_from;
    int first_errno = 0;
  };
  Lost lost_out_, lost_err_, lost_log_;
  // SupervisorOptions::oom_kill_counter's count at Start.
  std::optional<int64_t> oom_kills_at_start_;
};

}  // namespace gyre::launcher
