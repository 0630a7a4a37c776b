// Test support: runs a command as a child process with captured stdout/stderr and a
// deadline; the child is killed (by its pid) if the deadline passes.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace gyre::testing {

struct CommandResult {
  int exit_code = -1;  // 128+signal when killed by a signal; -1 when timed out
  bool timed_out = false;
  std::string out, err;
  double seconds = 0;
};

// `on_err_line` (optional) sees each stderr line as it arrives and may return false to
// stop watching.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env,
                         double timeout_seconds,
                         const std::function<void(const std::string&)>& on_err_line = {});

std::string BinDir();  // $GYRE_BIN_DIR
bool ProcessExists(pid_t pid);
// An empty folder `name`-<pid> under gtest's temporary folder, emptied first: pids repeat
// (pid_max is 32768 on many machines), and a store an earlier run left there with the same
// pids would hold claims that look like this run's own.
std::string EmptyTempDir(const std::string& name);

}  // namespace gyre::testing
