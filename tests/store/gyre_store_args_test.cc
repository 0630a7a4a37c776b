// gyre-store takes only flags: a stray positional argument (`gyre-store 29500`, meant as
// --port 29500) is refused with exit 2 and named, instead of being dropped while the server
// listens on a port nobody asked for. Runs the real build/bin/gyre-store.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string GyreStoreBinary() { return testing::BuiltBinary("gyre-store"); }

struct Outcome {
  int code;  // exit code; -1 when it was still running after 10 s (and was killed)
  std::string output;
};

// Runs gyre-store with `args`, stdout and stderr into one temporary file.
Outcome RunGyreStore(const std::vector<std::string>& args) {
  char log[] = "/tmp/gyre_store_args_XXXXXX";
  const int log_fd = ::mkstemp(log);
  if (log_fd < 0) return {-2, std::string("mkstemp: ") + std::strerror(errno)};
  ::close(log_fd);
  const pid_t pid = testing::StartLogged(GyreStoreBinary(), args, log);
  Outcome out{testing::WaitExit(pid, Seconds(10)), testing::ReadAll(log)};
  ::unlink(log);
  return out;
}

TEST(GyreStoreArgsTest, StrayNumberIsRefusedWithAHintAtPort) {
  ASSERT_EQ(::access(GyreStoreBinary().c_str(), X_OK), 0) << GyreStoreBinary();
  const Outcome out = RunGyreStore({"29500"});
  EXPECT_EQ(out.code, 2) << out.output;
  EXPECT_THAT(out.output, HasSubstr("gyre-store: unexpected argument '29500'"));
  EXPECT_THAT(out.output, HasSubstr("--port 29500"));
  EXPECT_THAT(out.output, Not(HasSubstr("listening on")));
}

TEST(GyreStoreArgsTest, StrayWordAfterFlagsIsRefused) {
  ASSERT_EQ(::access(GyreStoreBinary().c_str(), X_OK), 0) << GyreStoreBinary();
  const Outcome out = RunGyreStore({"--port=0", "extra"});
  EXPECT_EQ(out.code, 2) << out.output;
  EXPECT_THAT(out.output, HasSubstr("gyre-store: unexpected argument 'extra'"));
  EXPECT_THAT(out.output, Not(HasSubstr("listening on")));
}

}  // namespace
}  // namespace gyre
