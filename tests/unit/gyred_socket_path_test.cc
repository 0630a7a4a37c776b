// gyred --socket PATH refuses a path it cannot take before it joins its job: a regular file
// there is named and kept, and another daemon's live socket is not taken over. Runs the real
// build/bin/gyred as a one-rank job on a FileStore folder.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/ipc/ipc.h"

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

struct Exit {
  int code = -1;  // -1: killed after the timeout
  Duration took{};
};

// Runs gyred as rank 0 of a one-rank job serving on `socket_path`; stderr goes to `log`.
Exit RunGyred(const std::string& dir, const std::string& socket_path, const std::string& log,
              Duration timeout) {
  std::vector<std::string> args = {GyredBinary(),
                                   "--rank=0",
                                   "--world_size=1",
                                   "--store=file://" + dir + "/store",
                                   "--job_id=socketpath",
                                   "--run=serve",
                                   "--rendezvous_timeout=10",
                                   "--socket=" + socket_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const TimePoint start = SteadyClock::Get()->Now();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err < 0 || ::dup2(err, STDERR_FILENO) < 0 || ::dup2(err, STDOUT_FILENO) < 0) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Exit exit;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (SteadyClock::Get()->Now() - start > timeout) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    ::usleep(5000);
  }
  exit.took = SteadyClock::Get()->Now() - start;
  return exit;
}

class GyredSocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(GyredBinary().c_str(), X_OK), 0) << GyredBinary() << ": build gyred";
    std::string base = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    std::string templ = base + "/gyred_socket_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }
  std::string dir_;
};

TEST_F(GyredSocketPathTest, RegularFileAtTheSocketPathIsKeptAndNamed) {
  const std::string path = dir_ + "/regular.sock";
  { std::ofstream(path) << "hello\n"; }
  Exit exit = RunGyred(dir_, path, dir_ + "/gyred.log", Seconds(20));
  EXPECT_EQ(exit.code, 1);
  EXPECT_LT(exit.took, Seconds(5));  // refused before the rendezvous, not after
  EXPECT_THAT(ReadAll(dir_ + "/gyred.log"),
              HasSubstr("cannot listen on " + path + ": a regular file is there, not a socket"));
  EXPECT_EQ(ReadAll(path), "hello\n");
}

TEST_F(GyredSocketPathTest, LiveSocketOfAnotherDaemonIsNotTakenOver) {
  const std::string path = dir_ + "/rank0.sock";
  auto first = ipc::ListenUnix(path);  // the daemon already serving there
  ASSERT_TRUE(first.ok()) << first.status();
  Exit exit = RunGyred(dir_, path, dir_ + "/gyred.log", Seconds(20));
  EXPECT_EQ(exit.code, 1);
  EXPECT_THAT(ReadAll(dir_ + "/gyred.log"), HasSubstr("another process is serving on " + path));
  // Its clients still reach the first listener.
  auto client = ipc::ConnectUnix(path, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  ASSERT_TRUE(client.ok()) << client.status();
  const int accepted = ::accept(*first, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  ::close(accepted);
  ::close(*client);
  ::close(*first);
}

}  // namespace
}  // namespace gyre
