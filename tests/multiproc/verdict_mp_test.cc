// The verdict with real processes: a rank SIGKILLed, SIGSTOPped, skipping a call, or making a
// different call, in the middle of a loop of allreduces run by client programs through their
// daemons (and embedded). Every survivor's program gets the same root cause, naming the
// faulty rank, within the promised time.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <mutex>
#include <regex>
#include <thread>

#include "tests/multiproc/subprocess.h"

namespace gyre::testing {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

struct FailureLine {
  int rank;
  std::string text;
  SteadyTime when;
};

struct LoopRun {
  CommandResult result;
  std::vector<FailureLine> failures;  // the clients' "rank R: allreduce N failed: ..." lines
  SteadyTime fault_time;
};

// Runs a 60 s allreduce loop on p ranks; once every daemon has joined, `fault(pids)` is
// called on another thread (after a short warm-up) with the gyred pids by rank.
LoopRun RunLoop(int p, double timeout_s, const std::vector<std::string>& client_flags,
                const std::function<void(const std::vector<pid_t>&)>& fault,
                const std::string& mode = "daemon") {
  LoopRun run;
  std::mutex mu;
  std::vector<pid_t> pids(p, 0);
  int joined = 0;
  std::thread faulter;
  const std::regex daemon_re(R"(\[rank (\d+) gyred\].*joined as pid (\d+))");
  const std::regex fail_re(R"(^\[rank (\d+)\] rank \d+: allreduce \d+ failed: (.*)$)");
  std::vector<std::string> argv = {BinDir() + "/gyrerun",
                                   "-n",
                                   std::to_string(p),
                                   "--mode",
                                   mode,
                                   "--timeout",
                                   std::to_string(timeout_s),
                                   "--",
                                   BinDir() + "/gyre-test-client",
                                   "--check=false",
                                   "--loop_seconds=60"};
  for (const auto& f : client_flags) argv.push_back(f);
  run.result = RunCommand(argv, {}, 90, [&](const std::string& line) {
    std::smatch m;
    std::lock_guard<std::mutex> lock(mu);
    if (std::regex_search(line, m, daemon_re)) {
      pids[std::stoi(m[1])] = static_cast<pid_t>(std::stoi(m[2]));
      if (++joined == p && fault) {
        faulter = std::thread([&, pids_copy = pids] {
          std::this_thread::sleep_for(std::chrono::milliseconds(800));
          {
            std::lock_guard<std::mutex> l(mu);
            run.fault_time = std::chrono::steady_clock::now();
          }
          fault(pids_copy);
        });
      }
    } else if (std::regex_search(line, m, fail_re)) {
      run.failures.push_back({std::stoi(m[1]), m[2], std::chrono::steady_clock::now()});
    }
  });
  if (faulter.joinable()) faulter.join();
  return run;
}

double SecondsAfter(SteadyTime t0, SteadyTime t) {
  return std::chrono::duration<double>(t - t0).count();
}

std::string Dump(const LoopRun& r) {
  std::string s;
  for (const auto& f : r.failures) s += "rank " + std::to_string(f.rank) + ": " + f.text + "\n";
  return s + r.result.err.substr(r.result.err.size() > 4000 ? r.result.err.size() - 4000 : 0);
}

class KilledRankTest : public ::testing::TestWithParam<int> {};

TEST_P(KilledRankTest, EverySurvivorNamesTheDeadRankWellBeforeTheTimeout) {
  const int p = GetParam();
  const int victim = p - 1;
  const double T = 20;
  LoopRun r =
      RunLoop(p, T, {}, [&](const std::vector<pid_t>& pids) { ::kill(pids[victim], SIGKILL); });
  EXPECT_EQ(r.result.exit_code, 128 + SIGKILL) << Dump(r);
  int named = 0;
  for (const auto& f : r.failures) {
    if (f.rank == victim) continue;  // its own program lost its daemon
    EXPECT_NE(f.text.find("rank " + std::to_string(victim) + " dead"), std::string::npos)
        << "rank " << f.rank << ": " << f.text;
    EXPECT_LT(SecondsAfter(r.fault_time, f.when), T / 4) << f.text;
    ++named;
  }
  EXPECT_EQ(named, p - 1) << Dump(r);
}

INSTANTIATE_TEST_SUITE_P(Verdict, KilledRankTest, ::testing::Values(2, 4, 8));

TEST(StoppedRankTest, AllSevenSurvivorsNameTheStoppedRankBetweenTAndTPlusSlack) {
  const int p = 8;
  const int victim = 5;
  const double T = 3;
  const double slack = std::max(1.0, T / 4);
  LoopRun r =
      RunLoop(p, T, {}, [&](const std::vector<pid_t>& pids) { ::kill(pids[victim], SIGSTOP); });
  int named = 0;
  for (const auto& f : r.failures) {
    EXPECT_NE(f.text.find("rank " + std::to_string(victim) + " stalled"), std::string::npos)
        << "rank " << f.rank << ": " << f.text;
    const double after = SecondsAfter(r.fault_time, f.when);
    EXPECT_GE(after, T - 0.05) << f.text;
    // Lines travel through the client and gyrerun's relay: allow 1 s for that on a loaded
    // machine.
    EXPECT_LE(after, T + slack + 1.0) << f.text;
    ++named;
  }
  EXPECT_EQ(named, p - 1) << Dump(r);
}

TEST(SkippedCallTest, TheRankThatNeverCallsIsNamedNotEntered) {
  const int p = 4;
  const double T = 2;
  LoopRun r = RunLoop(p, T, {"--skip_rank=2", "--fault_at=50"}, nullptr);
  int named = 0;
  for (const auto& f : r.failures) {
    if (f.rank == 2) continue;
    EXPECT_NE(f.text.find("rank 2 not entered"), std::string::npos) << f.text;
    ++named;
  }
  EXPECT_EQ(named, p - 1) << Dump(r);
}

class MismatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MismatchTest, BothRanksAndBothCallsAreNamedOnEveryRank) {
  const int p = 4;
  const double T = 3;
  const std::string kind = GetParam();
  LoopRun r =
      RunLoop(p, T, {"--mismatch_rank=1", "--fault_at=30", "--mismatch_kind=" + kind}, nullptr);
  EXPECT_NE(r.result.exit_code, 0);
  int named = 0;
  for (const auto& f : r.failures) {
    EXPECT_TRUE(f.text.find("rank 1 diverged") != std::string::npos ||
                f.text.find("rank 1 (this rank) diverged") != std::string::npos)
        << "rank " << f.rank << ": " << f.text;
    EXPECT_TRUE(std::regex_search(f.text, std::regex(R"(called .*\(count=.*called .*\(count=)")))
        << f.text;
    ++named;
  }
  EXPECT_GE(named, p - 1) << Dump(r);
}

INSTANTIATE_TEST_SUITE_P(Verdict, MismatchTest,
                         ::testing::Values("op", "count", "dtype", "root", "reduce_op"));

TEST(EmbeddedVerdictTest, KilledProgramIsNamedByTheOthers) {
  // No daemon: the program is the rank; kill it from the inside with SIGKILL.
  LoopRun r = RunLoop(3, 20, {"--die_rank=1", "--die_after=40"}, nullptr, "embedded");
  int named = 0;
  for (const auto& f : r.failures) {
    EXPECT_NE(f.text.find("rank 1 dead"), std::string::npos) << f.text;
    ++named;
  }
  EXPECT_EQ(named, 2) << Dump(r);
}

}  // namespace
}  // namespace gyre::testing
