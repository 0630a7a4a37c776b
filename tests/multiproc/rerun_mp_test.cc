// A job id used again against the same store, each rank a real process: ranks that finish
// cleanly remove their records, so the next run under that id starts; a run that did not
// finish cleanly is named as such by the next one, rather than taken for a live claimant.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

// The store's key files (a file store keeps one per key, named k.<...>).
std::vector<std::string> KeyFiles(const std::string& store) {
  std::vector<std::string> keys;
  if (DIR* d = ::opendir(store.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("k.", 0) == 0) keys.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<std::string> HandStarted(int rank, const std::string& store, double rendezvous) {
  return {"--rank=" + std::to_string(rank),
          "--world_size=2",
          "--store=file://" + store,
          "--job_id=demo",
          "--run=selftest",
          "--rendezvous_timeout=" + std::to_string(rendezvous)};
}

// README's hand-started pair, run three times against one folder; between the second and the
// third, rank 0 alone gives up waiting for rank 1.
TEST(RerunTest, AHandStartedPairRunsAgainAgainstTheSameFolder) {
  const std::string dir = EmptyTempDir("gyre-rerun-hand");
  const std::string store = dir + "/store";
  for (int run = 0; run < 3; ++run) {
    if (run == 2) {
      std::vector<std::string> alone = {BinDir() + "/gyred"};
      for (const auto& a : HandStarted(0, store, 1)) alone.push_back(a);
      CommandResult r = RunCommand(alone, {}, 30);
      ASSERT_NE(r.exit_code, 0) << r.err;
      ASSERT_NE(r.err.find("missing: rank 1"), std::string::npos) << r.err;
    }
    const std::string log = dir + "/rank0-run" + std::to_string(run) + ".log";
    const pid_t rank0 = StartLogged(BinDir() + "/gyred", HandStarted(0, store, 20), log);
    std::vector<std::string> rank1 = {BinDir() + "/gyred"};
    for (const auto& a : HandStarted(1, store, 20)) rank1.push_back(a);
    CommandResult r = RunCommand(rank1, {}, 60);
    const int rank0_exit = WaitExit(rank0, Seconds(30));
    ASSERT_EQ(r.exit_code, 0) << "run " << run << ", rank 1: " << r.err;
    ASSERT_EQ(rank0_exit, 0) << "run " << run << ", rank 0: " << ReadAll(log);
    EXPECT_NE(ReadAll(log).find("selftest: all checks passed"), std::string::npos);
    EXPECT_EQ(KeyFiles(store), std::vector<std::string>()) << "run " << run;
  }
}

// Through gyrerun with a store folder of the user's own (gyrerun clears only its own): programs
// that Close their communicator, embedded or through their daemons, free the job id; ones that
// exit without Close leave their records, and the next run names the process that left them.
TEST(RerunTest, ProgramsThatCloseFreeTheJobIdAndOthersAreNamed) {
  const std::string dir = EmptyTempDir("gyre-rerun-run");
  auto run = [&](const std::string& mode, const std::string& store, bool close) {
    std::vector<std::string> argv = {BinDir() + "/gyrerun",
                                     "-n",
                                     "2",
                                     "--mode",
                                     mode,
                                     "--store",
                                     "file://" + store,
                                     "--job_id",
                                     "fixed",
                                     "--rendezvous_timeout",
                                     "20",
                                     "--",
                                     BinDir() + "/gyre-test-client",
                                     "--check=false",
                                     "--loop_iters=3"};
    if (close) argv.push_back("--close");
    return RunCommand(argv, {}, 120);
  };
  for (const std::string mode : {"embedded", "daemon"}) {
    const std::string store = dir + "/" + mode;
    for (int i = 0; i < 2; ++i) {
      CommandResult r = run(mode, store, true);
      ASSERT_EQ(r.exit_code, 0) << mode << " run " << i << ": " << r.err;
      EXPECT_EQ(KeyFiles(store), std::vector<std::string>()) << mode << " run " << i;
    }
    CommandResult unclosed = run(mode, store, false);
    ASSERT_EQ(unclosed.exit_code, 0) << mode << ": " << unclosed.err;
    EXPECT_NE(KeyFiles(store), std::vector<std::string>()) << mode;
    CommandResult next = run(mode, store, true);
    EXPECT_NE(next.exit_code, 0) << mode;
    EXPECT_NE(next.err.find("a process on this machine that is no longer running: an earlier run "
                            "of this job id left it"),
              std::string::npos)
        << mode << ": " << next.err;
  }
}

}  // namespace
}  // namespace gyre::testing
