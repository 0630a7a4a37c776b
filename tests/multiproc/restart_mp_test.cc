// gyrerun --max_restarts and --output_dir, with real ranks: a job whose rank fails is stopped and
// every rank started again on a store emptied of the failed attempt's claims, up to the limit; the
// program learns which attempt it is; what cannot be helped by a restart (a program that
// cannot start, the job's time running out) is not restarted, and says why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

std::string Gyrerun() { return BinDir() + "/gyrerun"; }
std::string Client() { return BinDir() + "/gyre-test-client"; }

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct RestartCase {
  std::string mode;
  std::string store;
};

class RestartTest : public ::testing::TestWithParam<RestartCase> {};

// Attempt 0: rank 1 SIGKILLs itself in a loop of allreduces. Attempt 1: the same job id meets
// again (the claims of attempt 0 would name rank 1 as held by an exited process) and passes.
TEST_P(RestartTest, AFailedAttemptRunsAgainOnAFreshStoreAndPasses) {
  const RestartCase& c = GetParam();
  const std::string dir = EmptyTempDir("gyre-restart-" + c.mode + "-" + c.store);
  const std::string script =
      "echo \"attempt $GYRE_RESTART_COUNT of max $GYRE_MAX_RESTARTS\"; "
      "if [ \"$GYRE_RESTART_COUNT\" = 0 ]; then "
      "exec \"$0\" --check=false --loop_iters 200 --die_rank 1 --die_after 5; "
      "else exec \"$0\" --check=false --loop_iters 20 --close; fi";
  CommandResult r = RunCommand(
      {Gyrerun(),   "-n", "2",        "--mode",    c.mode,      "--store", c.store,
       "--run_dir", dir,  "--job_id", "restarted", "--timeout", "20",      "--max_restarts",
       "2",         "--", "/bin/sh",  "-c",        script,      Client()},
      {}, 120);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string at = "[rank " + std::to_string(rank) + "] ";
    EXPECT_EQ(Count(r.out, at + "attempt 0 of max 2"), 1) << r.out;
    EXPECT_EQ(Count(r.out, at + "attempt 1 of max 2"), 1) << r.out;
    EXPECT_EQ(Count(r.out, at + "rank " + std::to_string(rank) + ": closed"), 1) << r.out;
  }
  EXPECT_EQ(r.out.find("attempt 2 of max 2"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("gyrerun: attempt 1 of 3 failed (exit status 137); restarting every rank "
                       "(restart 1 of 2)"),
            std::string::npos)
      << r.err;
  // Once for each attempt: the TCP store is served anew, so its address is printed again.
  EXPECT_EQ(Count(r.err, "gyrerun: job restarted, 2 ranks"), 2) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Multiproc, RestartTest,
                         ::testing::Values(RestartCase{"embedded", "file"},
                                           RestartCase{"embedded", "tcp"},
                                           RestartCase{"daemon", "file"},
                                           RestartCase{"daemon", "tcp"}),
                         [](const ::testing::TestParamInfo<RestartCase>& info) {
                           return info.param.mode + "_" + info.param.store;
                         });

TEST(RestartLimitTest, TheLastFailureIsTheJobsOnceNoRestartIsLeft) {
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--max_restarts", "2",
                                "--", "/bin/sh", "-c", "echo \"try $GYRE_RESTART_COUNT\"; exit 3"},
                               {}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_EQ(Count(r.out, "[rank 0] try " + std::to_string(attempt)), 1) << r.out;
  }
  EXPECT_EQ(r.out.find("try 3"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("restart 2 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gyrerun: attempt 3 of 3 failed (exit status 3); no restart left "
                       "(--max_restarts 2)"),
            std::string::npos)
      << r.err;
}

TEST(RestartLimitTest, WhatARestartCannotMendIsNotRestarted) {
  // The job's whole time is spent: a next attempt would be stopped at once.
  CommandResult late =
      RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--job_timeout", "1",
                  "--max_restarts", "3", "--", "/bin/sh", "-c", "echo started; sleep 30"},
                 {}, 60);
  EXPECT_EQ(late.exit_code, 124) << late.err;
  EXPECT_EQ(Count(late.out, "started"), 1) << late.out;
  EXPECT_EQ(late.err.find("restarting every rank"), std::string::npos) << late.err;
  EXPECT_NE(late.err.find("not restarting: the job's time ran out (--job_timeout)"),
            std::string::npos)
      << late.err;
  // A program that cannot be executed would fail alike every time.
  CommandResult missing = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--max_restarts",
                                      "3", "--", "/nonexistent/gyre-program"},
                                     {}, 60);
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
  EXPECT_EQ(missing.err.find("restarting every rank"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("not restarting: rank 0 could not be started (cannot execute "
                             "/nonexistent/gyre-program"),
            std::string::npos)
      << missing.err;
}

// A hang stopped by the watchdog is a failure a restart is for.
TEST(RestartLimitTest, AHangTheWatchdogStoppedIsRestarted) {
  const std::string script =
      "if [ \"$GYRE_RESTART_COUNT\" = 0 ]; then "
      "exec \"$0\" --check=false --loop_iters 50 --skip_rank 1 --fault_at 3 --skip_seconds 60; "
      "else exec \"$0\" --check=false --loop_iters 5; fi";
  CommandResult r =
      RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--timeout", "60", "--hang_timeout",
                  "2", "--max_restarts", "1", "--", "/bin/sh", "-c", script, Client()},
                 {}, 120);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("--hang_timeout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gyrerun: attempt 1 of 2 failed (exit status 124); restarting every rank "
                       "(restart 1 of 1)"),
            std::string::npos)
      << r.err;
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// --output_dir: every process's own lines in its own files, a folder per attempt when the job
// may restart; a program's daemon has files of its own.
TEST(OutputDirTest, EachProcesssLinesGoToItsOwnFilesAndEachAttemptToItsOwnFolder) {
  const std::string dir = EmptyTempDir("gyre-output-dir");
  CommandResult r = RunCommand(
      {Gyrerun(), "-n", "2", "--mode", "embedded", "--max_restarts", "1", "--output_dir",
       dir + "/logs", "--", "/bin/sh", "-c",
       "echo \"out $GYRE_RANK attempt $GYRE_RESTART_COUNT\"; echo \"err $GYRE_RANK\" >&2; "
       "[ \"$GYRE_RESTART_COUNT\" = 1 ]"},
      {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string base =
          dir + "/logs/attempt" + std::to_string(attempt) + "/rank" + std::to_string(rank);
      EXPECT_EQ(FileText(base + ".stdout"),
                "out " + std::to_string(rank) + " attempt " + std::to_string(attempt) + "\n");
      EXPECT_EQ(FileText(base + ".stderr"), "err " + std::to_string(rank) + "\n");
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/logs/attempt2"));

  // Without restarts the files sit in the folder itself; through the daemon, gyred's beside.
  CommandResult d = RunCommand({Gyrerun(), "-n", "2", "--output_dir", dir + "/flat", "--", Client(),
                                "--check=false", "--loop_iters", "3"},
                               {}, 60);
  EXPECT_EQ(d.exit_code, 0) << d.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string base = dir + "/flat/rank" + std::to_string(rank);
    EXPECT_NE(FileText(base + ".stdout").find("client rank " + std::to_string(rank) + " of 2"),
              std::string::npos);
    EXPECT_NE(FileText(base + "-gyred.stderr").find("serving clients on"), std::string::npos);
    EXPECT_EQ(FileText(base + ".stdout").find("[rank"), std::string::npos);
  }

  // A folder that cannot be made stops the job before any rank starts.
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "x";
  CommandResult bad = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--output_dir",
                                  file + "/logs", "--", "/bin/sh", "-c", "echo ran"},
                                 {}, 60);
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("gyrerun: cannot make the output folder " + file + "/logs (--output_dir)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.out.find("ran"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace gyre::testing
