// gyred --socket PATH refuses a path it cannot take before it joins its job: a regular file
// there is named and kept, and another daemon's live socket is not taken over. Runs the real
// build/bin/gyred as a one-rank job on a FileStore folder.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/ipc/ipc.h"
#include "tests/support/subprocess.h"

namespace gyre {
namespace {

using ::testing::HasSubstr;

using testing::ReadAll;

std::string GyredBinary() { return testing::BuiltBinary("gyred"); }

struct Exit {
  int code = -1;  // -1: killed after the timeout
  Duration took{};
};

// Runs gyred as rank 0 of a one-rank job serving on `socket_path`; stderr goes to `log`.
Exit RunGyred(const std::string& dir, const std::string& socket_path, const std::string& log,
              Duration timeout) {
  const TimePoint start = SteadyClock::Get()->Now();
  const pid_t pid = testing::StartLogged(
      GyredBinary(),
      {"--rank=0", "--world_size=1", "--store=file://" + dir + "/store", "--job_id=socketpath",
       "--run=serve", "--rendezvous_timeout=10", "--socket=" + socket_path},
      log);
  Exit exit;
  exit.code = testing::WaitExit(pid, timeout);
  exit.took = SteadyClock::Get()->Now() - start;
  return exit;
}

class GyredSocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(GyredBinary().c_str(), X_OK), 0) << GyredBinary() << ": build gyred";
    dir_ = testing::MakeTempDir("gyred_socket");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override { EXPECT_TRUE(testing::RemoveTree(dir_)); }
  std::string dir_;
};

TEST_F(GyredSocketPathTest, RegularFileAtTheSocketPathIsKeptAndNamed) {
  const std::string path = dir_ + "/regular.sock";
  { std::ofstream(path) << "hello\n"; }
  Exit exit = RunGyred(dir_, path, dir_ + "/gyred.log", Seconds(20));
  EXPECT_EQ(exit.code, 1);
  EXPECT_LT(exit.took, Seconds(5));  // refused before the rendezvous, not after
  EXPECT_THAT(ReadAll(dir_ + "/gyred.log"),
              HasSubstr("cannot listen on " + path + ": a regular file is there, not a socket"));
  EXPECT_EQ(ReadAll(path), "hello\n");
}

TEST_F(GyredSocketPathTest, LiveSocketOfAnotherDaemonIsNotTakenOver) {
  const std::string path = dir_ + "/rank0.sock";
  auto first = ipc::ListenUnix(path);  // the daemon already serving there
  ASSERT_TRUE(first.ok()) << first.status();
  Exit exit = RunGyred(dir_, path, dir_ + "/gyred.log", Seconds(20));
  EXPECT_EQ(exit.code, 1);
  EXPECT_THAT(ReadAll(dir_ + "/gyred.log"), HasSubstr("another process is serving on " + path));
  // Its clients still reach the first listener.
  auto client = ipc::ConnectUnix(path, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  ASSERT_TRUE(client.ok()) << client.status();
  const int accepted = ::accept(*first, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  ::close(accepted);
  ::close(*client);
  ::close(*first);
}

}  // namespace
}  // namespace gyre
