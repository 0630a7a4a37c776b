// gyred --run selftest/main: every rank that fails prints the first call that failed on it and
// why, not only rank 0 in its report. Two real gyred processes on a FileStore folder, given
// different secrets, so that their first collective fails on both.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "tests/support/subprocess.h"

namespace gyre {
namespace {

using ::testing::HasSubstr;

using testing::ReadAll;
using testing::WaitExit;

std::string GyredBinary() { return testing::BuiltBinary("gyred"); }
pid_t StartGyred(const std::vector<std::string>& flags, const std::string& log) {
  return testing::StartLogged(GyredBinary(), flags, log);
}

void WriteSecret(const std::string& path, char digit) {
  { std::ofstream(path) << std::string(64, digit) << "\n"; }
  ::chmod(path.c_str(), 0600);
}

class GyredWorkloadFailureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(GyredBinary().c_str(), X_OK), 0) << GyredBinary() << ": build gyred";
    dir_ = testing::MakeTempDir("gyred_workload");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override { EXPECT_TRUE(testing::RemoveTree(dir_)); }
  std::string dir_;
};

TEST_P(GyredWorkloadFailureTest, EveryFailingRankNamesItsFirstFailedCall) {
  const std::string workload = GetParam();
  WriteSecret(dir_ + "/secret0", '1');
  WriteSecret(dir_ + "/secret1", '2');
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    pids.push_back(StartGyred({"--rank=" + r, "--world_size=2", "--store=file://" + dir_ + "/store",
                               "--job_id=wl-" + workload, "--run=" + workload, "--timeout=3",
                               "--rendezvous_timeout=10", "--secret_file=" + dir_ + "/secret" + r},
                              dir_ + "/rank" + r + ".log"));
  }
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(WaitExit(pid, Seconds(60)));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = ReadAll(dir_ + "/rank" + std::to_string(rank) + ".log");
    SCOPED_TRACE("rank " + std::to_string(rank) + " log:\n" + log);
    EXPECT_EQ(codes[rank], 1);
    // The verification's first call: the failing collective and its status, on this rank.
    EXPECT_THAT(log, HasSubstr("[rank " + std::to_string(rank) + "] gyred: --run " + workload +
                               " failed: first failure on this rank: allreduce "));
    EXPECT_THAT(log, ::testing::ContainsRegex("failed: first failure on this rank: allreduce "
                                              "[a-z_]+, int32, count [0-9]+, root 1: [A-Za-z]+: "));
  }
  // Rank 0's report names that first failure before the gather that could not collect.
  EXPECT_THAT(ReadAll(dir_ + "/rank0.log"),
              HasSubstr("verification: first failure on this rank: allreduce "));
}

INSTANTIATE_TEST_SUITE_P(Workloads, GyredWorkloadFailureTest,
                         ::testing::Values("selftest", "main"));

}  // namespace
}  // namespace gyre
