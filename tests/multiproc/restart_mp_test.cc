// gyrerun --max_restarts and --output_dir, with real ranks: a job whose rank fails is stopped and
// every rank started again on a store emptied of the failed attempt's claims, up to the limit; the
// program learns which attempt it is; what cannot be helped by a restart (a program that
// cannot start, the job's time running out) is not restarted, and says why.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
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
  EXPECT_NE(r.err.find("gyrerun: attempt 1 of 3 (GYRE_RESTART_COUNT=0) failed (exit status 137); "
                       "restarting every rank "
                       "(restart 1 of 2)"),
            std::string::npos)
      << r.err;
  // One header per attempt; a TCP store is served anew, at another port.
  EXPECT_EQ(Count(r.err, "gyrerun: job restarted, 2 ranks"), 2) << r.err;
  if (c.store == "tcp") {
    std::vector<std::string> stores;  // from gyrerun's header lines
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) {
      const size_t at = line.find(", store tcp://");
      if (line.rfind("gyrerun: job ", 0) == 0 && at != std::string::npos) {
        stores.push_back(line.substr(at, line.find(',', at + 2) - at));
      }
    }
    ASSERT_EQ(stores.size(), 2u) << r.err;
    EXPECT_NE(stores[0], stores[1]);
  }
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
  EXPECT_NE(
      r.err.find(
          "gyrerun: attempt 3 of 3 (GYRE_RESTART_COUNT=2) failed (exit status 3); no restart left "
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
  // The same under --pin, where taskset runs it and exits 127.
  CommandResult pinned = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--pin",
                                     "--max_restarts", "3", "--", "/nonexistent/gyre-program"},
                                    {}, 60);
  EXPECT_EQ(pinned.exit_code, 127) << pinned.err;
  EXPECT_NE(pinned.err.find("not restarting: rank 0 exited with 127, a command that could not "
                            "be run"),
            std::string::npos)
      << pinned.err;
  // A "daemon" that exits before it ever serves would do so again.
  CommandResult unserved =
      RunCommand({Gyrerun(), "-n", "1", "--gyred", "/bin/true", "--max_restarts", "3", "--",
                  Client(), "--check=false", "--loop_iters", "2"},
                 {}, 60);
  EXPECT_EQ(unserved.exit_code, 1) << unserved.err;
  EXPECT_NE(unserved.err.find("not restarting: rank 0 gyred exited before it ever served"),
            std::string::npos)
      << unserved.err;
}

// A hang stopped by the watchdog is a failure a restart is for; the flight records the
// watchdog saved stay, in attempt0/ of the run folder, not read as the next attempt's.
TEST(RestartLimitTest, AHangTheWatchdogStoppedIsRestarted) {
  const std::string dir = EmptyTempDir("gyre-restart-hang");
  const std::string script =
      "if [ \"$GYRE_RESTART_COUNT\" = 0 ]; then "
      "exec \"$0\" --check=false --loop_iters 50 --skip_rank 1 --fault_at 3 --skip_seconds 60; "
      "else exec \"$0\" --check=false --loop_iters 5; fi";
  CommandResult r = RunCommand(
      {Gyrerun(), "-n", "2", "--mode", "embedded", "--timeout", "60", "--hang_timeout", "2",
       "--max_restarts", "1", "--run_dir", dir, "--", "/bin/sh", "-c", script, Client()},
      {}, 120);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("--hang_timeout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gyrerun: attempt 1 of 2 (GYRE_RESTART_COUNT=0) failed (exit status 124); "
                       "restarting every rank "
                       "(restart 1 of 1)"),
            std::string::npos)
      << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string name = "flight-rank" + std::to_string(rank) + ".json";
    EXPECT_TRUE(std::filesystem::exists(dir + "/attempt0/" + name)) << name;
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + name)) << name;
  }
}

// A signal to gyrerun ends the restarts in order, wherever it lands: in the wait for the
// others' verdicts after a rank failed (the attempt then ends by the signal), or between two
// attempts (no Supervisor holds the signals there). Either way gyrerun exits 128 + the signal
// and removes its run folder.
TEST(RestartLimitTest, ASignalToGyrerunEndsTheRestartsInOrder) {
  const std::string dir = EmptyTempDir("gyre-restart-signal");
  {
    const std::string log = dir + "/settle.log";
    const pid_t pid = StartLogged(Gyrerun(),
                                  {"-n", "2", "--mode", "embedded", "--settle_time", "5",
                                   "--max_restarts", "3", "--", "/bin/sh", "-c",
                                   "echo started; if [ $GYRE_RANK = 1 ]; then echo failing >&2; "
                                   "exit 3; fi; sleep 30"},
                                  log);
    ASSERT_GT(pid, 0);
    for (int i = 0; i < 300 && ReadAll(log).find("[rank 1] failing") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // inside the 5 s settle time
    ::kill(pid, SIGINT);
    EXPECT_EQ(WaitExit(pid, Seconds(60)), 130);
    const std::string text = ReadAll(log);
    EXPECT_EQ(Count(text, "[rank 0] started"), 1) << text;
    EXPECT_NE(text.find("; not restarting: gyrerun received SIGINT"), std::string::npos) << text;
  }
  // A program that fails at once, restarted hundreds of times a second: most signals land
  // between two attempts or as one ends.
  const std::string tmp = dir + "/tmp";
  for (int run = 0; run < 3; ++run) {
    std::filesystem::create_directories(tmp);
    const std::string log = dir + "/loop" + std::to_string(run) + ".log";
    const pid_t pid = StartLogged("/usr/bin/env",
                                  {"TMPDIR=" + tmp, Gyrerun(), "-n", "2", "--mode", "embedded",
                                   "--max_restarts", "1000000", "--", "/bin/sh", "-c", "exit 3"},
                                  log);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600 + 150 * run));
    ::kill(pid, SIGTERM);
    EXPECT_EQ(WaitExit(pid, Seconds(60)), 143) << ReadAll(log).substr(0, 2000);
    const std::string text = ReadAll(log);
    EXPECT_TRUE(text.find("not restarting: gyrerun received SIGTERM") != std::string::npos ||
                text.find("gyrerun: received SIGTERM between two attempts") != std::string::npos)
        << text.substr(text.size() > 3000 ? text.size() - 3000 : 0);
    EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "run " << run << ": the run folder was left";
  }
}

// Programs that all succeeded are not run again for a daemon that failed after them.
TEST(RestartLimitTest, ADaemonFailingAfterItsProgramsSucceededIsNotARestart) {
  const std::string dir = EmptyTempDir("gyre-restart-daemon-after");
  const std::string wrapper = dir + "/gyred-then-7";
  {
    std::ofstream f(wrapper);
    f << "#!/bin/sh\n\"" << BinDir() << "/gyred\" \"$@\"\nexit 7\n";
  }
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--gyred", wrapper, "--max_restarts", "2",
                                "--", Client(), "--check=false", "--loop_iters", "3", "--close"},
                               {}, 60);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(Count(r.out, ": closed"), 2) << r.out;
  EXPECT_NE(r.err.find("not restarting: every program exited 0 (only a daemon failed after "
                       "them)"),
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

// A reused --output_dir kept an earlier run's attemptK/ folders beside this run's files, and
// the highest-numbered one (where one looks for the last failure) was another job's. What
// gyrerun wrote there before is removed before any rank starts, and said; what it did not
// write stays. A failed attempt names its folder: "attempt 1 of 3" is attempt0/.
TEST(OutputDirTest, AReusedFolderLosesTheEarlierRunsOutputAndKeepsEverythingElse) {
  const std::string dir = EmptyTempDir("gyre-output-reused") + "/logs";
  CommandResult first =
      RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--max_restarts", "2", "--output_dir",
                  dir, "--", "/bin/sh", "-c", "echo first $GYRE_RESTART_COUNT; exit 1"},
                 {}, 60);
  EXPECT_EQ(first.exit_code, 1) << first.err;
  EXPECT_NE(first.err.find(
                "attempt 1 of 3 (GYRE_RESTART_COUNT=0) failed (exit status 1; its output is in " +
                dir + "/attempt0); restarting"),
            std::string::npos)
      << first.err;
  EXPECT_NE(first.err.find(
                "attempt 3 of 3 (GYRE_RESTART_COUNT=2) failed (exit status 1; its output is in " +
                dir + "/attempt2); no restart left"),
            std::string::npos)
      << first.err;
  ASSERT_EQ(FileText(dir + "/attempt2/rank0.stdout"), "first 2\n");
  // Things of the user's: a file, and an attempt-like folder that holds one.
  std::ofstream(dir + "/notes.txt") << "mine";
  std::filesystem::create_directories(dir + "/attempt7");
  std::ofstream(dir + "/attempt7/plot.png") << "mine";

  CommandResult second = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--output_dir",
                                     dir, "--", "/bin/sh", "-c", "echo second $GYRE_RANK"},
                                    {}, 60);
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("gyrerun: the output folder " + dir +
                            " (--output_dir) held an earlier run's output (attempt0/, "
                            "attempt1/, attempt2/); removed"),
            std::string::npos)
      << second.err;
  for (int k = 0; k < 3; ++k) {
    EXPECT_FALSE(std::filesystem::exists(dir + "/attempt" + std::to_string(k))) << k;
  }
  EXPECT_EQ(FileText(dir + "/rank1.stdout"), "second 1\n");
  EXPECT_EQ(FileText(dir + "/notes.txt"), "mine");
  EXPECT_EQ(FileText(dir + "/attempt7/plot.png"), "mine");

  // A smaller job after it: rank 1's files are not this run's, and go with rank 0's.
  CommandResult third = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--output_dir", dir,
                                    "--", "/bin/sh", "-c", "echo third"},
                                   {}, 60);
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_NE(third.err.find("held an earlier run's output (rank0.stderr, rank0.stdout, "
                           "rank1.stderr, rank1.stdout); removed"),
            std::string::npos)
      << third.err;
  EXPECT_EQ(FileText(dir + "/rank0.stdout"), "third\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank1.stdout"));
}

}  // namespace
}  // namespace gyre::testing
