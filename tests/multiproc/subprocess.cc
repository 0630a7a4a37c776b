#include "tests/multiproc/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace gyre::testing {

std::string BinDir() {
  const char* d = std::getenv("GYRE_BIN_DIR");
  return d ? d : "build/bin";
}

bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

std::string EmptyTempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
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

}  // namespace gyre::testing
