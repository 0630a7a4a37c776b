// Running one of gyre's own binaries (gyred, gyre-store, ...) from a test: where it is,
// starting it with its stdout and stderr in a file, and waiting for it with a bound.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"

namespace gyre::testing {

// build/bin/<name>: GYRE_BIN_DIR is set by CTest; run by hand, the binary sits in ../bin
// beside the test's own folder.
inline std::string BuiltBinary(const std::string& name) {
  if (const char* env = std::getenv("GYRE_BIN_DIR")) return std::string(env) + "/" + name;
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  const std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/../bin/" + name;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh folder under $TEST_TMPDIR (or /tmp) named after `prefix`; empty on failure.
inline std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "_XXXXXX";
  return ::mkdtemp(templ.data()) != nullptr ? templ : "";
}

// Removes `dir` and everything in it; true when that worked.
inline bool RemoveTree(const std::string& dir) {
  const std::string command = "rm -rf '" + dir + "'";
  return std::system(command.c_str()) == 0;
}

// Starts `binary` with `args`, its stdout and stderr both going to `log`; the child's pid.
inline pid_t StartLogged(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& log) {
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
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

// The exit code; 1000 + the signal when a signal ended it; -1 when it was still running
// after `timeout` (it is then killed and reaped).
inline int WaitExit(pid_t pid, Duration timeout) {
  const TimePoint until = SteadyClock::Get()->Now() + timeout;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
    }
    if (SteadyClock::Get()->Now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(5000);
  }
}

}  // namespace gyre::testing
