// ipc::SpinWaitPays: a program and its daemon spin-wait only when every one of the two
// processes per rank on this host has a CPU of its own (GYRE_LOCAL_WORLD_SIZE, else all).
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include "core/ipc/ipc.h"

namespace gyre::ipc {
namespace {

class SpinPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_set_t allowed;
    ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    cpus_ = CPU_COUNT(&allowed);
    ::unsetenv("GYRE_LOCAL_WORLD_SIZE");
  }
  void TearDown() override { ::unsetenv("GYRE_LOCAL_WORLD_SIZE"); }
  int cpus_ = 0;
};

TEST_F(SpinPolicyTest, SpinsOnlyWhenEveryProcessHasACpu) {
  const int fits = cpus_ / 2;  // ranks whose program and daemon all get a CPU
  if (fits >= 1) {
    EXPECT_TRUE(*SpinWaitPays(fits));
  }
  EXPECT_FALSE(*SpinWaitPays(fits + 1));
}

TEST_F(SpinPolicyTest, TheLocalWorldSizeCountsNotTheWholeJob) {
  const int fits = cpus_ / 2;
  if (fits < 1) GTEST_SKIP() << "one CPU: spinning never pays";
  ::setenv("GYRE_LOCAL_WORLD_SIZE", std::to_string(fits).c_str(), 1);
  EXPECT_TRUE(*SpinWaitPays(1000));  // 1000 ranks in the job, few of them here
  ::setenv("GYRE_LOCAL_WORLD_SIZE", std::to_string(fits + 1).c_str(), 1);
  EXPECT_FALSE(*SpinWaitPays(1));
  ::setenv("GYRE_LOCAL_WORLD_SIZE", "", 1);  // empty: unset, the world size counts
  EXPECT_TRUE(*SpinWaitPays(fits));
}

// atoi read "abc" as 0 (ignored) and "4x" as 4: a misspelt value is refused by name.
TEST_F(SpinPolicyTest, ALocalWorldSizeThatIsNoNumberIsRefusedByName) {
  for (const char* bad : {"abc", "4x", "0", "-2", "99999999999"}) {
    ::setenv("GYRE_LOCAL_WORLD_SIZE", bad, 1);
    const StatusOr<bool> spin = SpinWaitPays(4);
    ASSERT_FALSE(spin.ok()) << bad;
    EXPECT_EQ(spin.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(spin.status().message().find(std::string("GYRE_LOCAL_WORLD_SIZE=\"") + bad + "\""),
              std::string::npos)
        << spin.status();
  }
}

}  // namespace
}  // namespace gyre::ipc
