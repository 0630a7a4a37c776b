// Error paths of the daemon and the tools, each a real process: a metrics port already taken,
// a flight-recorder folder that cannot be written, gyrectl pointed at a TCP store nobody
// serves. Each is a clear message naming the cause, not a crash or a hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

// A listening socket on 127.0.0.1 at a kernel-chosen port, held for the test's lifetime.
struct BusyPort {
  int fd = -1;
  int port = 0;
  BusyPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd, 1) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  ~BusyPort() { ::close(fd); }
};

std::string TempDir(const std::string& name) { return EmptyTempDir("gyre-" + name); }

std::vector<std::string> OneRank(const std::string& store, const std::string& job) {
  return {BinDir() + "/gyred",       "--rank=0",        "--world_size=1",
          "--store=file://" + store, "--job_id=" + job, "--run=selftest",
          "--rendezvous_timeout=10"};
}

TEST(DaemonErrorsTest, MetricsPortAlreadyTakenIsNamed) {
  BusyPort busy;
  ASSERT_GT(busy.port, 0);
  std::vector<std::string> argv = OneRank(TempDir("metrics"), "metrics-busy");
  argv.push_back("--metrics_port=" + std::to_string(busy.port));
  CommandResult r = RunCommand(argv, {}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(std::to_string(busy.port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
}

TEST(DaemonErrorsTest, UnwritableFlightDirectoryIsRefusedAtStart) {
  // Found out now, not after a failure when the dump is needed.
  std::vector<std::string> argv = OneRank(TempDir("flight"), "flight-unwritable");
  argv.push_back("--flight_dir=/nonexistent-gyre-dir/sub");
  CommandResult r = RunCommand(argv, {}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--flight_dir /nonexistent-gyre-dir/sub is not a writable folder"),
            std::string::npos)
      << r.err;
}

// A client socket in a folder that is not there: said before the rendezvous (it was found at
// bind time, after every other rank had joined), not after rank 1 is waited for.
TEST(DaemonErrorsTest, ASocketInAMissingFolderIsRefusedBeforeTheRendezvous) {
  const std::string store = TempDir("socket-dir");
  CommandResult r =
      RunCommand({BinDir() + "/gyred", "--rank=0", "--world_size=2", "--store=file://" + store,
                  "--job_id=socket-dir", "--run=serve", "--socket=/nonexistent-gyre-dir/rank0.sock",
                  "--rendezvous_timeout=60"},
                 {}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10.0) << r.err;
  EXPECT_NE(r.err.find("cannot listen on /nonexistent-gyre-dir/rank0.sock: its folder "
                       "/nonexistent-gyre-dir: No such file or directory"),
            std::string::npos)
      << r.err;
  // A "folder" that is a file.
  const std::string file = BinDir() + "/gyred";
  r = RunCommand({BinDir() + "/gyred", "--rank=0", "--world_size=2", "--store=file://" + store,
                  "--job_id=socket-file", "--run=serve", "--socket=" + file + "/rank0.sock",
                  "--rendezvous_timeout=60"},
                 {}, 30);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10.0) << r.err;
  EXPECT_NE(r.err.find(": " + file + " is a regular file, not a folder"), std::string::npos)
      << r.err;
}

TEST(DaemonErrorsTest, GyrectlAgainstAStoreNobodyServesFailsPromptlyNamingIt) {
  int port = 0;
  {
    BusyPort closed;  // bound, then closed: a port nothing listens on now
    port = closed.port;
  }
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  CommandResult r = RunCommand(
      {BinDir() + "/gyrectl", "status", "--store", url, "--job_id", "nobody-home", "--timeout=1"},
      {}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 45.0);
  // Not silent while it waits: it says so after the first second.
  EXPECT_NE(r.err.find("gyrectl: the store at " + url + " does not answer yet"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace gyre::testing
