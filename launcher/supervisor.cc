#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/base/file_io.h"
#include "glog/logging.h"
#include "launcher/oom_kills.h"
#include "launcher/signal_name.h"

extern char** environ;

namespace gyre::launcher {
namespace {

// Written by the signal handlers; -1 when no Supervisor is running.
std::atomic<int> g_signal_pipe_write{-1};
std::atomic<bool> g_relay_in_use{false};

void RelaySignal(int sig) {
  int saved_errno = errno;
  int fd = g_signal_pipe_write.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(sig);
    // A full pipe drops the byte; the periodic exit sweep still catches SIGCHLD, and the pipe
    // is drained every turn, so a launcher signal cannot be lost in practice.
    ssize_t ignored = write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Sent by a child that never reached the program, through a close-on-exec pipe: EOF on that
// pipe means execve succeeded.
struct LaunchFailure {
  int32_t stage;  // kStageExec or kStageChdir
  int32_t error;
};
constexpr int32_t kStageExec = 0;
constexpr int32_t kStageChdir = 1;

// Moves `fd` to a number >= 3 so that dup2() onto 0..2 in the child cannot clobber it.
int MoveAboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

Status MakePipe(int fds[2], const std::string& what) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    int err = errno;
    return ResourceExhaustedError("cannot create " + what + " pipe: " + ErrnoText(err));
  }
  fds[0] = MoveAboveStdio(fds[0]);
  fds[1] = MoveAboveStdio(fds[1]);
  if (fds[0] < 0 || fds[1] < 0) {
    int err = errno;
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    return ResourceExhaustedError("cannot create " + what + " pipe: " + ErrnoText(err));
  }
  return Status::Ok();
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// execvp-style lookup done before fork, so the child only calls async-signal-safe functions.
// Returns an empty string when a bare name is not found in $PATH.
std::string ResolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    begin = end + 1;
  }
  return "";
}

std::vector<std::string> BuildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& [key, value] : extra) {
    std::string prefix = key + "=";
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }),
              env.end());
    env.push_back(prefix + value);
  }
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Closes every descriptor >= `first` except `keep` (> first). Runs in a forked child.
void CloseInheritedFds(int first, int keep) {
  bool done = (keep == first || close_range(static_cast<unsigned>(first),
                                            static_cast<unsigned>(keep) - 1, 0) == 0) &&
              close_range(static_cast<unsigned>(keep) + 1, ~0U, 0) == 0;
  if (done) return;
  struct rlimit limit;
  int max_fd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    max_fd = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  }
  for (int fd = first; fd < max_fd; ++fd) {
    if (fd != keep) close(fd);
  }
}

// Body of the group guardian (see SpawnGuardian). Async-signal-safe calls only.
[[noreturn]] void GuardianMain(int launcher_fd, pid_t launcher) {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(sig, &ignore, nullptr);
  }
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  CloseInheritedFds(0, launcher_fd);
  // EOF (or any event) on the pipe means the launcher is gone or wants the job gone; the
  // getppid() check covers a write end that leaked into another process.
  for (;;) {
    struct pollfd pfd = {launcher_fd, POLLIN, 0};
    int ready = poll(&pfd, 1, 1000);
    if (ready > 0 || (ready < 0 && errno != EINTR) || getppid() != launcher) break;
  }
  kill(0, SIGKILL);  // the whole job's group, this process included
  _exit(0);
}

[[noreturn]] void ChildFail(int report_fd, int32_t stage, int error) {
  LaunchFailure failure{stage, error};
  ssize_t ignored = write(report_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(kExitCannotExecute);
}

// Reaps `pid` after it was SIGKILLed; gives up (leaving a zombie) after kKillWaitMs.
void ReapKilled(pid_t pid, const Clock& clock) {
  Deadline deadline = Deadline::After(clock, Millis(kKillWaitMs));
  while (!deadline.Expired(clock)) {
    siginfo_t info{};
    int rc = waitid(P_PID, pid, &info, WEXITED | WNOHANG);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || info.si_pid == pid) return;
    poll(nullptr, 0, 5);
  }
}

int MillisUntil(const Deadline& deadline, const Clock& clock) {
  if (deadline.infinite()) return kMaxPollIntervalMs;
  Duration left = deadline.Remaining(clock);
  int64_t ms = (std::chrono::duration_cast<std::chrono::microseconds>(left).count() + 999) / 1000;
  return static_cast<int>(std::clamp<int64_t>(ms, 0, kMaxPollIntervalMs));
}

}  // namespace

bool IsStopSignal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

bool IsForwardedSignal(int sig) { return sig == SIGUSR1 || sig == SIGUSR2; }

bool IsJobControlStop(int sig) { return sig == SIGTSTP; }

// Owns the self-pipe and the signal handlers for the lifetime of one running job.
class Supervisor::SignalRelay {
 public:
  static StatusOr<std::unique_ptr<SignalRelay>> Install(bool termination_signals) {
    bool expected = false;
    if (!g_relay_in_use.compare_exchange_strong(expected, true)) {
      return InvalidArgumentError("another gyre::launcher::Supervisor is already running");
    }
    std::unique_ptr<SignalRelay> relay(new SignalRelay());
    if (pipe2(relay->fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      int err = errno;
      g_relay_in_use = false;
      return ResourceExhaustedError("cannot create the signal pipe: " + ErrnoText(err));
    }
    g_signal_pipe_write = relay->fds_[1];
    relay->Catch(SIGCHLD, SA_NOCLDSTOP | SA_RESTART);
    if (termination_signals) {
      // Left to their default action, SIGQUIT, SIGUSR1 and SIGUSR2 ended the launcher at
      // once: its run folder, with the job's secret, stayed behind.
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP}) {
        // A closed terminal or a dropped ssh session stops the job in order, as SIGTERM does;
        // unless SIGHUP is ignored (nohup), which then holds for the job too. Likewise a
        // launcher that ignores Ctrl-Z (started by a shell without job control) is not
        // stopped by one, nor is its job.
        struct sigaction old {};
        if ((sig == SIGHUP || IsJobControlStop(sig)) && sigaction(sig, nullptr, &old) == 0 &&
            old.sa_handler == SIG_IGN) {
          continue;
        }
        relay->Catch(sig, SA_RESTART);
      }
    }
    relay->had_subreaper_ = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &relay->had_subreaper_, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    return relay;
  }

  ~SignalRelay() {
    RestoreHandlers();
    prctl(PR_SET_CHILD_SUBREAPER, had_subreaper_, 0, 0, 0);
    g_signal_pipe_write = -1;
    close(fds_[0]);
    close(fds_[1]);
    g_relay_in_use = false;
  }

  // Gives the signals back to the handlers the launcher had before; idempotent. What arrived
  // before is still in the pipe for a last Drain.
  void RestoreHandlers() {
    for (const auto& [sig, old] : previous_) sigaction(sig, &old, nullptr);
    previous_.clear();
  }

  int read_fd() const { return fds_[0]; }

  // The signals delivered since the last call, in arrival order.
  std::vector<int> Drain() {
    std::vector<int> signals;
    unsigned char buf[256];
    for (;;) {
      ssize_t n = read(fds_[0], buf, sizeof(buf));
      if (n > 0) {
        signals.insert(signals.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    return signals;
  }

 private:
  SignalRelay() = default;

  void Catch(int sig, int flags) {
    struct sigaction action {};
    action.sa_handler = RelaySignal;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    struct sigaction old {};
    if (sigaction(sig, &action, &old) == 0) previous_.emplace_back(sig, old);
  }

  int fds_[2] = {-1, -1};
  std::vector<std::pair<int, struct sigaction>> previous_;
  int had_subreaper_ = 0;
};

struct Supervisor::Stream {
  int fd = -1;
  bool is_stderr = false;
  std::string partial;
  int log_fd = -1;  // ProcessSpec::log_prefix's file for this stream, or -1
  std::string log_path;
};

struct Supervisor::Child {
  ProcessSpec spec;
  ProcessResult result;
  Stream out;
  Stream err;
  int launch_fd = -1;  // read end of the LaunchFailure pipe
  // A service: when it is to be stopped (its rank's other processes all ended 0), and when
  // it is to be killed once stopped.
  Deadline service_stop = Deadline::Infinite();
  Deadline service_kill = Deadline::Infinite();
  bool ready_seen = false;  // its ProcessSpec::ready_path has been there
  std::deque<std::string> tail;
  std::string prefix;
};

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {
  CHECK(options_.out != nullptr && options_.err != nullptr) << "out and err must be set";
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    host_ = host;
  } else {
    host_ = "localhost";
  }
}

Supervisor::~Supervisor() {
  if (started_ && !waited_) KillAllAndReap();
}

Status Supervisor::Start(std::vector<ProcessSpec> specs) {
  CHECK(!started_) << "Supervisor::Start called twice";
  if (specs.empty()) return InvalidArgumentError("no processes to start");
  oom_kills_at_start_ = ReadOomKillCount(options_.oom_kill_counter);
  for (ProcessSpec& spec : specs) {
    if (spec.argv.empty() || spec.argv[0].empty()) {
      return InvalidArgumentError("rank " + std::to_string(spec.rank) + " has no program");
    }
    if (spec.name.empty()) spec.name = "rank " + std::to_string(spec.rank);
    for (const auto& kv : spec.env) {
      if (kv.first.empty() || kv.first.find('=') != std::string::npos) {
        return InvalidArgumentError(spec.name + ": bad environment variable name '" + kv.first +
                                    "'");
      }
    }
  }
  // Every log file is opened before any process starts: one that cannot be made fails the
  // job before it runs, naming the file.
  std::vector<std::pair<int, int>> log_fds(specs.size(), {-1, -1});
  auto close_logs = [&log_fds] {
    for (auto& [out, err] : log_fds) {
      CloseFd(&out);
      CloseFd(&err);
    }
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].log_prefix.empty()) continue;
    for (auto [suffix, fd] : {std::pair<const char*, int*>{".stdout", &log_fds[i].first},
                              std::pair<const char*, int*>{".stderr", &log_fds[i].second}}) {
      const std::string path = specs[i].log_prefix + suffix;
      *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (*fd < 0) {
        const int err = errno;
        close_logs();
        return InvalidArgumentError(specs[i].name + ": cannot open its log file " + path + ": " +
                                    std::strerror(err));
      }
    }
  }
  StatusOr<std::unique_ptr<SignalRelay>> relay =
      SignalRelay::Install(options_.handle_termination_signals);
  if (!relay.ok()) {
    close_logs();
    return relay.status();
  }
  relay_ = std::move(relay).value();
  started_ = true;
  start_time_ = clock_->Now();
  Status guardian = SpawnGuardian();
  if (!guardian.ok()) {
    close_logs();
    KillAllAndReap();
    waited_ = true;
    return guardian;
  }

  for (size_t i = 0; i < specs.size(); ++i) {
    ProcessSpec& spec = specs[i];
    auto child = std::make_unique<Child>();
    // Owned by the child from here: CloseAll closes them.
    child->out.log_fd = std::exchange(log_fds[i].first, -1);
    child->err.log_fd = std::exchange(log_fds[i].second, -1);
    if (!spec.log_prefix.empty()) {
      child->out.log_path = spec.log_prefix + ".stdout";
      child->err.log_path = spec.log_prefix + ".stderr";
    }
    child->spec = std::move(spec);
    child->result.rank = child->spec.rank;
    child->result.name = child->spec.name;
    child->result.service = child->spec.service;
    child->result.host = child->spec.host.empty() ? host_ : child->spec.host;
    child->prefix = options_.prefix_output ? "[" + child->spec.name + "] " : "";
    child->err.is_stderr = true;
    children_.push_back(std::move(child));
    Status status = SpawnOne(children_.back().get());
    if (!status.ok()) {
      for (Stream* stream : {&children_.back()->out, &children_.back()->err}) {
        CloseFd(&stream->log_fd);
      }
      children_.pop_back();
      close_logs();
      KillAllAndReap();
      waited_ = true;
      return status;
    }
  }
  return Status::Ok();
}

Status Supervisor::SpawnGuardian() {
  int pipe_fds[2];
  GYRE_RETURN_IF_ERROR(MakePipe(pipe_fds, "guardian"));
  const pid_t launcher = getpid();
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = fork();
  if (pid == 0) GuardianMain(pipe_fds[0], launcher);
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  CloseFd(&pipe_fds[0]);
  if (pid < 0) {
    CloseFd(&pipe_fds[1]);
    return ResourceExhaustedError("cannot fork the process group guardian: " +
                                  ErrnoText(fork_errno));
  }
  setpgid(pid, pid);
  guardian_pid_ = pid;
  guardian_fd_ = pipe_fds[1];
  if (getpgid(pid) != pid) {
    int err = errno;
    kill(pid, SIGKILL);
    ReapKilled(pid, *clock_);
    guardian_pid_ = -1;
    CloseFd(&guardian_fd_);
    return InternalError("cannot give the job its own process group (guardian pid " +
                         std::to_string(pid) + "): " + ErrnoText(err));
  }
  pgid_ = pid;
  return Status::Ok();
}

Status Supervisor::SpawnOne(Child* child) {
  const ProcessSpec& spec = child->spec;
  std::string path = ResolveProgram(spec.argv[0]);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<std::string> env_strings = BuildEnvironment(spec.env);
  std::vector<char*> envp = CStrings(env_strings);

  int out_pipe[2], err_pipe[2], launch_pipe[2];
  GYRE_RETURN_IF_ERROR(MakePipe(out_pipe, spec.name + " stdout"));
  Status status = MakePipe(err_pipe, spec.name + " stderr");
  if (!status.ok()) {
    CloseFd(&out_pipe[0]);
    CloseFd(&out_pipe[1]);
    return status;
  }
  status = MakePipe(launch_pipe, spec.name + " launch");
  int dev_null = status.ok() ? MoveAboveStdio(open("/dev/null", O_RDONLY | O_CLOEXEC)) : -1;
  if (status.ok() && dev_null < 0) {
    int err = errno;
    status = ResourceExhaustedError("cannot open /dev/null: " + ErrnoText(err));
    CloseFd(&launch_pipe[0]);
    CloseFd(&launch_pipe[1]);
  }
  if (!status.ok()) {
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) CloseFd(fd);
    return status;
  }

  const pid_t parent = getpid();
  const pid_t group = pgid_;
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  const char* exec_path = path.empty() ? nullptr : path.c_str();

  // Signals stay blocked across fork so the child never runs the relay handler.
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only from here to execve.
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig == SIGKILL || sig == SIGSTOP) continue;
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(sig, &dfl, nullptr);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent) _exit(kExitCannotExecute);  // the launcher died before prctl
    setpgid(0, group);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (dup2(dev_null, 0) < 0 || dup2(out_pipe[1], 1) < 0 || dup2(err_pipe[1], 2) < 0) {
      ChildFail(launch_pipe[1], kStageExec, errno);
    }
    CloseInheritedFds(3, launch_pipe[1]);
    if (cwd != nullptr && chdir(cwd) != 0) ChildFail(launch_pipe[1], kStageChdir, errno);
    if (exec_path == nullptr) ChildFail(launch_pipe[1], kStageExec, ENOENT);
    execve(exec_path, argv.data(), envp.data());
    ChildFail(launch_pipe[1], kStageExec, errno);
  }
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  for (int* fd : {&out_pipe[1], &err_pipe[1], &launch_pipe[1], &dev_null}) CloseFd(fd);
  if (pid < 0) {
    for (int* fd : {&out_pipe[0], &err_pipe[0], &launch_pipe[0]}) CloseFd(fd);
    return ResourceExhaustedError("cannot fork " + spec.name + ": " + ErrnoText(fork_errno));
  }

  // Both sides call setpgid so the group is set whichever runs first.
  setpgid(pid, pgid_);
  child->result.pid = pid;
  child->out.fd = out_pipe[0];
  child->err.fd = err_pipe[0];
  child->launch_fd = launch_pipe[0];
  for (int fd : {child->out.fd, child->err.fd, child->launch_fd}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  // Every later killpg() relies on the group being exactly the one made here.
  pid_t actual_group = getpgid(pid);
  if (actual_group != pgid_) {
    int err = errno;
    kill(pid, SIGKILL);
    ReapKilled(pid, *clock_);
    for (int* fd : {&child->out.fd, &child->err.fd, &child->launch_fd}) CloseFd(fd);
    return InternalError(spec.name + " (pid " + std::to_string(pid) + ") is in process group " +
                         std::to_string(actual_group) + ", not " + std::to_string(pgid_) +
                         (actual_group < 0 ? ": " + ErrnoText(err) : ""));
  }
  return Status::Ok();
}

size_t Supervisor::LiveCount() const {
  size_t live = 0;
  for (const auto& child : children_) {
    if (child->result.pid > 0 && !child->result.finished()) ++live;
  }
  return live;
}

std::unordered_map<int, Supervisor::RankPrograms> Supervisor::ProgramsByRank() const {
  std::unordered_map<int, RankPrograms> programs;
  for (const auto& child : children_) {
    if (child->spec.service) continue;
    const ProcessResult& r = child->result;
    RankPrograms& p = programs[child->spec.rank];
    p.served = true;
    p.all_ok = p.all_ok && r.exited && r.exit_code == 0;
    p.running = p.running || (r.pid > 0 && !r.finished());
  }
  return programs;
}

bool Supervisor::NoSurvivorLeftToReport() const {
  if (root_cause_ == nullptr) return false;
  const int root_rank = root_cause_->result.rank;
  const std::unordered_map<int, RankPrograms> programs = ProgramsByRank();
  for (const auto& child : children_) {
    const ProcessResult& r = child->result;
    if (r.pid <= 0 || r.finished()) continue;
    if (!child->spec.service) return false;
    // A service reports nothing of its own once its rank's programs ended (or it is the
    // failed rank's, stopped say); one whose rank has no program is the workload itself.
    const auto it = programs.find(r.rank);
    if (r.rank != root_rank && (it == programs.end() || it->second.running)) return false;
  }
  return true;
}

void Supervisor::SweepExits() {
  for (auto& child : children_) {
    ProcessResult& r = child->result;
    if (r.pid <= 0 || r.finished()) continue;
    struct stat ready {};
    if (!child->ready_seen && !child->spec.ready_path.empty() &&
        ::stat(child->spec.ready_path.c_str(), &ready) == 0) {
      child->ready_seen = true;
    }
    int flags = WEXITED | WNOHANG;
    siginfo_t info{};
    int rc;
    do {
      rc = waitid(P_PID, r.pid, &info, flags);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0 && info.si_pid == r.pid) {
      RecordExit(child.get(), info.si_code, info.si_status);
    } else if (rc < 0 && errno == ECHILD) {
      // Someone else in this process reaped it; its status is gone.
      notes_.push_back(r.name + " (pid " + std::to_string(r.pid) +
                       ") was reaped outside gyrerun; its exit status is unknown");
      RecordExit(child.get(), CLD_EXITED, 255);
    }
  }
  ReapOrphans();
}

void Supervisor::ReapOrphans() {
  if (pgid_ <= 0 || group_released_ || finishing_) return;
  for (int i = 0; i < 4096; ++i) {
    siginfo_t info{};
    // Peek first: a rank's status is SweepExits' to take, the guardian's FinishGroup's.
    int rc = waitid(P_PGID, static_cast<id_t>(pgid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc < 0 && errno == EINTR) continue;
    if (rc != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    bool ours = pid == guardian_pid_;
    for (const auto& child : children_) {
      ours = ours || (child->result.pid == pid && !child->result.finished());  // pids are reused
    }
    if (ours) return;
    siginfo_t gone{};
    while (waitid(P_PID, static_cast<id_t>(pid), &gone, WEXITED | WNOHANG) < 0 && errno == EINTR) {
    }
  }
}

bool Supervisor::ProgramOfRankRunning(int rank) const {
  for (const auto& other : children_) {
    const ProcessResult& o = other->result;
    if (other->spec.service || other->spec.rank != rank || o.pid <= 0 || o.finished()) continue;
    // Exited but not reaped yet (this sweep may come to it after its service) is not running.
    siginfo_t info{};
    const int rc = waitid(P_PID, static_cast<id_t>(o.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == 0) return true;
  }
  return false;
}

void Supervisor::RecordExit(Child* child, int code, int status) {
  ProcessResult& r = child->result;
  if (code == CLD_EXITED) {
    r.exited = true;
    r.exit_code = status;
  } else {
    r.signaled = true;
    r.signal = status;
  }
  r.run_time = clock_->Now() - start_time_;
  // A daemon that served leaves its socket behind (and was seen serving); one that exits 0
  // without ever having served while its program runs leaves that program nothing to call.
  // One that exits 0 after its program has ended (it never called) is not a failure.
  struct stat ready {};
  if (child->spec.service && !child->spec.ready_path.empty() && r.exited && r.exit_code == 0 &&
      !shutting_down_ && !r.killed_by_launcher && !child->ready_seen &&
      ::stat(child->spec.ready_path.c_str(), &ready) != 0 &&
      ProgramOfRankRunning(child->spec.rank)) {
    r.never_served = true;
  }
  // An exit 0 that proves nothing by itself (a remote shell's) is asked about, unless the
  // launcher ended it: stopped, its exit is not its own doing.
  if (child->spec.check_exit_zero && r.exited && r.exit_code == 0 && !r.killed_by_launcher) {
    r.exit_zero_refused = child->spec.check_exit_zero();
  }
  if (child->spec.on_exit_zero && r.exited && r.exit_code == 0 && !r.killed_by_launcher &&
      r.exit_zero_refused.empty()) {
    child->spec.on_exit_zero(r);
  }
  if (shutting_down_ || !r.failed_on_its_own()) return;
  if (root_cause_ == nullptr) {
    r.root_cause = true;
    root_cause_ = child;
    signal_preferred_until_ = Deadline::After(*clock_, options_.settle_time);
    settle_limit_ = Deadline::After(*clock_, std::max(options_.settle_time, options_.settle_limit));
    settle_deadline_ = signal_preferred_until_;
    return;
  }
  // Survivors are still reporting: keep listening, up to the limit.
  if (!settle_deadline_.Expired(*clock_)) {
    settle_deadline_ = Deadline::After(*clock_, options_.settle_time).Min(settle_limit_);
  }
  // Within settle_time of the first failure (not the extended window) a process killed by a
  // signal outranks one that exited with an error: the survivors of a crash exit reporting
  // the crash, a moment after it.
  if (r.signaled && !root_cause_->result.signaled && !signal_preferred_until_.Expired(*clock_)) {
    // Say so: a survivor that aborts on a peer's failure would take the blame otherwise.
    const ProcessResult& first = root_cause_->result;
    notes_.push_back(first.name + " (pid " + std::to_string(first.pid) + ") had exited with code " +
                     std::to_string(first.exit_code) + " " +
                     FormatDuration(r.run_time - first.run_time) + " before " + r.name +
                     " was killed by " + SignalName(r.signal) +
                     "; the signal is taken as the root cause (see both stderr tails)");
    root_cause_->result.root_cause = false;
    r.root_cause = true;
    root_cause_ = child;
  }
}

void Supervisor::StopIdleServices() {
  // One pass over the children, then one over the services: this runs every turn of the
  // supervision loop, and a pass per service cost O(children^2) at a thousand ranks.
  if (std::none_of(children_.begin(), children_.end(),
                   [](const auto& child) { return child->spec.service; })) {
    return;
  }
  const std::unordered_map<int, RankPrograms> programs = ProgramsByRank();
  for (auto& service : children_) {
    ProcessResult& r = service->result;
    if (!service->spec.service || r.pid <= 0 || r.finished()) continue;
    if (r.stopped_as_service) {
      if (!r.sigkilled_by_launcher && service->service_kill.Expired(*clock_)) {
        kill(r.pid, SIGKILL);
        r.sigkilled_by_launcher = true;
      }
      continue;
    }
    const auto it = programs.find(service->spec.rank);
    if (it == programs.end() || !it->second.served || !it->second.all_ok) continue;
    if (service->service_stop.infinite()) {
      service->service_stop = Deadline::After(*clock_, options_.service_linger);
    } else if (service->service_stop.Expired(*clock_)) {
      kill(r.pid, SIGTERM);
      kill(r.pid, SIGCONT);
      r.killed_by_launcher = true;
      r.stopped_as_service = true;
      service->service_kill = Deadline::After(*clock_, options_.grace_period);
    }
  }
}

void Supervisor::SignalLive(int sig) {
  for (auto& child : children_) {
    ProcessResult& r = child->result;
    if (r.pid <= 0 || r.finished()) continue;
    kill(r.pid, sig);
    if (sig == SIGTERM || sig == SIGKILL) r.killed_by_launcher = true;
    if (sig == SIGKILL) r.sigkilled_by_launcher = true;
  }
  if (sig == SIGTERM) sigterm_time_ = clock_->Now();
  if (sig == SIGKILL) sigkill_time_ = clock_->Now();
  // Also reaches the ranks' own children. Safe: the live guardian holds the group id.
  if (pgid_ > 0 && !group_released_) killpg(pgid_, sig);
}

void Supervisor::ForwardToPrograms(int sig) {
  for (auto& child : children_) {
    const ProcessResult& r = child->result;
    if (child->spec.service || child->spec.remote || r.pid <= 0 || r.finished()) continue;
    kill(r.pid, sig);
  }
}

void Supervisor::BeginShutdown(const std::string& reason) {
  if (shutting_down_) return;
  shutting_down_ = true;
  shutdown_reason_ = reason;
  // Whoever already exited must not be counted as terminated by us.
  SweepExits();
  SignalLive(SIGTERM);
  SignalLive(SIGCONT);
  kill_deadline_ = Deadline::After(*clock_, options_.grace_period);
}

namespace {

// `d` later; an infinite deadline stays infinite.
void PushBack(Deadline* deadline, Duration d) {
  if (deadline->infinite() || d <= Duration::zero()) return;
  *deadline = d >= TimePoint::max() - deadline->when() ? Deadline::Infinite()
                                                       : Deadline::At(deadline->when() + d);
}

}  // namespace

void Supervisor::StopJobAndSelf(int sig) {
  // The ranks are in a process group of their own, which a Ctrl-Z at the terminal does not
  // reach: left running, they would fill the output pipes nobody drains and block there, or
  // give up on each other at a timeout while a rank stands still; so they stop with the
  // launcher, as one job. Their own deadlines do not count the stop (OpMonitor::ProgressDue).
  const bool job = pgid_ > 0 && !group_released_;
  const TimePoint stopped_at = clock_->Now();
  if (job) {
    killpg(pgid_, SIGSTOP);
    // The guardian keeps watching: should the launcher be killed while the job is stopped, it
    // still has to take the group down. SIGCONT resumes it whatever it ignores.
    if (guardian_pid_ > 0) kill(guardian_pid_, SIGCONT);
  }
  std::ostringstream said;
  said << "gyrerun: stopped the job (" << SignalName(sig) << "); `fg` or `kill -CONT " << getpid()
       << "` continues it\n";
  options_.err->write(said.str().data(), static_cast<std::streamsize>(said.str().size()));
  options_.err->flush();
  // The signal's default action stops the launcher; raise() returns once it is continued.
  // (In an orphaned process group the kernel discards it, and the job goes on at once.)
  struct sigaction stop {};
  stop.sa_handler = SIG_DFL;
  sigemptyset(&stop.sa_mask);
  struct sigaction relay {};
  sigaction(sig, &stop, &relay);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(sig);
  sigaction(sig, &relay, nullptr);
  const Duration stopped = clock_->Now() - stopped_at;
  if (job) killpg(pgid_, SIGCONT);
  // None of the launcher's deadlines counts the time the job stood still.
  PushBack(&options_.job_deadline, stopped);
  PushBack(&settle_deadline_, stopped);
  PushBack(&settle_limit_, stopped);
  PushBack(&signal_preferred_until_, stopped);
  PushBack(&kill_deadline_, stopped);
  PushBack(&kill_wait_deadline_, stopped);
  for (auto& child : children_) {
    PushBack(&child->service_stop, stopped);
    PushBack(&child->service_kill, stopped);
  }
  continued_at_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_->Now().time_since_epoch())
          .count();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", std::chrono::duration<double>(stopped).count());
  const std::string back =
      std::string("gyrerun: continued the job after ") + seconds + " s stopped\n";
  options_.err->write(back.data(), static_cast<std::streamsize>(back.size()));
  options_.err->flush();
}

void Supervisor::RequestStop(const std::string& reason, int exit_status) {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!stop_accepted_ || stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = reason;
  stop_status_ = exit_status;
  const unsigned char wake = 0;  // not a signal number: HandleSignalBytes checks the flag
  const int fd = g_signal_pipe_write.load();
  if (fd >= 0) (void)!write(fd, &wake, 1);
}

void Supervisor::HandleSignalBytes() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stop_requested_ && !stopped_on_request_ && !shutting_down_ && !finishing_) {
      stopped_on_request_ = true;
      BeginShutdown(stop_reason_);
    }
  }
  for (int sig : relay_->Drain()) {
    if (IsForwardedSignal(sig) && !finishing_) ForwardToPrograms(sig);
    if (IsJobControlStop(sig)) StopJobAndSelf(sig);
    if (!IsStopSignal(sig)) continue;  // SIGCHLD: the sweep
    if (received_signal_ == 0) received_signal_ = sig;
    if (finishing_) continue;
    if (!shutting_down_) {
      launcher_signal_ = sig;
      BeginShutdown("gyrerun received " + SignalName(sig));
    } else {
      // Asked again while stopping: stop waiting for the grace period.
      kill_deadline_ = Deadline::At(clock_->Now());
    }
  }
}

void Supervisor::EmitLine(Child* child, Stream* stream, const std::string& line) {
  std::ostream* os = stream->is_stderr ? options_.err : options_.out;
  std::string text;
  text.reserve(child->prefix.size() + line.size() + 1);
  text.append(child->prefix).append(line).push_back('\n');
  errno = 0;
  os->write(text.data(), static_cast<std::streamsize>(text.size()));
  os->flush();
  if (!*os) {
    // Counted and reported at the end (LostOutput); the stream is cleared so that later
    // lines are tried again (the disk may free up), and the job is not held up for it.
    Lost& lost = stream->is_stderr ? lost_err_ : lost_out_;
    if (lost.lines++ == 0) {
      lost.first_from = child->spec.name;
      lost.first_errno = errno;
    }
    os->clear();
  }
  if (stream->log_fd >= 0) {
    const std::string raw = line + '\n';
    const int err = WriteFully(stream->log_fd, raw.data(), raw.size());
    if (err != 0 && lost_log_.lines++ == 0) {
      lost_log_.first_from = stream->log_path;
      lost_log_.first_errno = err;
    }
  }
  if (stream->is_stderr && options_.tail_lines > 0) {
    child->tail.push_back(line);
    while (child->tail.size() > options_.tail_lines) child->tail.pop_front();
  }
}

std::string Supervisor::LostOutput() const {
  std::string text;
  for (const auto& [lost, what] : {std::pair<const Lost&, const char*>{lost_out_, "stdout"},
                                   std::pair<const Lost&, const char*>{lost_err_, "stderr"}}) {
    if (lost.lines == 0) continue;
    if (!text.empty()) text += "; ";
    text += std::to_string(lost.lines) + (lost.lines == 1 ? " line" : " lines") +
            " of the ranks' " + what + " (the first from " + lost.first_from +
            ") could not be written";
    if (lost.first_errno != 0) text += std::string(": ") + std::strerror(lost.first_errno);
  }
  if (lost_log_.lines > 0) {
    if (!text.empty()) text += "; ";
    text += std::to_string(lost_log_.lines) + (lost_log_.lines == 1 ? " line" : " lines") +
            " could not be written to the log files (the first to " + lost_log_.first_from + ")";
    if (lost_log_.first_errno != 0)
      text += std::string(": ") + std::strerror(lost_log_.first_errno);
  }
  return text;
}

void Supervisor::ReadStream(Child* child, Stream* stream) {
  char buf[64 * 1024];
  ssize_t n;
  do {
    n = read(stream->fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n <= 0) {
    if (!stream->partial.empty()) EmitLine(child, stream, stream->partial);
    stream->partial.clear();
    CloseFd(&stream->fd);
    return;
  }
  stream->partial.append(buf, static_cast<size_t>(n));
  size_t begin = 0;
  for (;;) {
    size_t newline = stream->partial.find('\n', begin);
    if (newline == std::string::npos) break;
    EmitLine(child, stream, stream->partial.substr(begin, newline - begin));
    begin = newline + 1;
  }
  stream->partial.erase(0, begin);
  while (stream->partial.size() >= kMaxLineBytes) {
    EmitLine(child, stream, stream->partial.substr(0, kMaxLineBytes));
    stream->partial.erase(0, kMaxLineBytes);
  }
}

void Supervisor::ReadLaunchReport(Child* child) {
  LaunchFailure failure{};
  ssize_t n;
  do {
    n = read(child->launch_fd, &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  CloseFd(&child->launch_fd);
  if (n != static_cast<ssize_t>(sizeof(failure))) return;  // EOF: execve succeeded
  const ProcessSpec& spec = child->spec;
  if (failure.stage == kStageChdir) {
    child->result.launch_error =
        "cannot enter working directory " + spec.cwd + ": " + ErrnoText(failure.error);
  } else {
    child->result.launch_error = "cannot execute " + spec.argv[0] + ": " + ErrnoText(failure.error);
  }
  EmitLine(child, &child->err, "gyrerun: " + child->result.launch_error);
}

void Supervisor::PollOnce(int timeout_ms) {
  std::vector<struct pollfd> fds;
  // What each pollfd belongs to: the child and which of its descriptors.
  std::vector<std::pair<Child*, int>> owners;
  fds.push_back({relay_->read_fd(), POLLIN, 0});
  owners.emplace_back(nullptr, 0);
  for (auto& child : children_) {
    if (child->out.fd >= 0) {
      fds.push_back({child->out.fd, POLLIN, 0});
      owners.emplace_back(child.get(), 1);
    }
    if (child->err.fd >= 0) {
      fds.push_back({child->err.fd, POLLIN, 0});
      owners.emplace_back(child.get(), 2);
    }
    if (child->launch_fd >= 0) {
      fds.push_back({child->launch_fd, POLLIN, 0});
      owners.emplace_back(child.get(), 3);
    }
  }
  int ready = poll(fds.data(), fds.size(), std::clamp(timeout_ms, 0, kMaxPollIntervalMs));
  if (ready <= 0) return;  // timeout, or EINTR from a signal whose byte is read next turn
  for (size_t i = 0; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
    auto [child, which] = owners[i];
    switch (which) {
      case 0:
        HandleSignalBytes();
        break;
      case 1:
        ReadStream(child, &child->out);
        break;
      case 2:
        ReadStream(child, &child->err);
        break;
      default:
        ReadLaunchReport(child);
        break;
    }
  }
}

bool Supervisor::HasOpenFds() const {
  for (const auto& child : children_) {
    if (child->out.fd >= 0 || child->err.fd >= 0 || child->launch_fd >= 0) return true;
  }
  return false;
}

void Supervisor::FinishGroup() {
  finishing_ = true;
  if (pgid_ <= 0 || group_released_) return;
  // Descendants left behind by ranks that have ended do not outlive the job; the guardian
  // goes with them. Closing its pipe alone would have the same effect, a moment later.
  killpg(pgid_, SIGKILL);
  CloseFd(&guardian_fd_);
  // As child subreaper we adopted the orphans of dead ranks: reap every child in the group.
  Deadline deadline = Deadline::After(*clock_, Millis(kKillWaitMs));
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-pgid_, &status, WNOHANG);
    if (pid > 0) {
      if (pid == guardian_pid_) guardian_pid_ = -1;
      // A rank that outlived the SIGKILL wait in Wait() may end here; keep its status.
      for (auto& child : children_) {
        if (child->result.pid != pid || child->result.finished()) continue;
        if (WIFEXITED(status)) {
          RecordExit(child.get(), CLD_EXITED, WEXITSTATUS(status));
        } else if (WIFSIGNALED(status)) {
          RecordExit(child.get(), CLD_KILLED, WTERMSIG(status));
        }
      }
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;  // ECHILD: none of our children is left in the group
    if (deadline.Expired(*clock_)) {
      notes_.push_back("some processes of group " + std::to_string(pgid_) + " were still running " +
                       FormatDuration(Millis(kKillWaitMs)) + " after SIGKILL");
      break;
    }
    PollOnce(MillisUntil(deadline, *clock_));
  }
  // From here the group id may be reused by the system: never signal it again.
  group_released_ = true;
}

void Supervisor::DrainOutput(Deadline deadline) {
  while (HasOpenFds() && !deadline.Expired(*clock_)) PollOnce(MillisUntil(deadline, *clock_));
}

void Supervisor::CloseAll() {
  for (auto& child : children_) {
    // Keep what a process wrote last even when its pipe never reached EOF.
    for (Stream* stream : {&child->out, &child->err}) {
      if (!stream->partial.empty()) EmitLine(child.get(), stream, stream->partial);
      stream->partial.clear();
      CloseFd(&stream->fd);
      CloseFd(&stream->log_fd);
    }
    CloseFd(&child->launch_fd);
  }
}

void Supervisor::KillAllAndReap() {
  shutting_down_ = true;
  finishing_ = true;
  SweepExits();
  SignalLive(SIGKILL);
  Deadline deadline = Deadline::After(*clock_, Millis(kKillWaitMs));
  while (LiveCount() > 0 && !deadline.Expired(*clock_)) {
    PollOnce(MillisUntil(deadline, *clock_));
    SweepExits();
  }
  FinishGroup();
  CloseAll();
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_accepted_ = false;
    relay_.reset();
  }
}

int Supervisor::Wait() {
  CHECK(started_ && !waited_) << "Supervisor::Wait requires one successful Start";
  waited_ = true;
  for (;;) {
    SweepExits();
    if (root_cause_ != nullptr && !shutting_down_ &&
        (settle_deadline_.Expired(*clock_) || NoSurvivorLeftToReport())) {
      BeginShutdown(root_cause_->result.name);
    }
    if (!shutting_down_) StopIdleServices();
    if (!shutting_down_ && options_.job_deadline.Expired(*clock_)) {
      deadline_fired_ = true;
      BeginShutdown("job deadline exceeded after " + FormatDuration(clock_->Now() - start_time_));
    }
    if (shutting_down_ && !sent_sigkill_ && kill_deadline_.Expired(*clock_)) {
      SweepExits();
      SignalLive(SIGKILL);
      sent_sigkill_ = true;
      kill_wait_deadline_ = Deadline::After(*clock_, Millis(kKillWaitMs));
    }
    if (LiveCount() == 0) break;
    if (sent_sigkill_ && kill_wait_deadline_.Expired(*clock_)) {
      for (const auto& child : children_) {
        const ProcessResult& r = child->result;
        if (r.pid <= 0 || r.finished()) continue;
        notes_.push_back(r.name + " (pid " + std::to_string(r.pid) + ") did not exit within " +
                         FormatDuration(Millis(kKillWaitMs)) + " of SIGKILL");
      }
      break;
    }
    Deadline next = !shutting_down_
                        ? (root_cause_ != nullptr ? options_.job_deadline.Min(settle_deadline_)
                                                  : options_.job_deadline)
                    : sent_sigkill_ ? kill_wait_deadline_
                                    : kill_deadline_;
    PollOnce(MillisUntil(next, *clock_));
  }
  FinishGroup();
  DrainOutput(Deadline::After(*clock_, Millis(kDrainWaitMs)));
  CloseAll();
  {
    // Under the lock RequestStop writes the pipe with: no write after the pipe is closed.
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_accepted_ = false;
    // From here on the handlers the launcher had before Start() take the signals; one that came
    // since the last poll is still told (ReceivedSignal). In that order: drained first, a
    // signal between the drain and the handlers' change went into a pipe about to close, and
    // was lost (a SIGTERM to a gyrerun restarting a failing job did not stop it).
    relay_->RestoreHandlers();
    for (int sig : relay_->Drain()) {
      if (IsStopSignal(sig) && received_signal_ == 0) received_signal_ = sig;
    }
    relay_.reset();
  }

  int status = ComputeExitStatus();
  if (status != 0) {
    summary_ = BuildSummary();
    options_.err->write(summary_.data(), static_cast<std::streamsize>(summary_.size()));
    options_.err->flush();
  }
  return status;
}

int Supervisor::ComputeExitStatus() const {
  if (launcher_signal_ != 0) return 128 + launcher_signal_;
  if (stopped_on_request_) return stop_status_;
  if (deadline_fired_) return kExitJobDeadline;
  if (root_cause_ != nullptr) {
    const ProcessResult& r = root_cause_->result;
    if (r.signaled) return 128 + r.signal;
    return r.exit_code != 0 ? r.exit_code : 1;  // 0: never served, or refused
  }
  for (const auto& child : children_) {
    const ProcessResult& r = child->result;
    if (r.stopped_as_service) continue;
    if (!r.finished() || r.signaled || r.exit_code != 0) return 1;
  }
  return 0;
}

namespace {

// `term_to_kill`: how long SIGTERM was given before SIGKILL.
std::string DescribeEnd(const ProcessResult& r, Duration term_to_kill) {
  std::string how;
  if (!r.finished()) {
    how = "still running";
  } else if (r.signaled) {
    how = "signal " + SignalName(r.signal) + " (" + std::to_string(r.signal) + ")";
  } else {
    how = "exit " + std::to_string(r.exit_code);
  }
  if (r.stopped_as_service) {
    return "stopped by gyrerun once its rank's other processes had exited 0 (" + how + ")";
  }
  if (r.killed_by_launcher) {
    if (r.signaled && r.signal == SIGKILL && r.sigkilled_by_launcher) {
      if (term_to_kill <= Duration::zero()) return "terminated by gyrerun (SIGKILL)";
      return "terminated by gyrerun (SIGKILL, SIGTERM ignored for " + FormatDuration(term_to_kill) +
             ")";
    }
    if (r.signaled && r.signal == SIGTERM) return "terminated by gyrerun (SIGTERM)";
    return "terminated by gyrerun (" + how + ")";
  }
  if (!r.launch_error.empty()) return how + ": " + r.launch_error;
  if (r.never_served) return how + " before it ever served its rank's program";
  // The table gets the why's short form, before its first ':'; the headline has all of it.
  if (!r.exit_zero_refused.empty()) {
    return how + " " + r.exit_zero_refused.substr(0, r.exit_zero_refused.find(':'));
  }
  if (r.finished() && !r.signaled && r.exit_code == 0) return "ok";
  return how;
}

// "rank 3", "ranks 0-1, 4": ascending ranks, runs of neighbours as ranges.
std::string RankListText(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

Blame Supervisor::VerdictsOnFirstFailure() const {
  // Only where the summary names a failure: not under a stop, a signal or the job deadline.
  if (root_cause_ == nullptr || !options_.blame || launcher_signal_ != 0 || stopped_on_request_ ||
      deadline_fired_) {
    return Blame();
  }
  const ProcessResult& first = root_cause_->result;
  // A crash, or a process that never ran, is a fact of its own; a verdict does not outrank it.
  if (first.signaled || !first.launch_error.empty()) return Blame();
  return options_.blame();
}

const Supervisor::Child* Supervisor::BlamedOverFirstFailure(const Blame& blame,
                                                            std::string* how) const {
  if (root_cause_ == nullptr || blame.contradicted()) return nullptr;
  const ProcessResult& first = root_cause_->result;
  if (blame.rank < 0 || blame.rank == first.rank) return nullptr;
  const Child* found = nullptr;
  for (const auto& child : children_) {
    if (child->spec.rank != blame.rank) continue;
    // A stalled rank is the process the others found not answering (a daemon, say), and one
    // that names itself for not running is the process that did not; a rank that did not
    // make the call, or made another, is its program.
    const bool by_pid = blame.what == "stalled" || blame.what == "not running";
    if (by_pid && blame.pid != 0 && child->result.pid == blame.pid) {
      found = child.get();
      break;
    }
    // Else the rank's program rather than the daemon serving it.
    if (found == nullptr || (found->spec.service && !child->spec.service)) found = child.get();
  }
  if (found != nullptr) *how = blame.what;
  return found;
}

std::string Supervisor::BuildSummary() const {
  std::ostringstream os;
  std::string blamed_how;
  const Blame verdicts = VerdictsOnFirstFailure();
  const Child* blamed = BlamedOverFirstFailure(verdicts, &blamed_how);
  // Each side of a cut blames the other, and the first of them to exit is only the first
  // to report: naming it (a tie of the votes went to the lower rank) blamed one side of a
  // network fault.
  const bool contradicted = root_cause_ != nullptr && verdicts.contradicted();
  if (launcher_signal_ != 0) {
    os << "gyrerun: job stopped: gyrerun received " << SignalName(launcher_signal_) << "\n";
  } else if (stopped_on_request_) {
    os << "gyrerun: job stopped: " << shutdown_reason_ << "\n";
  } else if (deadline_fired_) {
    os << "gyrerun: " << shutdown_reason_ << "\n";
  } else if (contradicted) {
    const ProcessResult& r = root_cause_->result;
    const std::string a = RankListText(verdicts.side_a), b = RankListText(verdicts.side_b);
    os << "gyrerun: job failed: the ranks' verdicts contradict each other: " << a << " and " << b
       << " each report the other side as ";
    if (verdicts.what_a == verdicts.what_b) {
      os << verdicts.what_a;
    } else {
      os << "at fault (" << a << " call it " << verdicts.what_a << ", " << b << " call it "
         << verdicts.what_b << ")";
    }
    os << ", which points at the network between them, not at one rank; the first to exit was "
       << r.name << " (pid " << r.pid << "), with code " << r.exit_code << " after "
       << FormatDuration(r.run_time) << "\n";
  } else if (blamed != nullptr) {
    const ProcessResult& b = blamed->result;
    const ProcessResult& r = root_cause_->result;
    os << "gyrerun: job failed: " << b.name << " (pid " << b.pid << ") ";
    // A rank that left (or died) by exiting with an error of its own: the verdict tells what
    // its going did to the others, its exit why it went.
    if ((blamed_how == "left" || blamed_how == "dead") && b.exited && b.exit_code != 0 &&
        !b.killed_by_launcher) {
      os << "exited with code " << b.exit_code << " after " << FormatDuration(b.run_time)
         << ", and the other ranks' calls failed without it (the ranks' verdict: " << blamed_how
         << ")";
    } else {
      os << blamed_how << ", as the ranks' verdict says";
    }
    os << "; the first to exit was " << r.name << " (pid " << r.pid << "), with code "
       << r.exit_code << " after " << FormatDuration(r.run_time) << "\n";
  } else if (root_cause_ != nullptr) {
    const ProcessResult& r = root_cause_->result;
    os << "gyrerun: job failed: " << r.name << " (pid " << r.pid << ") ";
    if (!r.launch_error.empty()) {
      os << r.launch_error;
    } else if (r.signaled) {
      os << "was killed by signal " << SignalName(r.signal) << " (" << r.signal << ")";
    } else if (r.never_served) {
      os << "exited with code 0 before it ever served its rank's program, which was still "
            "running (nothing appeared at "
         << root_cause_->spec.ready_path << ")";
    } else if (!r.exit_zero_refused.empty()) {
      // The why last: it may end in a question to the user.
      os << "exited with code 0 after " << FormatDuration(r.run_time) << ", "
         << r.exit_zero_refused;
    } else {
      os << "exited with code " << r.exit_code;
    }
    if (r.exit_zero_refused.empty()) os << " after " << FormatDuration(r.run_time);
    // SIGKILL is what the kernel's OOM killer sends: its count says whether it did.
    if (r.signaled && r.signal == SIGKILL) {
      const std::string oom = OomKillNote(options_.oom_kill_counter, oom_kills_at_start_,
                                          ReadOomKillCount(options_.oom_kill_counter));
      if (!oom.empty()) os << " " << oom;
    }
    os << "\n";
  } else {
    os << "gyrerun: job failed\n";
  }

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"RANK", "NAME", "PID", "HOST", "STATUS"});
  for (const auto& child : children_) {
    const ProcessResult& r = child->result;
    std::string end = DescribeEnd(
        r, sigterm_time_ == TimePoint{} ? Duration::zero() : sigkill_time_ - sigterm_time_);
    if (blamed != nullptr || contradicted) {
      if (child.get() == blamed) end += "  <- root cause (verdict: " + blamed_how + ")";
      if (r.root_cause) end += "  <- first to exit";
    } else if (r.root_cause) {
      end += "  <- root cause";
    }
    rows.push_back({std::to_string(r.rank), r.name, std::to_string(r.pid), r.host, end});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      line += " " + row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 1, ' ');
    }
    os << line << "\n";
  }

  // The root cause first, then everything else that failed without being told to.
  std::vector<const Child*> failed;
  if (blamed != nullptr) failed.push_back(blamed);
  if (root_cause_ != nullptr && root_cause_ != blamed) failed.push_back(root_cause_);
  for (const auto& child : children_) {
    if (child.get() != root_cause_ && child.get() != blamed && child->result.failed_on_its_own()) {
      failed.push_back(child.get());
    }
  }
  for (const Child* child : failed) {
    const ProcessResult& r = child->result;
    if (options_.tail_lines == 0) continue;  // none kept: --tail_lines 0 asked for none
    if (child->tail.empty()) {
      os << "no stderr output from " << r.name << " (pid " << r.pid << ")\n";
      continue;
    }
    os << "last " << child->tail.size() << " stderr lines of " << r.name << " (pid " << r.pid
       << "):\n";
    for (const std::string& line : child->tail) os << "  | " << line << "\n";
  }
  for (const std::string& note : notes_) os << "gyrerun: " << note << "\n";
  return os.str();
}

std::vector<ProcessResult> Supervisor::results() const {
  std::vector<ProcessResult> out;
  out.reserve(children_.size());
  for (const auto& child : children_) {
    out.push_back(child->result);
    out.back().stderr_tail.assign(child->tail.begin(), child->tail.end());
  }
  return out;
}

}  // namespace gyre::launcher
