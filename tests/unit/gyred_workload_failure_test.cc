// gyred --run selftest/main: every rank that fails prints the first call that failed on it and
// why, not only rank 0 in its report. Two real gyred processes on a FileStore folder, given
// different secrets, so that their first collective fails on both.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"

namespace gyre {
namespace {

using ::testing::HasSubstr;

// build/bin/gyred: GYRE_BIN_DIR is set by CTest; run by hand, the binary sits in ../bin.
std::string GyredBinary() {
  if (const char* env = std::getenv("GYRE_BIN_DIR")) return std::string(env) + "/gyred";
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/../bin/gyred";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteSecret(const std::string& path, char digit) {
  { std::ofstream(path) << std::string(64, digit) << "\n"; }
  ::chmod(path.c_str(), 0600);
}

pid_t StartGyred(const std::vector<std::string>& flags, const std::string& log) {
  std::vector<std::string> args = {GyredBinary()};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || ::dup2(out, STDERR_FILENO) < 0 || ::dup2(out, STDOUT_FILENO) < 0) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The exit code, or -1 when it was killed or had to be killed after `timeout`.
int WaitExit(pid_t pid, Duration timeout) {
  const TimePoint until = SteadyClock::Get()->Now() + timeout;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (SteadyClock::Get()->Now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(5000);
  }
}

class GyredWorkloadFailureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(GyredBinary().c_str(), X_OK), 0) << GyredBinary() << ": build gyred";
    std::string base = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    std::string templ = base + "/gyred_workload_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }
  std::string dir_;
};

TEST_P(GyredWorkloadFailureTest, EveryFailingRankNamesItsFirstFailedCall) {
  const std::string workload = GetParam();
  WriteSecret(dir_ + "/secret0", '1');
  WriteSecret(dir_ + "/secret1", '2');
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    pids.push_back(StartGyred({"--rank=" + r, "--world_size=2", "--store=file://" + dir_ + "/store",
                               "--job_id=wl-" + workload, "--run=" + workload, "--timeout=3",
                               "--rendezvous_timeout=10", "--secret_file=" + dir_ + "/secret" + r},
                              dir_ + "/rank" + r + ".log"));
  }
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(WaitExit(pid, Seconds(60)));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = ReadAll(dir_ + "/rank" + std::to_string(rank) + ".log");
    SCOPED_TRACE("rank " + std::to_string(rank) + " log:\n" + log);
    EXPECT_EQ(codes[rank], 1);
    // The verification's first call: the failing collective and its status, on this rank.
    EXPECT_THAT(log, HasSubstr("[rank " + std::to_string(rank) + "] gyred: --run " + workload +
                               " failed: first failure on this rank: allreduce "));
    EXPECT_THAT(log, ::testing::ContainsRegex("failed: first failure on this rank: allreduce "
                                              "[a-z_]+, int32, count [0-9]+, root 1: [A-Za-z]+: "));
  }
  // Rank 0's report names that first failure before the gather that could not collect.
  EXPECT_THAT(ReadAll(dir_ + "/rank0.log"),
              HasSubstr("verification: first failure on this rank: allreduce "));
}

INSTANTIATE_TEST_SUITE_P(Workloads, GyredWorkloadFailureTest,
                         ::testing::Values("selftest", "main"));

}  // namespace
}  // namespace gyre
