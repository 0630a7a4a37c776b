// A Ctrl-Z of gyrerun stops the whole job, and `fg` continues it: two ranks looping allreduces
// under a 1 s progress timeout are stopped (SIGTSTP to gyrerun) for longer than that timeout
// and than gyrerun's own --job_timeout, then continued (SIGCONT), and the job still ends well.
// Also two ranks started without gyrerun, stopped and continued together as a shell would.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

// A process as /proc/<pid>/stat tells it.
struct ProcState {
  char state = '?';  // 'T' stopped; '?' gone
  pid_t ppid = 0;
  std::string comm;
};

ProcState ReadState(pid_t pid) {
  ProcState s;
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) return s;
  s.comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  rest >> s.state >> s.ppid;
  return s;
}

// The children of `parent` that run a program of their own (not a forked copy of it, as
// gyrerun's process group guardian is).
std::vector<pid_t> ProgramChildren(pid_t parent) {
  const std::string parent_comm = ReadState(parent).comm;
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (const dirent* e = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const ProcState s = ReadState(pid);
    if (s.ppid == parent && s.comm != parent_comm) found.push_back(pid);
  }
  ::closedir(dir);
  return found;
}

// Waits up to `seconds` for `pred`; whether it held.
template <typename Pred>
bool WaitFor(double seconds, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Starts `argv` with stdout and stderr into `log`, in a process group of its own (so a stop
// signal to it is not discarded as to an orphaned group, whatever runs this test), with the
// default action for SIGTSTP (a parent may ignore it).
pid_t StartInOwnGroup(const std::vector<std::string>& args, const std::string& log,
                      const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return StartLogged(args.front(), std::vector<std::string>(args.begin() + 1, args.end()), log,
                     [&env] {
                       ::setpgid(0, 0);
                       ::signal(SIGTSTP, SIG_DFL);
                       for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
                     });
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct StopCase {
  const char* mode;
  int stop_seconds;  // also the --job_timeout, which the stop alone would exceed
};

class JobStopTest : public ::testing::TestWithParam<StopCase> {};

// Kills (and continues, so the kill is taken) and reaps a gyrerun a test started, unless the
// test saw it exit (pid set to -1); its guardian takes the job down with it.
struct Reaper {
  pid_t pid;
  ~Reaper() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::kill(pid, SIGCONT);
    ::waitpid(pid, nullptr, 0);
  }
};

// Stopped once both ranks loop, for longer than the progress timeout and the job timeout:
// every rank process is stopped with gyrerun, and once gyrerun is continued the job ends 0.
// (The daemon case stops longer than a program waits on a silent daemon, 10 s.)
TEST_P(JobStopTest, ACtrlZOfGyrerunStopsTheJobAndFgContinuesIt) {
  const StopCase c = GetParam();
  const std::string dir = EmptyTempDir(std::string("job-stop-") + c.mode);
  const std::string log = dir + "/gyrerun.log";
  const pid_t gyrerun = StartInOwnGroup(
      {BinDir() + "/gyrerun", "-n", "2", "--mode", c.mode, "--timeout", "1", "--job_timeout",
       std::to_string(c.stop_seconds), "--", BinDir() + "/gyre-test-client", "--check=false",
       "--loop_seconds=1.5", "--say_looping"},
      log);
  ASSERT_GT(gyrerun, 0);
  Reaper reaper{gyrerun};
  ASSERT_TRUE(WaitFor(30, [&] { return Count(ReadAll(log), ": looping") == 2; })) << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::vector<pid_t> ranks = ProgramChildren(gyrerun);
  ASSERT_EQ(ranks.size(), std::string(c.mode) == "daemon" ? 4u : 2u) << ReadAll(log);

  ASSERT_EQ(::kill(gyrerun, SIGTSTP), 0);
  ASSERT_TRUE(WaitFor(5, [&] { return ReadState(gyrerun).state == 'T'; }))
      << "gyrerun did not stop: " << ReadAll(log);
  // A SIGSTOP takes effect on a process running on another CPU a moment after it is sent.
  for (pid_t pid : ranks) {
    EXPECT_TRUE(WaitFor(2, [&] { return ReadState(pid).state == 'T'; }))
        << ReadState(pid).comm << " (pid " << pid << ") is not stopped with gyrerun";
  }
  std::this_thread::sleep_for(std::chrono::seconds(c.stop_seconds));
  for (pid_t pid : ranks) EXPECT_EQ(ReadState(pid).state, 'T') << pid;
  ASSERT_EQ(::kill(gyrerun, SIGCONT), 0);

  const int code = WaitExit(gyrerun, Seconds(30));
  reaper.pid = -1;
  const std::string out = ReadAll(log);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("gyrerun: stopped the job (SIGTSTP)"), std::string::npos) << out;
  EXPECT_NE(out.find("gyrerun: continued the job after "), std::string::npos) << out;
  EXPECT_EQ(out.find("failed"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Modes, JobStopTest,
                         ::testing::Values(StopCase{"embedded", 4}, StopCase{"daemon", 11}),
                         [](const auto& info) { return std::string(info.param.mode); });

// --hang_timeout does not count a stop: rank 0 spends 7 s between two calls while rank 1
// waits in the next one, under a 4 s hang timeout, and the job is stopped for 5 s of that
// (a sleep goes on to its end while stopped). Rank 1 reports no progress for 5 s once
// resumed, and rank 0 is not in the call for 2 s more; the watchdog counts only the time
// since the job was continued.
TEST(JobStopTest, AStopIsNotAHang) {
  const std::string dir = EmptyTempDir("job-stop-hang");
  const std::string log = dir + "/gyrerun.log";
  const pid_t gyrerun =
      StartInOwnGroup({BinDir() + "/gyrerun", "-n", "2", "--mode", "embedded", "--timeout", "10",
                       "--hang_timeout", "4", "--", BinDir() + "/gyre-test-client", "--check=false",
                       "--loop_iters=8", "--skip_rank=0", "--fault_at=5", "--skip_seconds=7"},
                      log);
  ASSERT_GT(gyrerun, 0);
  Reaper reaper{gyrerun};
  ASSERT_TRUE(WaitFor(30, [&] { return Count(ReadAll(log), "rank 0 skips call 5") == 1; }))
      << ReadAll(log);
  ASSERT_EQ(::kill(gyrerun, SIGTSTP), 0);
  ASSERT_TRUE(WaitFor(5, [&] { return ReadState(gyrerun).state == 'T'; })) << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ASSERT_EQ(::kill(gyrerun, SIGCONT), 0);
  const int code = WaitExit(gyrerun, Seconds(30));
  reaper.pid = -1;
  const std::string out = ReadAll(log);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("--hang_timeout"), std::string::npos) << out;
}

// Through daemons, a program waiting on its daemon's answer counts the daemon's silence only
// from the resumption: rank 1's program waits in a call (rank 0 sleeps 14 s before it) when
// the job is stopped for 11 s, longer than a program waits on a silent daemon (10 s), and the
// programs are resumed half a second before their daemons (as a scheduler may).
TEST(JobStopTest, AProgramDoesNotTakeItsStoppedDaemonForASilentOne) {
  const std::string dir = EmptyTempDir("job-stop-daemon-wait");
  const std::string log = dir + "/gyrerun.log";
  const pid_t gyrerun =
      StartInOwnGroup({BinDir() + "/gyrerun", "-n", "2", "--mode", "daemon", "--timeout", "30",
                       "--", BinDir() + "/gyre-test-client", "--check=false", "--loop_iters=8",
                       "--skip_rank=0", "--fault_at=5", "--skip_seconds=14"},
                      log);
  ASSERT_GT(gyrerun, 0);
  Reaper reaper{gyrerun};
  ASSERT_TRUE(WaitFor(30, [&] { return Count(ReadAll(log), "rank 0 skips call 5") == 1; }))
      << ReadAll(log);
  // Past the first slices of rank 1's wait, which would take the first look at the heartbeat
  // as the start of the silence.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::vector<pid_t> processes = ProgramChildren(gyrerun);
  ASSERT_EQ(::kill(gyrerun, SIGTSTP), 0);
  ASSERT_TRUE(WaitFor(5, [&] { return ReadState(gyrerun).state == 'T'; })) << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::seconds(11));
  for (pid_t pid : processes) {
    if (ReadState(pid).comm.rfind("gyre-test-clien", 0) == 0) ::kill(pid, SIGCONT);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(gyrerun, SIGCONT), 0);
  const int code = WaitExit(gyrerun, Seconds(30));
  reaper.pid = -1;
  const std::string out = ReadAll(log);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("failed"), std::string::npos) << out;
}

// Without gyrerun: two embedded ranks that a shell stops and continues together (their
// program's process group at a Ctrl-Z) do not give up on each other for the time they were
// stopped, which is longer than their progress timeout, nor for the moment one of them is
// resumed before the other.
TEST(JobStopTest, RanksStoppedAndContinuedTogetherGoOn) {
  const std::string dir = EmptyTempDir("ranks-stop");
  const std::string store = dir + "/store";
  ASSERT_EQ(::mkdir(store.c_str(), 0700), 0);
  pid_t pids[2] = {-1, -1};
  struct Reaper {
    pid_t* pids;
    ~Reaper() {
      for (int r = 0; r < 2; ++r) {
        if (pids[r] <= 0) continue;
        ::kill(pids[r], SIGKILL);
        ::kill(pids[r], SIGCONT);
        ::waitpid(pids[r], nullptr, 0);
      }
    }
  } reaper{pids};
  for (int r = 0; r < 2; ++r) {
    pids[r] = StartInOwnGroup(
        {BinDir() + "/gyre-test-client", "--check=false", "--loop_seconds=1.5", "--say_looping"},
        dir + "/log" + std::to_string(r),
        {{"GYRE_MODE", "embedded"},
         {"GYRE_RANK", std::to_string(r)},
         {"GYRE_WORLD_SIZE", "2"},
         {"GYRE_STORE", "file://" + store},
         {"GYRE_JOB_ID", "ranks-stop"},
         {"GYRE_TIMEOUT_MS", "2000"}});
    ASSERT_GT(pids[r], 0);
  }
  auto looping = [&] {
    return Count(ReadAll(dir + "/log0"), ": looping") == 1 &&
           Count(ReadAll(dir + "/log1"), ": looping") == 1;
  };
  ASSERT_TRUE(WaitFor(30, looping)) << ReadAll(dir + "/log0") << ReadAll(dir + "/log1");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (pid_t pid : pids) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  // Rank 1 first, and rank 0 1.2 s later (within the 2 s timeout): rank 1, waiting on rank 0,
  // finds its deadline long passed when its wait next wakes (within a second), and nothing
  // from rank 0 yet. (Resumed at once, either may get its data before it looks, or not.)
  ASSERT_EQ(::kill(pids[1], SIGCONT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ASSERT_EQ(::kill(pids[0], SIGCONT), 0);
  for (int r = 0; r < 2; ++r) {
    const int code = WaitExit(pids[r], Seconds(30));
    pids[r] = -1;
    const std::string out = ReadAll(dir + "/log" + std::to_string(r));
    EXPECT_EQ(code, 0) << "rank " << r << ": " << out;
    EXPECT_EQ(out.find("failed"), std::string::npos) << "rank " << r << ": " << out;
  }
}

}  // namespace
}  // namespace gyre::testing
