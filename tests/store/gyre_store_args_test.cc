// gyre-store takes only flags: a stray positional argument (`gyre-store 29500`, meant as
// --port 29500) is refused with exit 2 and named, instead of being dropped while the server
// listens on a port nobody asked for. Runs the real build/bin/gyre-store.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gyre {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// build/bin/gyre-store: GYRE_BIN_DIR is set by CTest; run by hand, the binary sits in ../bin.
std::string GyreStoreBinary() {
  if (const char* env = std::getenv("GYRE_BIN_DIR")) return std::string(env) + "/gyre-store";
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/../bin/gyre-store";
}

struct Outcome {
  int code;  // exit code; -1 when it was still running after 10 s (and was killed)
  std::string output;
};

// Runs gyre-store with `args`, stdout and stderr into one temporary file.
Outcome RunGyreStore(const std::vector<std::string>& args) {
  char log[] = "/tmp/gyre_store_args_XXXXXX";
  const int log_fd = ::mkstemp(log);
  if (log_fd < 0) return {-2, std::string("mkstemp: ") + std::strerror(errno)};
  std::vector<std::string> all = {GyreStoreBinary()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(log_fd, STDOUT_FILENO) < 0 || ::dup2(log_fd, STDERR_FILENO) < 0) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  Outcome out{-1, ""};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (true) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  out.output = text.str();
  ::unlink(log);
  return out;
}

TEST(GyreStoreArgsTest, StrayNumberIsRefusedWithAHintAtPort) {
  ASSERT_EQ(::access(GyreStoreBinary().c_str(), X_OK), 0) << GyreStoreBinary();
  const Outcome out = RunGyreStore({"29500"});
  EXPECT_EQ(out.code, 2) << out.output;
  EXPECT_THAT(out.output, HasSubstr("gyre-store: unexpected argument '29500'"));
  EXPECT_THAT(out.output, HasSubstr("--port 29500"));
  EXPECT_THAT(out.output, Not(HasSubstr("listening on")));
}

TEST(GyreStoreArgsTest, StrayWordAfterFlagsIsRefused) {
  ASSERT_EQ(::access(GyreStoreBinary().c_str(), X_OK), 0) << GyreStoreBinary();
  const Outcome out = RunGyreStore({"--port=0", "extra"});
  EXPECT_EQ(out.code, 2) << out.output;
  EXPECT_THAT(out.output, HasSubstr("gyre-store: unexpected argument 'extra'"));
  EXPECT_THAT(out.output, Not(HasSubstr("listening on")));
}

}  // namespace
}  // namespace gyre
