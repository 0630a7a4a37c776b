#include "tests/support/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/loopback_listener.h"

namespace gyre::testing {

std::string BinDir() {
  if (const char* env = std::getenv("GYRE_BIN_DIR")) return env;
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "build/bin";
  const std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/../bin";
}

std::string BuiltBinary(const std::string& name) { return BinDir() + "/" + name; }

bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

std::string EmptyTempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "_XXXXXX";
  return ::mkdtemp(templ.data()) != nullptr ? templ : "";
}

bool RemoveTree(const std::string& dir) {
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  return !error;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

pid_t StartLogged(const std::string& binary, const std::vector<std::string>& args,
                  const std::string& log, const std::function<void()>& in_child) {
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (in_child) in_child();
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || ::dup2(out, STDERR_FILENO) < 0 || ::dup2(out, STDOUT_FILENO) < 0) ::_exit(125);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid, Duration timeout) {
  const TimePoint until = SteadyClock::Get()->Now() + timeout;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (SteadyClock::Get()->Now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(5000);
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         double timeout_seconds,
                         const std::function<void(const std::string&)>& on_err_line) {
  CommandResult res;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return res;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  std::string err_line;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > timeout_seconds && !res.timed_out) {
      res.timed_out = true;
      ::kill(pid, SIGKILL);
    }
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    ::poll(fds, 2, 100);
    char buf[65536];
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP))) {
      ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
      if (n <= 0)
        out_open = false;
      else
        res.out.append(buf, static_cast<size_t>(n));
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP))) {
      ssize_t n = ::read(err_pipe[0], buf, sizeof(buf));
      if (n <= 0) {
        err_open = false;
      } else {
        res.err.append(buf, static_cast<size_t>(n));
        if (on_err_line) {
          for (ssize_t i = 0; i < n; ++i) {
            if (buf[i] == '\n') {
              on_err_line(err_line);
              err_line.clear();
            } else {
              err_line.push_back(buf[i]);
            }
          }
        }
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (res.timed_out) {
    res.exit_code = -1;
  } else if (WIFEXITED(status)) {
    res.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.exit_code = 128 + WTERMSIG(status);
  }
  return res;
}

int FreeLoopbackPort() {
  int port = -1;
  const int fd = ListenOnLoopback(&port, 1);
  if (fd < 0) return -1;
  ::close(fd);
  return port;
}

}  // namespace gyre::testing
