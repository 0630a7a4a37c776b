// Test support for every test folder: running gyre's own binaries (gyred, gyre-store,
// gyrerun, ...) as real processes, in the foreground with captured output and a deadline, or
// in the background with their output in a file; the child is killed (by its pid) if the
// deadline passes.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/base/clock.h"

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

// build/bin: $GYRE_BIN_DIR as CTest sets it; run by hand, ../bin beside the test's own folder.
std::string BinDir();
// BinDir()/name.
std::string BuiltBinary(const std::string& name);
bool ProcessExists(pid_t pid);
// An empty folder `name`-<pid> under gtest's temporary folder, emptied first: pids repeat
// (pid_max is 32768 on many machines), and a store an earlier run left there with the same
// pids would hold claims that look like this run's own.
std::string EmptyTempDir(const std::string& name);
// A fresh, uniquely named folder under $TEST_TMPDIR (or /tmp) named after `prefix`; empty on
// failure.
std::string MakeTempDir(const std::string& prefix);
// Removes `dir` and everything in it; true when that worked.
bool RemoveTree(const std::string& dir);
// The whole of the file at `path` ("" if it cannot be read).
std::string ReadAll(const std::string& path);

// A TCP port on 127.0.0.1 the kernel just handed out (ListenOnLoopback, then closed), for a
// program that must be told its port; -1 if none could be had.
int FreeLoopbackPort();

// Starts `binary` with `args` in the background, its stdout and stderr both going to `log`;
// the child's pid. `in_child`, if set, runs in the child before it executes `binary` (a
// process group of its own, a signal's action, an environment variable).
pid_t StartLogged(const std::string& binary, const std::vector<std::string>& args,
                  const std::string& log, const std::function<void()>& in_child = {});
// Waits for a child StartLogged started: its exit code, 128 + the signal when a signal ended
// it (as RunCommand), -1 when it was still running after `timeout` (it is then killed and
// reaped).
int WaitExit(pid_t pid, Duration timeout);

}  // namespace gyre::testing
