// Test support for the command-line tools: runs a tool as a real process and checks that
// a refusal is a plain non-zero exit (no signal, no hang) whose message names the cause.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {

inline std::string Bin(const std::string& name) { return BinDir() + "/" + name; }

inline CommandResult RunTool(const std::vector<std::string>& argv, double timeout = 30) {
  return RunCommand(argv, {}, timeout);
}

// Runs `argv` with its stdout on /dev/full, where every write fails with ENOSPC.
inline CommandResult RunToFullDisk(const std::vector<std::string>& argv, double timeout = 60) {
  std::vector<std::string> sh = {"/bin/sh", "-c", "exec \"$0\" \"$@\" >/dev/full"};
  sh.insert(sh.end(), argv.begin(), argv.end());
  return RunCommand(sh, {}, timeout);
}

// A refusal: a plain non-zero exit (not a signal, not a hang) whose stderr holds every
// one of `parts`.
inline void ExpectRefused(const std::vector<std::string>& argv,
                          const std::vector<std::string>& parts, double timeout = 30) {
  std::string cmd;
  for (const std::string& a : argv) cmd += a + " ";
  CommandResult r = RunTool(argv, timeout);
  EXPECT_FALSE(r.timed_out) << cmd;
  EXPECT_GT(r.exit_code, 0) << cmd << r.err;
  EXPECT_LT(r.exit_code, 128) << cmd << r.err;  // not killed by a signal
  for (const std::string& p : parts) {
    EXPECT_NE(r.err.find(p), std::string::npos) << cmd << "\nwant: " << p << "\ngot: " << r.err;
  }
}

}  // namespace gyre::testing
