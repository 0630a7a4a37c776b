// Supervisor against real processes: gyre-fake-rank (from $GYRE_BIN_DIR) plays every rank.
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"

namespace gyre::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The summary row of the process called `name`.
std::string SummaryRow(const std::string& summary, const std::string& name) {
  for (const std::string& line : Lines(summary)) {
    if (line.find(" " + name + " ") != std::string::npos &&
        line.find(" pid ") == std::string::npos && line.rfind("  ", 0) == 0) {
      return line;
    }
  }
  return "";
}

// True when `pid` no longer exists (not even as a zombie).
bool Gone(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

// The state letter and process group from /proc/<pid>/stat; state 0 when it is gone.
std::pair<char, pid_t> ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return {0, 0};
  // "pid (comm) S ppid pgrp ..."; comm may hold spaces, so parse after the last ')'.
  std::istringstream rest(stat.substr(stat.rfind(')') + 1));
  char state = 0;
  pid_t ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp;
  return {state, pgrp};
}

// Waits up to 5 s for `pid` to be dead. A zombie counts as dead; if it was re-parented to this
// test process (the supervisor makes it a child subreaper) it is reaped here.
bool DiesWithin5s(pid_t pid) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < give_up) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid || Gone(pid) || ProcState(pid).first == 'Z') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin_dir = std::getenv("GYRE_BIN_DIR");
    ASSERT_NE(bin_dir, nullptr) << "GYRE_BIN_DIR must point at the folder with gyre-fake-rank";
    fake_rank_ = std::string(bin_dir) + "/gyre-fake-rank";
    ASSERT_EQ(access(fake_rank_.c_str(), X_OK), 0) << fake_rank_ << " is not executable";
    std::string pattern = ::testing::TempDir() + "/gyre_launcher_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    tmp_ = std::filesystem::canonical(pattern);
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(tmp_, ignored);
  }

  SupervisorOptions Options() {
    SupervisorOptions options;
    options.out = &out_;
    options.err = &err_;
    return options;
  }

  ProcessSpec Rank(int rank, std::vector<std::string> flags) {
    ProcessSpec spec;
    spec.rank = rank;
    spec.argv.push_back(fake_rank_);
    for (std::string& flag : flags) spec.argv.push_back(std::move(flag));
    return spec;
  }

  // A daemon of rank `rank` that would serve for a minute.
  ProcessSpec Service(int rank) {
    ProcessSpec spec = Rank(rank, {"--sleep_ms=60000"});
    spec.name = "rank " + std::to_string(rank) + " gyred";
    spec.service = true;
    return spec;
  }

  // Starts and waits for the job; records how long Wait() took and the CPU it used.
  int Run(std::vector<ProcessSpec> specs, SupervisorOptions options) {
    supervisor_ = std::make_unique<Supervisor>(options);
    Status status = supervisor_->Start(std::move(specs));
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return -1;
    double cpu_before = CpuSeconds();
    auto begin = std::chrono::steady_clock::now();
    int exit_status = supervisor_->Wait();
    elapsed_ = std::chrono::steady_clock::now() - begin;
    wait_cpu_seconds_ = CpuSeconds() - cpu_before;
    return exit_status;
  }

  int Run(std::vector<ProcessSpec> specs) { return Run(std::move(specs), Options()); }

  static double CpuSeconds() {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }

  double ElapsedSeconds() const { return std::chrono::duration<double>(elapsed_).count(); }

  void ExpectNoProcessLeft() {
    for (const ProcessResult& r : supervisor_->results()) {
      EXPECT_TRUE(Gone(r.pid)) << r.name << " pid " << r.pid << " still exists";
    }
  }

  // The pid printed by `--spawn_child` of the process called `name`.
  pid_t SpawnedChild(const std::string& name) {
    const std::string out = out_.str();
    const std::string marker = "[" + name + "] spawned child pid ";
    size_t at = out.find(marker);
    if (at == std::string::npos) return -1;
    return static_cast<pid_t>(std::atol(out.c_str() + at + marker.size()));
  }

  std::string File(const std::string& name) const { return (tmp_ / name).string(); }

  std::string fake_rank_;
  std::filesystem::path tmp_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::unique_ptr<Supervisor> supervisor_;
  std::chrono::steady_clock::duration elapsed_{};
  double wait_cpu_seconds_ = 0;
};

TEST_F(SupervisorTest, AllRanksExitZeroAndOutputIsPrefixedWholeLines) {
  constexpr int kRanks = 3;
  constexpr int kLines = 3000;  // several pipe buffers, so reads split lines
  std::vector<ProcessSpec> specs;
  for (int rank = 0; rank < kRanks; ++rank) {
    specs.push_back(Rank(rank, {"--stdout_lines=" + std::to_string(kLines), "--stderr_lines=2"}));
  }
  supervisor_ = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(supervisor_->Start(std::move(specs)).ok());
  // Every child is in the job's own group, not in ours.
  pid_t group = supervisor_->process_group();
  EXPECT_GT(group, 0);
  EXPECT_NE(group, getpgrp());
  for (const ProcessResult& r : supervisor_->results()) EXPECT_EQ(getpgid(r.pid), group);

  EXPECT_EQ(supervisor_->Wait(), 0);
  EXPECT_EQ(supervisor_->FailureSummary(), "");

  std::map<int, int> last_line;
  std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kRanks * kLines));
  for (const std::string& line : lines) {
    int rank = -1, number = -1;
    std::sscanf(line.c_str(), "[rank %d] stdout line %d of", &rank, &number);
    ASSERT_EQ(line, "[rank " + std::to_string(rank) + "] stdout line " + std::to_string(number) +
                        " of " + std::to_string(kLines))
        << "mixed or cut line";
    EXPECT_EQ(number, last_line[rank] + 1) << "rank " << rank << " lines out of order";
    last_line[rank] = number;
  }
  EXPECT_THAT(err_.str(), HasSubstr("[rank 2] stderr line 2 of 2\n"));
  EXPECT_EQ(Lines(err_.str()).size(), static_cast<size_t>(kRanks * 2));

  for (const ProcessResult& r : supervisor_->results()) {
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_FALSE(r.killed_by_launcher);
    EXPECT_FALSE(r.root_cause);
    EXPECT_EQ(r.stderr_tail.size(), 2u);
  }
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, FailingRankStopsTheOthersAndIsNamedRootCause) {
  int status = Run({Rank(0, {"--sleep_ms=30000"}),
                    Rank(1, {"--stderr_lines=30", "--sleep_ms=100", "--exit_code=3"}),
                    Rank(2, {"--sleep_ms=30000"})});
  EXPECT_EQ(status, 3);
  EXPECT_LT(ElapsedSeconds(), 5.0) << "sleeping ranks were not stopped promptly";

  std::vector<ProcessResult> results = supervisor_->results();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[1].root_cause);
  EXPECT_TRUE(results[1].exited);
  EXPECT_EQ(results[1].exit_code, 3);
  EXPECT_FALSE(results[1].killed_by_launcher);
  ASSERT_EQ(results[1].stderr_tail.size(), 20u);
  EXPECT_EQ(results[1].stderr_tail.front(), "stderr line 11 of 30");
  EXPECT_EQ(results[1].stderr_tail.back(), "stderr line 30 of 30");
  for (int i : {0, 2}) {
    EXPECT_FALSE(results[i].root_cause);
    EXPECT_TRUE(results[i].killed_by_launcher);
    EXPECT_TRUE(results[i].signaled);
    EXPECT_EQ(results[i].signal, SIGTERM);
  }

  std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("job failed: rank 1 (pid " + std::to_string(results[1].pid) +
                                 ") exited with code 3"));
  EXPECT_THAT(SummaryRow(summary, "rank 1"), HasSubstr("exit 3  <- root cause"));
  EXPECT_THAT(SummaryRow(summary, "rank 1"), HasSubstr(std::to_string(results[1].pid)));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("terminated by gyrerun (SIGTERM)"));
  EXPECT_THAT(SummaryRow(summary, "rank 2"), HasSubstr("terminated by gyrerun (SIGTERM)"));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), Not(HasSubstr("root cause")));
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr(host));
  EXPECT_THAT(summary, HasSubstr("last 20 stderr lines of rank 1"));
  EXPECT_THAT(summary, HasSubstr("stderr line 11 of 30\n"));
  EXPECT_THAT(summary, HasSubstr("stderr line 30 of 30\n"));
  EXPECT_THAT(summary, Not(HasSubstr("stderr line 10 of 30\n")));
  // The summary is also what the launcher printed last.
  EXPECT_EQ(err_.str().substr(err_.str().size() - summary.size()), summary);
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, RankKilledBySigkillGives137) {
  int status = Run({Rank(0, {"--signal=SIGKILL"}), Rank(1, {"--sleep_ms=30000"})});
  EXPECT_EQ(status, 128 + SIGKILL);
  EXPECT_LT(ElapsedSeconds(), 5.0);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].signaled);
  EXPECT_EQ(results[0].signal, SIGKILL);
  EXPECT_TRUE(results[0].root_cause);
  EXPECT_FALSE(results[0].killed_by_launcher);
  std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("was killed by signal SIGKILL (9)"));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("signal SIGKILL (9)  <- root cause"));
  EXPECT_THAT(summary, HasSubstr("no stderr output from rank 0"));
  ExpectNoProcessLeft();
}

// A rank dead of SIGKILL while the cgroup's OOM-kill count rose: the first line says the
// kernel's OOM killer likely did it. A count that did not rise, or none to read, adds nothing.
TEST_F(SupervisorTest, ASigkillWhileTheOomKillCountRoseIsPutDownToTheOomKiller) {
  const std::string counter = File("memory.events");
  // The rank raises the count as the kernel would, then dies by SIGKILL.
  ProcessSpec oom = Rank(1, {});
  oom.argv = {"/bin/sh", "-c", "printf 'oom 1\\noom_kill 3\\n' > '" + counter + "'; kill -KILL $$"};
  SupervisorOptions options = Options();
  options.oom_kill_counter = counter;
  std::ofstream(counter) << "oom 0\noom_kill 2\n";
  EXPECT_EQ(Run({Rank(0, {"--sleep_ms=20000"}), oom}, options), 137) << err_.str();
  const std::string pid = std::to_string(supervisor_->results()[1].pid);
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr("gyrerun: job failed: rank 1 (pid " + pid +
                        ") was killed by signal SIGKILL (9) after "));
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr(" (likely the kernel's out-of-memory killer: oom_kill in " + counter +
                        " rose from 2 to 3)\n"));

  // Not risen (the file already says 3): nothing.
  EXPECT_EQ(Run({Rank(0, {"--sleep_ms=20000"}), oom}, options), 137) << err_.str();
  EXPECT_THAT(supervisor_->FailureSummary(), Not(HasSubstr("out-of-memory")));
  // Nothing to read: nothing said.
  options.oom_kill_counter = File("no-such-file");
  EXPECT_EQ(Run({Rank(0, {"--sleep_ms=20000"}), oom}, options), 137) << err_.str();
  EXPECT_THAT(supervisor_->FailureSummary(), Not(HasSubstr("out-of-memory")));
}

TEST_F(SupervisorTest, RankIgnoringSigtermIsKilledAfterGracePeriod) {
  SupervisorOptions options = Options();
  options.grace_period = Millis(500);
  std::string ready = File("ready");
  int status = Run({Rank(0, {"--ignore_sigterm", "--touch_file=" + ready, "--sleep_ms=30000"}),
                    Rank(1, {"--wait_for_file=" + ready, "--exit_code=2"})},
                   options);
  EXPECT_EQ(status, 2);
  EXPECT_GE(ElapsedSeconds(), 0.5) << "SIGKILL came before the grace period";
  EXPECT_LT(ElapsedSeconds(), 5.0);
  EXPECT_LT(wait_cpu_seconds_, 0.2) << "the supervisor spun while waiting out the grace period";
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].signaled);
  EXPECT_EQ(results[0].signal, SIGKILL);
  EXPECT_TRUE(results[0].killed_by_launcher);
  EXPECT_TRUE(results[0].sigkilled_by_launcher);
  EXPECT_TRUE(results[1].root_cause);
  EXPECT_THAT(SummaryRow(supervisor_->FailureSummary(), "rank 0"),
              HasSubstr("terminated by gyrerun (SIGKILL, SIGTERM ignored for"));
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, MissingProgramIsThatRanksFailureWith127) {
  ProcessSpec missing;
  missing.rank = 0;
  missing.argv = {"/nonexistent/gyre-no-such-program", "--flag"};
  int status = Run({missing, Rank(1, {"--sleep_ms=30000"})});
  EXPECT_EQ(status, 127);
  EXPECT_LT(ElapsedSeconds(), 5.0);
  const std::string message =
      "cannot execute /nonexistent/gyre-no-such-program: No such file or directory";
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_EQ(results[0].launch_error, message);
  EXPECT_TRUE(results[0].root_cause);
  EXPECT_EQ(results[0].exit_code, 127);
  EXPECT_TRUE(results[1].killed_by_launcher);
  std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr(message));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("<- root cause"));
  EXPECT_THAT(err_.str(), HasSubstr("[rank 0] gyrerun: " + message + "\n"));
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, BareNameIsSearchedInPath) {
  ProcessSpec missing;
  missing.argv = {"gyre-no-such-program-in-path"};
  EXPECT_EQ(Run({missing}), 127);
  EXPECT_EQ(supervisor_->results()[0].launch_error,
            "cannot execute gyre-no-such-program-in-path: No such file or directory");
}

TEST_F(SupervisorTest, MissingWorkingDirectoryIsReported) {
  ProcessSpec spec = Rank(0, {});
  spec.cwd = File("no-such-dir");
  EXPECT_EQ(Run({spec}), 127);
  EXPECT_THAT(
      supervisor_->results()[0].launch_error,
      HasSubstr("cannot enter working directory " + spec.cwd + ": No such file or directory"));
}

TEST_F(SupervisorTest, GrandchildOfAFailedJobIsKilled) {
  std::string ready = File("ready");
  int status = Run({Rank(0, {"--spawn_child", "--touch_file=" + ready, "--sleep_ms=30000"}),
                    Rank(1, {"--wait_for_file=" + ready, "--exit_code=1"})});
  EXPECT_EQ(status, 1);
  EXPECT_LT(ElapsedSeconds(), 5.0);
  pid_t grandchild = SpawnedChild("rank 0");
  ASSERT_GT(grandchild, 0) << out_.str();
  EXPECT_TRUE(Gone(grandchild)) << "grandchild " << grandchild << " survived the job";
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, GrandchildOfASuccessfulJobIsKilled) {
  // Rank 0 exits at once, leaving a child that sleeps for a minute holding its stdout.
  EXPECT_EQ(Run({Rank(0, {"--spawn_child"}), Rank(1, {})}), 0);
  EXPECT_LT(ElapsedSeconds(), 5.0);
  pid_t grandchild = SpawnedChild("rank 0");
  ASSERT_GT(grandchild, 0) << out_.str();
  EXPECT_TRUE(Gone(grandchild)) << "grandchild " << grandchild << " survived the job";
  ExpectNoProcessLeft();
}

// gyrerun itself runs under a Supervisor here, so this test may SIGKILL it: it is our child.
TEST_F(SupervisorTest, NothingOutlivesALauncherKilledBySigkill) {
  const std::string gyrerun = std::string(std::getenv("GYRE_BIN_DIR")) + "/gyrerun";
  ASSERT_EQ(access(gyrerun.c_str(), X_OK), 0) << gyrerun;
  std::filesystem::create_directory(tmp_ / "ready");
  ProcessSpec launcher;
  launcher.argv = {gyrerun,           "--np=2",        "--",
                   fake_rank_,        "--spawn_child", "--touch_file=" + File("ready/%p"),
                   "--sleep_ms=30000"};
  supervisor_ = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(supervisor_->Start({launcher}).ok());

  // Both inner ranks report their pid and their child's pid once they are set up.
  std::vector<pid_t> inner;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (inner.size() < 4 && std::chrono::steady_clock::now() < give_up) {
    inner.clear();
    for (const auto& entry : std::filesystem::directory_iterator(tmp_ / "ready")) {
      if (entry.path().extension() == ".tmp") continue;
      std::ifstream in(entry.path());
      pid_t rank_pid = 0, child_pid = 0;
      if (in >> rank_pid >> child_pid) inner.insert(inner.end(), {rank_pid, child_pid});
    }
    if (inner.size() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(inner.size(), 4u) << "inner ranks did not start; output: " << err_.str();
  // The inner job's group is led by gyrerun's guardian, which must die with it as well.
  pid_t inner_guardian = ProcState(inner[0]).second;
  ASSERT_GT(inner_guardian, 0);
  ASSERT_NE(inner_guardian, supervisor_->process_group());
  inner.push_back(inner_guardian);

  const pid_t gyrerun_pid = supervisor_->results()[0].pid;
  ASSERT_EQ(kill(gyrerun_pid, SIGKILL), 0);
  EXPECT_EQ(supervisor_->Wait(), 128 + SIGKILL);
  for (pid_t pid : inner) EXPECT_TRUE(DiesWithin5s(pid)) << "pid " << pid << " outlived gyrerun";
}

TEST_F(SupervisorTest, JobDeadlineStopsEverythingWith124) {
  SupervisorOptions options = Options();
  // The deadline counts from here, before the ranks start (which a loaded machine may take a
  // while to do), so the elapsed time does too.
  const auto t0 = std::chrono::steady_clock::now();
  options.job_deadline = Deadline::After(*SteadyClock::Get(), Seconds(2));
  options.grace_period = Millis(300);
  // Rank 1 ignores SIGTERM (set up within milliseconds, long before the deadline).
  int status = Run(
      {Rank(0, {"--sleep_ms=30000"}), Rank(1, {"--ignore_sigterm", "--sleep_ms=30000"})}, options);
  const double since_t0 =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(status, kExitJobDeadline);
  EXPECT_GE(since_t0, 2.3) << "SIGKILL came before the deadline and the grace period";
  EXPECT_LT(since_t0, 7.0);
  EXPECT_LT(wait_cpu_seconds_, 0.2) << "the supervisor spun instead of polling";
  std::vector<ProcessResult> results = supervisor_->results();
  for (const ProcessResult& r : results) {
    EXPECT_TRUE(r.killed_by_launcher);
    EXPECT_FALSE(r.root_cause);
  }
  EXPECT_EQ(results[0].signal, SIGTERM);
  EXPECT_EQ(results[1].signal, SIGKILL);
  std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("job deadline exceeded after "));
  EXPECT_THAT(summary, HasSubstr(" s\n"));
  EXPECT_THAT(summary, Not(HasSubstr("root cause")));
  ExpectNoProcessLeft();
}

class LauncherSignalTest : public SupervisorTest, public ::testing::WithParamInterface<int> {};

TEST_P(LauncherSignalTest, SignalToLauncherStopsTheJob) {
  const int sig = GetParam();
  supervisor_ = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(
      supervisor_->Start({Rank(0, {"--sleep_ms=30000"}), Rank(1, {"--sleep_ms=30000"})}).ok());
  // As if Ctrl-C (or `kill`) reached the launcher; the supervisor's handler catches it.
  ASSERT_EQ(raise(sig), 0);
  auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(supervisor_->Wait(), 128 + sig);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  for (const ProcessResult& r : supervisor_->results()) {
    EXPECT_TRUE(r.killed_by_launcher);
    EXPECT_EQ(r.signal, SIGTERM);
  }
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr(std::string("gyrerun received ") + (sig == SIGINT    ? "SIGINT"
                                                            : sig == SIGHUP  ? "SIGHUP"
                                                            : sig == SIGQUIT ? "SIGQUIT"
                                                                             : "SIGTERM")));
  EXPECT_EQ(supervisor_->ReceivedSignal(), sig);
  ExpectNoProcessLeft();
}

// SIGHUP: a closed terminal or a dropped ssh session. SIGQUIT (Ctrl-\) ended the launcher by
// its default action, leaving the ranks to PR_SET_PDEATHSIG and the run folder behind.
INSTANTIATE_TEST_SUITE_P(IntTermHupQuit, LauncherSignalTest,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP, SIGQUIT));

// SIGUSR1 and SIGUSR2 to the launcher reach every rank's program and the job goes on (they
// ended the launcher by their default action). Not a service (a daemon: it would die of
// SIGUSR2), and not a remote shell (it would die, and its host be lost).
TEST_F(SupervisorTest, UserSignalsToTheLauncherArePassedOnToEachProgram) {
  SupervisorOptions options = Options();
  options.service_linger = Millis(100);
  ProcessSpec remote = Rank(2, {"--sleep_ms=3000", "--touch_file=" + File("ready-%p")});
  remote.remote = true;  // as a remote shell would be
  supervisor_ = std::make_unique<Supervisor>(options);
  ASSERT_TRUE(supervisor_
                  ->Start({Rank(0, {"--wait_for_user_signals", "--touch_file=" + File("ready-%p")}),
                           Rank(1, {"--wait_for_user_signals", "--touch_file=" + File("ready-%p")}),
                           Service(0), remote})
                  .ok());
  // Once the three that catch or touch are set up (their handlers come before the file).
  std::thread sender([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto ready = [&] {
      int n = 0;
      for (const auto& e : std::filesystem::directory_iterator(tmp_)) {
        const std::string name = e.path().filename().string();
        n += name.rfind("ready-", 0) == 0 && name.find(".tmp") == std::string::npos;
      }
      return n;
    };
    while (ready() < 3 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(getpid(), SIGUSR1);
    kill(getpid(), SIGUSR2);
  });
  const int status = supervisor_->Wait();
  sender.join();
  EXPECT_EQ(status, 0) << err_.str() << supervisor_->FailureSummary();
  EXPECT_THAT(out_.str(), HasSubstr("[rank 0] got SIGUSR1 and SIGUSR2\n"));
  EXPECT_THAT(out_.str(), HasSubstr("[rank 1] got SIGUSR1 and SIGUSR2\n"));
  EXPECT_EQ(supervisor_->ReceivedSignal(), 0);
  for (const ProcessResult& r : supervisor_->results()) {
    EXPECT_FALSE(r.signaled && (r.signal == SIGUSR1 || r.signal == SIGUSR2)) << r.name;
  }
  const std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[2].stopped_as_service);
  EXPECT_TRUE(results[3].exited && results[3].exit_code == 0) << results[3].signal;
  ExpectNoProcessLeft();
}

// The zombies in process group `pgid` among this process's children (the supervisor makes it
// a child subreaper); earlier tests' leftovers are in other groups.
int ZombieChildren(pid_t pgid) {
  int zombies = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat) || stat.rfind(')') == std::string::npos) continue;
    std::istringstream rest(stat.substr(stat.rfind(')') + 1));
    char state = 0;
    pid_t ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (state == 'Z' && ppid == getpid() && pgrp == pgid) ++zombies;
  }
  return zombies;
}

TEST_F(SupervisorTest, ASignalThatTakesTheBlameFromAnEarlierErrorSaysSo) {
  // Rank 1 fails first; rank 0 aborts a moment later (as a survivor may on a peer's failure).
  // Within the settle time the signal is the root cause, and the summary names the earlier one.
  int status = Run({Rank(0, {"--sleep_ms=600", "--signal=SIGABRT"}),
                    Rank(1, {"--sleep_ms=100", "--exit_code=3"})});
  EXPECT_EQ(status, 128 + SIGABRT);
  EXPECT_TRUE(supervisor_->results()[0].root_cause);
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr("gyrerun: rank 1 (pid " + std::to_string(supervisor_->results()[1].pid) +
                        ") had exited with code 3 "));
  EXPECT_THAT(
      supervisor_->FailureSummary(),
      HasSubstr("before rank 0 was killed by SIGABRT; the signal is taken as the root cause"));
}

// Ranks that time out on a stopped rank all exit with code 1 reporting it; the first of them
// to exit is only the fastest reporter. The ranks' verdict (SupervisorOptions::blame) names
// the rank at fault, and the summary marks that rank, keeping the first exit's status.
TEST_F(SupervisorTest, TheRankTheVerdictBlamesIsTheRootCauseOverTheFirstToExit) {
  SupervisorOptions options = Options();
  int asked = 0;
  options.blame = [&asked] {
    ++asked;
    return Blame{2, 0, "stalled"};
  };
  const int status =
      Run({Rank(0, {"--sleep_ms=100", "--exit_code=1"}),
           Rank(1, {"--sleep_ms=300", "--exit_code=1"}), Rank(2, {"--sleep_ms=30000"})},
          options);
  EXPECT_EQ(status, 1);  // the first failure's status, as before
  EXPECT_EQ(asked, 1);
  const std::vector<ProcessResult> results = supervisor_->results();
  const std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("job failed: rank 2 (pid " + std::to_string(results[2].pid) +
                                 ") stalled, as the ranks' verdict says; the first to exit was "
                                 "rank 0 (pid " +
                                 std::to_string(results[0].pid) + "), with code 1"));
  EXPECT_THAT(SummaryRow(summary, "rank 2"),
              HasSubstr("terminated by gyrerun (SIGTERM)  <- root cause (verdict: stalled)"));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("exit 1  <- first to exit"));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), Not(HasSubstr("root cause")));
  EXPECT_THAT(SummaryRow(summary, "rank 1"), Not(HasSubstr("<-")));
  // The blamed rank's tail first.
  EXPECT_LT(summary.find("stderr output from rank 2"), summary.find("stderr output from rank 0"));
  ExpectNoProcessLeft();
}

// A network cut between ranks {0,1} and {2,3}: each side's verdict blames the other, and the
// first rank to exit is only the first to report. The summary says the verdicts contradict
// each other, names both sides, and marks no rank as the root cause.
TEST_F(SupervisorTest, VerdictsThatBlameEachOtherPointAtTheNetworkNotAtTheFirstToExit) {
  SupervisorOptions options = Options();
  options.blame = [] {
    Blame b;
    b.side_a = {0, 1};
    b.side_b = {2, 3};
    b.what_a = b.what_b = "unreachable";
    return b;
  };
  const int status = Run(
      {Rank(0, {"--sleep_ms=100", "--exit_code=1"}), Rank(1, {"--sleep_ms=200", "--exit_code=1"}),
       Rank(2, {"--sleep_ms=200", "--exit_code=1"}), Rank(3, {"--sleep_ms=300", "--exit_code=1"})},
      options);
  EXPECT_EQ(status, 1);  // the first failure's status, as before
  const std::vector<ProcessResult> results = supervisor_->results();
  const std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary,
              HasSubstr("gyrerun: job failed: the ranks' verdicts contradict each other: ranks "
                        "0-1 and ranks 2-3 each report the other side as unreachable, which "
                        "points at the network between them, not at one rank; the first to exit "
                        "was rank 0 (pid " +
                        std::to_string(results[0].pid) + "), with code 1"));
  EXPECT_THAT(summary, Not(HasSubstr("root cause")));
  EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("exit 1  <- first to exit"));
  for (const std::string other : {"rank 1", "rank 2", "rank 3"}) {
    EXPECT_THAT(SummaryRow(summary, other), Not(HasSubstr("<-"))) << other;
  }

  // Sides that call each other different things say which side said what.
  options.blame = [] {
    Blame b;
    b.side_a = {0};
    b.side_b = {1};
    b.what_a = "unreachable";
    b.what_b = "stalled";
    return b;
  };
  EXPECT_EQ(Run({Rank(0, {"--sleep_ms=100", "--exit_code=1"}),
                 Rank(1, {"--sleep_ms=200", "--exit_code=1"})},
                options),
            1);
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr("rank 0 and rank 1 each report the other side as at fault (rank 0 call it "
                        "unreachable, rank 1 call it stalled), which points at the network"));
  ExpectNoProcessLeft();
}

// The verdict blames a rank that left, and that rank's program exited with an error of its
// own (a bad flag found after its communicator existed) after another rank had exited: the
// summary leads with its exit, the verdict's class following as what the others saw.
TEST_F(SupervisorTest, ABlamedRankThatExitedWithAnErrorIsNamedByItsExit) {
  SupervisorOptions options = Options();
  options.blame = [] { return Blame{1, 0, "left"}; };
  const int status = Run(
      {Rank(0, {"--sleep_ms=100", "--exit_code=1"}), Rank(1, {"--sleep_ms=300", "--exit_code=2"})},
      options);
  EXPECT_EQ(status, 1);
  const std::vector<ProcessResult> results = supervisor_->results();
  const std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("gyrerun: job failed: rank 1 (pid " +
                                 std::to_string(results[1].pid) + ") exited with code 2 after "));
  EXPECT_THAT(summary, HasSubstr(", and the other ranks' calls failed without it (the ranks' "
                                 "verdict: left); the first to exit was rank 0 (pid "));
  EXPECT_THAT(SummaryRow(summary, "rank 1"), HasSubstr("<- root cause (verdict: left)"));
  ExpectNoProcessLeft();
}

// A stalled rank's process is the one the verdict saw not answering, and one that names itself
// for not running the one that did not: with a daemon beside the program, the daemon whose
// pid the verdict gives. A rank that did not make the call is its program.
TEST_F(SupervisorTest, AVerdictNamesTheStalledProcessOfARankAndOtherwiseItsProgram) {
  for (const std::string what : {"stalled", "not running", "not entered"}) {
    SCOPED_TRACE(what);
    SupervisorOptions options = Options();
    options.service_linger = Seconds(60);
    pid_t service_pid = 0;
    options.blame = [&] { return Blame{1, service_pid, what}; };
    ProcessSpec first = Rank(0, {"--sleep_ms=100", "--exit_code=1"});
    first.name = "rank 0 program";
    ProcessSpec program = Rank(1, {"--sleep_ms=30000"});
    program.name = "rank 1 program";
    supervisor_ = std::make_unique<Supervisor>(options);
    ASSERT_TRUE(supervisor_->Start({Service(0), first, Service(1), program}).ok());
    service_pid = supervisor_->results()[2].pid;
    EXPECT_EQ(supervisor_->Wait(), 1);
    const std::string summary = supervisor_->FailureSummary();
    const bool daemon = what != "not entered";
    const std::string blamed = daemon ? "rank 1 gyred" : "rank 1 program";
    const std::string other = daemon ? "rank 1 program" : "rank 1 gyred";
    EXPECT_THAT(SummaryRow(summary, blamed), HasSubstr("<- root cause (verdict: " + what + ")"));
    EXPECT_THAT(SummaryRow(summary, other), Not(HasSubstr("root cause")));
    EXPECT_THAT(summary, HasSubstr("job failed: " + blamed));
    ExpectNoProcessLeft();
  }
}

// What a verdict does not outrank: a process killed by a signal (a crash is a fact of its
// own), and a verdict naming the rank that failed first anyway.
TEST_F(SupervisorTest, AVerdictDoesNotOutrankACrashOrNameTheFirstFailureTwice) {
  {
    SupervisorOptions options = Options();
    options.blame = [] { return Blame{1, 0, "stalled"}; };
    EXPECT_EQ(Run({Rank(0, {"--sleep_ms=100", "--signal=SIGKILL"}), Rank(1, {"--sleep_ms=30000"})},
                  options),
              128 + SIGKILL);
    const std::string summary = supervisor_->FailureSummary();
    EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("signal SIGKILL (9)  <- root cause"));
    EXPECT_THAT(summary, Not(HasSubstr("verdict")));
  }
  {
    SupervisorOptions options = Options();
    options.blame = [] { return Blame{0, 0, "dead"}; };
    EXPECT_EQ(
        Run({Rank(0, {"--sleep_ms=100", "--exit_code=3"}), Rank(1, {"--sleep_ms=30000"})}, options),
        3);
    const std::string summary = supervisor_->FailureSummary();
    EXPECT_THAT(SummaryRow(summary, "rank 0"), HasSubstr("exit 3  <- root cause"));
    EXPECT_THAT(summary, HasSubstr("job failed: rank 0 (pid "));
    EXPECT_THAT(summary, Not(HasSubstr("first to exit")));
  }
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, ServiceIsStoppedOnceItsRanksProgramEndedWithoutFailingTheJob) {
  // Rank 0's service would serve for a minute; its program ends after 0.5 s without a word
  // to it. Rank 1 has no service.
  SupervisorOptions options = Options();
  options.service_linger = Millis(300);
  ProcessSpec program = Rank(0, {"--sleep_ms=500"});
  program.name = "rank 0 program";
  EXPECT_EQ(Run({Service(0), program, Rank(1, {})}, options), 0) << err_.str();
  EXPECT_LT(ElapsedSeconds(), 10.0);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].stopped_as_service);
  EXPECT_TRUE(results[0].killed_by_launcher);
  EXPECT_EQ(results[0].signal, SIGTERM);
  EXPECT_FALSE(results[0].root_cause);
  // Not before its program ended, and the linger after it.
  EXPECT_GE(results[0].run_time, results[1].run_time + Millis(250));
  EXPECT_FALSE(results[1].stopped_as_service);
  EXPECT_EQ(supervisor_->FailureSummary(), "");
  ExpectNoProcessLeft();
}

// A service that exits 0 while its rank's program runs: a failure at once if what it makes
// when it serves (ProcessSpec::ready_path) never appeared; its own business if it did (a
// daemon whose program closed its communicator and runs on).
TEST_F(SupervisorTest, AServiceThatExitsBeforeItEverServedFailsTheJob) {
  SupervisorOptions options = Options();
  ProcessSpec program = Rank(0, {"--sleep_ms=20000"});
  program.name = "rank 0 program";
  ProcessSpec quits = Rank(0, {"--sleep_ms=100"});
  quits.name = "rank 0 gyred";
  quits.service = true;
  quits.ready_path = File("rank0.sock");
  EXPECT_EQ(Run({quits, program}, options), 1) << err_.str();
  EXPECT_LT(ElapsedSeconds(), 10.0);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].never_served);
  EXPECT_TRUE(results[0].root_cause);
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr("rank 0 gyred (pid " + std::to_string(results[0].pid) +
                        ") exited with code 0 before it ever served its rank's program, which "
                        "was still running (nothing appeared at " +
                        File("rank0.sock") + ")"));

  // The same with the path there: the program runs to its end and the job passes.
  std::ofstream(File("rank0.sock")) << "";
  program.argv = Rank(0, {"--sleep_ms=500"}).argv;
  EXPECT_EQ(Run({quits, program}, options), 0) << err_.str();
  EXPECT_FALSE(supervisor_->results()[0].never_served);
  EXPECT_EQ(supervisor_->FailureSummary(), "");
}

// An exit 0 that proves nothing by itself (a remote shell's, whose command may never have
// run) is asked about: refused, it fails the job, the headline gives the whole why and the
// table its short form; accepted, or the launcher's own doing, it is an exit 0 as any other.
TEST_F(SupervisorTest, AnExitZeroItsCheckRefusesFailsTheJob) {
  SupervisorOptions options = Options();
  int asked = 0;
  ProcessSpec shell = Rank(0, {});
  shell.name = "h rank 0 gyred";
  shell.check_exit_zero = [&asked] {
    ++asked;
    return std::string("before joining the job: no claim seen: is it run? (--rsh 'true')");
  };
  EXPECT_EQ(Run({shell, Rank(1, {"--sleep_ms=20000"})}, options), 1) << err_.str();
  EXPECT_LT(ElapsedSeconds(), 10.0);
  EXPECT_EQ(asked, 1);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].root_cause);
  EXPECT_TRUE(results[0].failed_on_its_own());
  EXPECT_TRUE(results[1].killed_by_launcher);
  const std::string summary = supervisor_->FailureSummary();
  EXPECT_THAT(summary, HasSubstr("gyrerun: job failed: h rank 0 gyred (pid " +
                                 std::to_string(results[0].pid) + ") exited with code 0 after "));
  EXPECT_THAT(summary, HasSubstr(", before joining the job: no claim seen: is it run? "
                                 "(--rsh 'true')\n"));
  EXPECT_THAT(SummaryRow(summary, "h rank 0 gyred"),
              HasSubstr("exit 0 before joining the job  <- root cause"));

  // Accepted: the job passes.
  asked = 0;
  shell.check_exit_zero = [&asked] {
    ++asked;
    return std::string();
  };
  EXPECT_EQ(Run({shell, Rank(1, {})}, options), 0) << err_.str();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(supervisor_->FailureSummary(), "");

  // Not asked of a non-zero exit, nor of a process the launcher stopped.
  asked = 0;
  shell.check_exit_zero = [&asked] {
    ++asked;
    return std::string("refused");
  };
  ProcessSpec failing = Rank(0, {"--exit_code=3"});
  failing.check_exit_zero = shell.check_exit_zero;
  EXPECT_EQ(Run({failing}, options), 3);
  // (It exits 0 on the launcher's SIGTERM: that exit is the launcher's doing.)
  ProcessSpec stopped = Rank(0, {});
  stopped.argv = {"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 20 & wait"};
  stopped.check_exit_zero = shell.check_exit_zero;
  EXPECT_EQ(Run({stopped, Rank(1, {"--sleep_ms=300", "--exit_code=4"})}, options), 4);
  EXPECT_TRUE(supervisor_->results()[0].killed_by_launcher);
  EXPECT_TRUE(supervisor_->results()[0].exited);
  EXPECT_EQ(supervisor_->results()[0].exit_code, 0);
  EXPECT_EQ(asked, 0);
}

TEST_F(SupervisorTest, ServiceOfAFailedProgramIsStoppedAsPartOfTheFailure) {
  SupervisorOptions options = Options();
  options.service_linger = Millis(100);
  ProcessSpec program = Rank(0, {"--sleep_ms=200", "--exit_code=3"});
  program.name = "rank 0 program";
  EXPECT_EQ(Run({Service(0), program}, options), 3);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_FALSE(results[0].stopped_as_service);
  EXPECT_TRUE(results[0].killed_by_launcher);
  EXPECT_TRUE(results[1].root_cause);
  EXPECT_THAT(SummaryRow(supervisor_->FailureSummary(), "rank 0 gyred"),
              HasSubstr("terminated by gyrerun"));
}

// After the first failure the launcher waits for the survivors' reports, but no longer than
// it takes them: once what is left is the failed rank's own daemon (stopped, say) and daemons
// whose programs have ended, the job is stopped without waiting out the settle window.
TEST_F(SupervisorTest, TheSettleWindowEndsOnceNoSurvivorIsLeftToReport) {
  SupervisorOptions options = Options();
  options.settle_time = Seconds(30);  // the services would serve for a minute
  options.service_linger = Seconds(60);
  ProcessSpec failed = Rank(0, {"--sleep_ms=100", "--exit_code=3"});
  failed.name = "rank 0 program";
  ProcessSpec survivor = Rank(1, {"--sleep_ms=700", "--exit_code=1"});
  survivor.name = "rank 1 program";
  EXPECT_EQ(Run({Service(0), failed, Service(1), survivor}, options), 3);
  EXPECT_LT(ElapsedSeconds(), 20.0) << "the settle window was waited out";
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[1].root_cause);
  // The survivor was heard: it ended on its own, not stopped by the launcher.
  EXPECT_TRUE(results[3].exited);
  EXPECT_FALSE(results[3].killed_by_launcher);
  EXPECT_GE(results[3].run_time, Millis(600));
  EXPECT_TRUE(results[0].killed_by_launcher);
  EXPECT_TRUE(results[2].killed_by_launcher);
  ExpectNoProcessLeft();
}

// Survivors that report in turn (a large job's verdict) keep the settle window open, each
// exit for another settle_time, but no longer than settle_limit after the first failure.
TEST_F(SupervisorTest, SurvivorsReportingInTurnKeepTheSettleWindowOpenUpToItsLimit) {
  SupervisorOptions options = Options();
  // 2 s: each exit comes 0.9 s after the last, with 1.1 s to spare for a rank that starts or
  // wakes late on a loaded machine; without the extension rank 3 (2.7 s after the first
  // failure) would still be cut off.
  options.settle_time = Millis(2000);
  options.settle_limit = Millis(4000);
  std::vector<ProcessSpec> specs = {Rank(0, {"--sleep_ms=100", "--exit_code=3"})};
  for (int rank = 1; rank <= 3; ++rank) {  // at 1.0, 1.9 and 2.8 s: each 0.9 s after the last
    specs.push_back(
        Rank(rank, {"--sleep_ms=" + std::to_string(100 + 900 * rank), "--exit_code=1"}));
  }
  specs.push_back(Rank(4, {"--sleep_ms=8000", "--exit_code=1"}));  // well after the limit
  EXPECT_EQ(Run(std::move(specs), options), 3);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].root_cause);
  for (int rank = 1; rank <= 3; ++rank) {
    EXPECT_TRUE(results[rank].exited) << "rank " << rank;
    EXPECT_EQ(results[rank].exit_code, 1) << "rank " << rank;
    EXPECT_FALSE(results[rank].killed_by_launcher) << "rank " << rank << " was cut off";
  }
  EXPECT_TRUE(results[4].killed_by_launcher);
  EXPECT_LT(ElapsedSeconds(), 7.5);
}

// The window's extension is for hearing survivors, not for shifting the blame: a signal
// death outranks the first error exit only within settle_time of it, as without extension.
TEST_F(SupervisorTest, ASignalLongAfterTheFirstFailureDoesNotTakeTheBlame) {
  SupervisorOptions options = Options();
  // Exits 0.9 s apart keep the window open (1.1 s to spare each); the signal comes 3.6 s after
  // the first failure, 1.6 s past the 2 s in which it could have taken the blame.
  options.settle_time = Millis(2000);
  options.settle_limit = Millis(8000);
  EXPECT_EQ(Run({Rank(0, {"--sleep_ms=100", "--exit_code=3"}),
                 Rank(1, {"--sleep_ms=1000", "--exit_code=1"}),
                 Rank(2, {"--sleep_ms=1900", "--exit_code=1"}),
                 Rank(3, {"--sleep_ms=2800", "--exit_code=1"}),
                 Rank(4, {"--sleep_ms=3700", "--signal=SIGABRT"})},
                options),
            3);
  std::vector<ProcessResult> results = supervisor_->results();
  EXPECT_TRUE(results[0].root_cause);
  EXPECT_TRUE(results[4].signaled);
  EXPECT_EQ(results[4].signal, SIGABRT);
  EXPECT_FALSE(results[4].killed_by_launcher);
  EXPECT_FALSE(results[4].root_cause);
}

// A survivor's program still running keeps the settle window open to its end.
TEST_F(SupervisorTest, ASurvivorStillRunningIsGivenTheWholeSettleWindow) {
  SupervisorOptions options = Options();
  options.settle_time = Millis(1500);
  EXPECT_EQ(
      Run({Rank(0, {"--sleep_ms=100", "--exit_code=3"}), Rank(1, {"--sleep_ms=30000"})}, options),
      3);
  EXPECT_GE(ElapsedSeconds(), 1.5);
  EXPECT_LT(ElapsedSeconds(), 20.0);
  EXPECT_TRUE(supervisor_->results()[1].killed_by_launcher);
}

TEST_F(SupervisorTest, RequestStopFromAnotherThreadEndsTheJobWithItsStatus) {
  supervisor_ = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(
      supervisor_->Start({Rank(0, {"--sleep_ms=30000"}), Rank(1, {"--sleep_ms=30000"})}).ok());
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    supervisor_->RequestStop("no rank made progress for 2 s", 124);
    supervisor_->RequestStop("a second request is ignored", 99);
  });
  auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(supervisor_->Wait(), 124);
  watchdog.join();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  for (const ProcessResult& r : supervisor_->results()) {
    EXPECT_TRUE(r.killed_by_launcher);
    EXPECT_EQ(r.signal, SIGTERM);
  }
  EXPECT_THAT(supervisor_->FailureSummary(),
              HasSubstr("gyrerun: job stopped: no rank made progress for 2 s\n"));
  EXPECT_THAT(supervisor_->FailureSummary(), Not(HasSubstr("second request")));
  supervisor_->RequestStop("after the end: nothing to stop", 1);  // must not write anywhere
  ExpectNoProcessLeft();
}

TEST_F(SupervisorTest, OrphansThatExitAreReapedWhileTheJobRuns) {
  // The rank starts 20 short-lived background helpers that outlive their parent shell, then
  // runs on; each one is re-parented to this process when it is orphaned.
  ProcessSpec rank;
  rank.rank = 0;
  rank.argv = {"/bin/sh", "-c", "for i in $(seq 20); do (sleep 0.05 &); done; sleep 2"};
  supervisor_ = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(supervisor_->Start({rank}).ok());
  int zombies = -1;
  std::thread look([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    zombies = ZombieChildren(supervisor_->process_group());
  });
  EXPECT_EQ(supervisor_->Wait(), 0) << err_.str();
  look.join();
  EXPECT_EQ(zombies, 0) << "exited orphans were held until the job ended";
}

TEST_F(SupervisorTest, SecondSignalToLauncherSkipsTheGracePeriod) {
  SupervisorOptions options = Options();
  options.grace_period = Seconds(30);
  supervisor_ = std::make_unique<Supervisor>(options);
  std::string ready = File("ready");
  ASSERT_TRUE(
      supervisor_
          ->Start({Rank(0, {"--ignore_sigterm", "--touch_file=" + ready, "--sleep_ms=30000"})})
          .ok());
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (access(ready.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(access(ready.c_str(), F_OK), 0) << "rank 0 never got ready";
  ASSERT_EQ(raise(SIGINT), 0);
  ASSERT_EQ(raise(SIGINT), 0);
  auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(supervisor_->Wait(), 128 + SIGINT);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  ProcessResult r = supervisor_->results()[0];
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_TRUE(r.sigkilled_by_launcher);
}

TEST_F(SupervisorTest, ChildGetsEnvCwdAndNoInheritedFds) {
  int leaked = open("/dev/null", O_RDONLY);  // deliberately not close-on-exec
  ASSERT_GE(leaked, 0);
  ProcessSpec spec = Rank(
      4, {"--print_env=GYRE_TEST_VALUE", "--print_cwd", "--print_fds", "--stdout_text=last words"});
  spec.name = "rank 4 program";
  spec.env = {{"GYRE_TEST_VALUE", "hello world"}};
  spec.cwd = tmp_.string();
  EXPECT_EQ(Run({spec}), 0);
  close(leaked);
  EXPECT_THAT(out_.str(), HasSubstr("[rank 4 program] env GYRE_TEST_VALUE=hello world\n"));
  EXPECT_THAT(out_.str(), HasSubstr("[rank 4 program] cwd " + tmp_.string() + "\n"));
  EXPECT_THAT(out_.str(), HasSubstr("[rank 4 program] open fds: 0 1 2\n"));
  // A last line without '\n' is still relayed, as a whole line.
  EXPECT_THAT(out_.str(), HasSubstr("[rank 4 program] last words\n"));
}

TEST_F(SupervisorTest, PrefixCanBeTurnedOff) {
  SupervisorOptions options = Options();
  options.prefix_output = false;
  EXPECT_EQ(Run({Rank(0, {"--stdout_lines=2"})}, options), 0);
  EXPECT_EQ(out_.str(), "stdout line 1 of 2\nstdout line 2 of 2\n");
}

std::string FileText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Each process's lines also go, unprefixed, to its own two files; the relay is unchanged.
TEST_F(SupervisorTest, LogFilesGetEachProcesssOwnLinesWithoutThePrefix) {
  ProcessSpec talker = Rank(0, {"--stdout_lines=2", "--stderr_lines=1", "--stdout_text=last"});
  talker.log_prefix = (tmp_ / "rank0").string();
  ProcessSpec quiet = Rank(1, {"--stdout_lines=1"});
  quiet.log_prefix = (tmp_ / "rank1").string();
  {
    std::ofstream stale(tmp_ / "rank1.stderr");
    stale << "left by an earlier job\n";
  }
  EXPECT_EQ(Run({talker, quiet}), 0) << err_.str();
  EXPECT_EQ(FileText(tmp_ / "rank0.stdout"), "stdout line 1 of 2\nstdout line 2 of 2\nlast\n");
  EXPECT_EQ(FileText(tmp_ / "rank0.stderr"), "stderr line 1 of 1\n");
  EXPECT_EQ(FileText(tmp_ / "rank1.stdout"), "stdout line 1 of 1\n");
  EXPECT_EQ(FileText(tmp_ / "rank1.stderr"), "");  // emptied at Start
  EXPECT_THAT(out_.str(), HasSubstr("[rank 0] stdout line 2 of 2\n"));
  EXPECT_THAT(out_.str(), HasSubstr("[rank 1] stdout line 1 of 1\n"));
  EXPECT_EQ(supervisor_->LostOutput(), "");
}

// A log file that cannot be made fails Start, naming it, before any process runs.
TEST_F(SupervisorTest, ALogFileThatCannotBeMadeStopsTheJobBeforeItStarts) {
  const std::string ran = (tmp_ / "ran").string();
  ProcessSpec first = Rank(0, {"--touch_file=" + ran});
  ProcessSpec second = Rank(1, {"--touch_file=" + ran});
  second.log_prefix = (tmp_ / "no-such-folder" / "rank1").string();
  Supervisor supervisor(Options());
  Status status = supervisor.Start({first, second});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 1: cannot open its log file " +
                                          (tmp_ / "no-such-folder" / "rank1.stdout").string() +
                                          ": No such file or directory"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(std::filesystem::exists(ran));
}

// Lines that cannot be written to a log file (a full disk) are counted, and the job goes on.
TEST_F(SupervisorTest, LinesALogFileCannotTakeAreCountedAndTheJobGoesOn) {
  std::filesystem::create_symlink("/dev/full", tmp_ / "rank0.stdout");
  ProcessSpec spec = Rank(0, {"--stdout_lines=3"});
  spec.log_prefix = (tmp_ / "rank0").string();
  EXPECT_EQ(Run({spec}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("[rank 0] stdout line 3 of 3\n"));
  EXPECT_EQ(supervisor_->LostOutput(),
            "3 lines could not be written to the log files (the first to " +
                (tmp_ / "rank0.stdout").string() + "): No space left on device");
}

TEST_F(SupervisorTest, RejectsBadSpecs) {
  Supervisor empty(Options());
  EXPECT_EQ(empty.Start({}).code(), StatusCode::kInvalidArgument);
  Supervisor no_program(Options());
  ProcessSpec spec;
  spec.rank = 7;
  Status status = no_program.Start({spec});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("rank 7"));
}

TEST_F(SupervisorTest, OnlyOneSupervisorRunsAtATime) {
  auto first = std::make_unique<Supervisor>(Options());
  ASSERT_TRUE(first->Start({Rank(0, {"--sleep_ms=30000"})}).ok());
  Supervisor second(Options());
  Status status = second.Start({Rank(0, {})});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("already running"));
  pid_t pid = first->results()[0].pid;
  first.reset();
  EXPECT_TRUE(Gone(pid));
}

TEST_F(SupervisorTest, DestructorKillsAJobThatWasNeverWaitedFor) {
  pid_t pid;
  {
    Supervisor supervisor(Options());
    ASSERT_TRUE(supervisor.Start({Rank(0, {"--sleep_ms=30000"})}).ok());
    pid = supervisor.results()[0].pid;
    ASSERT_FALSE(Gone(pid));
  }
  EXPECT_TRUE(Gone(pid));
  // A new job can run afterwards: the signal handlers were released.
  EXPECT_EQ(Run({Rank(0, {})}), 0);
}

}  // namespace
}  // namespace gyre::launcher
