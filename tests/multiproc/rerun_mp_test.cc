// A job id used again against the same store, each rank a real process: ranks that finish
// cleanly remove their records, so the next run under that id starts; a run that did not
// finish cleanly is named as such by the next one, rather than taken for a live claimant.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/store/rendezvous.h"
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

// The ranks of a `world_size` job `job_id` whose rendezvous slot the file store at `store`
// holds. (Read slot by slot: ReadRendezvous shows none without the world size record, which
// whichever rank came first wrote.)
std::vector<int> HeldSlots(const std::string& store, const std::string& job_id, int world_size) {
  auto opened =
      store::OpenStore("file://" + store, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  if (!opened.ok()) {
    ADD_FAILURE() << opened.status();
    return {};
  }
  std::vector<int> held;
  for (int rank = 0; rank < world_size; ++rank) {
    auto slot = (*opened)->TryGet("gyre/rdzv/" + job_id + "/rank/" + std::to_string(rank),
                                  Deadline::After(*SteadyClock::Get(), Seconds(5)));
    if (!slot.ok()) ADD_FAILURE() << slot.status();
    if (slot.ok() && slot->has_value()) held.push_back(rank);
  }
  return held;
}

// Two gyreds of a three-rank job wait at the rendezvous for the third, which never comes; both
// are stopped there by SIGTERM. They give their slots back and exit at once, saying so, and the
// same job id then runs to the end against the same folder. (Stopped by the signal's default
// action, they kept their slots, and the rerun was refused as an earlier unfinished run.)
TEST(RerunTest, AGyredStoppedAtTheRendezvousGivesItsSlotBack) {
  const std::string dir = EmptyTempDir("gyre-rerun-stopped");
  const std::string store = dir + "/store";
  auto args = [&](int rank) {
    std::vector<std::string> a = HandStarted(rank, store, 30);
    a[1] = "--world_size=3";
    return a;
  };
  std::vector<pid_t> waiting;
  for (int rank = 0; rank < 2; ++rank) {
    waiting.push_back(StartLogged(BinDir() + "/gyred", args(rank),
                                  dir + "/stopped" + std::to_string(rank) + ".log"));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (HeldSlots(store, "demo", 3) != std::vector<int>{0, 1} &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(HeldSlots(store, "demo", 3), (std::vector<int>{0, 1}));
  for (int rank : {1, 0}) {
    const std::string log = dir + "/stopped" + std::to_string(rank) + ".log";
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_EQ(::kill(waiting[rank], SIGTERM), 0);
    EXPECT_EQ(WaitExit(waiting[rank], Seconds(10)), 128 + SIGTERM) << ReadAll(log);
    EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(3));
    EXPECT_NE(ReadAll(log).find("gyred: stopped by SIGTERM before it joined job demo"),
              std::string::npos)
        << ReadAll(log);
    EXPECT_NE(ReadAll(log).find("it gave its slot back"), std::string::npos) << ReadAll(log);
    // Only its own slot: the other rank still holds its own until it is stopped too.
    const std::vector<int> left = rank == 1 ? std::vector<int>{0} : std::vector<int>{};
    EXPECT_EQ(HeldSlots(store, "demo", 3), left) << "after rank " << rank << " was stopped";
  }
  // Nothing of theirs is left: slots, world size, control addresses.
  EXPECT_EQ(KeyFiles(store), std::vector<std::string>());

  std::vector<pid_t> rerun;
  for (int rank = 0; rank < 3; ++rank) {
    rerun.push_back(StartLogged(BinDir() + "/gyred", args(rank),
                                dir + "/rerun" + std::to_string(rank) + ".log"));
  }
  for (int rank = 0; rank < 3; ++rank) {
    const std::string log = dir + "/rerun" + std::to_string(rank) + ".log";
    EXPECT_EQ(WaitExit(rerun[rank], Seconds(60)), 0) << "rank " << rank << ": " << ReadAll(log);
  }
  EXPECT_NE(ReadAll(dir + "/rerun0.log").find("selftest: all checks passed"), std::string::npos);
  EXPECT_EQ(KeyFiles(store), std::vector<std::string>());
}

}  // namespace
}  // namespace gyre::testing
