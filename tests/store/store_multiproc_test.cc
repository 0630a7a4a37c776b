// Stores shared by real processes: forked children adding to one FileStore folder and
// meeting in a rendezvous, a write error in a child with a file-size limit, and the
// gyre-store binary serving forked clients. Children are forked while this process has no
// other threads, and report through their exit code.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/store/file_store.h"
#include "core/store/rendezvous.h"
#include "core/store/tcp_store.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;

pid_t ForkChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

// The child's exit code, or -1 when it was killed or had to be killed after `timeout`.
int WaitChild(pid_t pid, Duration timeout) {
  TimePoint until = SteadyClock::Get()->Now() + timeout;
  while (true) {
    int status = 0;
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (SteadyClock::Get()->Now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(2000);
  }
}

int Fail(const Status& status) {
  std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), status.ToString().c_str());
  return 1;
}

PeerRecord Me(int rank, int world_size) {
  PeerRecord me;
  me.rank = rank;
  me.world_size = world_size;
  me.host = "localhost";
  me.pid = ::getpid();
  me.address = "127.0.0.1:" + std::to_string(20000 + rank);
  return me;
}

// Rendezvous from a child; publishes the pids it saw under "seen/<rank>".
int RendezvousChild(Store* store, const std::string& job, int rank, int world_size,
                    Duration timeout) {
  auto records = Rendezvous(store, job, Me(rank, world_size), In(timeout));
  if (!records.ok()) return Fail(records.status());
  std::string pids;
  for (const PeerRecord& record : *records) pids += std::to_string(record.pid) + ",";
  Status published = store->Set("seen/" + std::to_string(rank), pids, In(Seconds(5)));
  return published.ok() ? 0 : Fail(published);
}

TEST(StoreMultiprocTest, ForkedProcessesAddToOneFolderExactly) {
  testing::TempDir tmp;
  constexpr int kChildren = 4;
  constexpr int kAdds = 100;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    children.push_back(ForkChild([&] {
      auto store = FileStore::Open(tmp.path());
      if (!store.ok()) return Fail(store.status());
      for (int i = 0; i < kAdds; ++i) {
        auto added = (*store)->Add("total", 1, In(Seconds(30)));
        if (!added.ok()) return Fail(added.status());
      }
      return 0;
    }));
  }
  for (pid_t pid : children) EXPECT_EQ(WaitChild(pid, Seconds(40)), 0);
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->Add("total", 0, In(Seconds(5))), kChildren * kAdds);
}

TEST(StoreMultiprocTest, ForkedRendezvousOnAFolder) {
  testing::TempDir tmp;
  constexpr int kWorld = 4;
  std::set<std::string> expected_pids;
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    children.push_back(ForkChild([&, rank] {
      auto store = FileStore::Open(tmp.path());
      if (!store.ok()) return Fail(store.status());
      return RendezvousChild(store->get(), "mp-job", rank, kWorld, Seconds(20));
    }));
  }
  std::string pid_list;
  for (pid_t pid : children) pid_list += std::to_string(pid) + ",";
  for (pid_t pid : children) EXPECT_EQ(WaitChild(pid, Seconds(30)), 0);
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  for (int rank = 0; rank < kWorld; ++rank) {
    auto seen = (*store)->Get("seen/" + std::to_string(rank), In(Seconds(1)));
    ASSERT_TRUE(seen.ok()) << seen.status();
    EXPECT_EQ(*seen, pid_list) << "rank " << rank;
  }
}

TEST(StoreMultiprocTest, RankThatDiesBeforeRendezvousIsNamed) {
  testing::TempDir tmp;
  std::vector<pid_t> children;
  for (int rank = 0; rank < 4; ++rank) {
    children.push_back(ForkChild([&, rank] {
      if (rank == 2) return 0;  // dies before it gets there
      auto store = FileStore::Open(tmp.path());
      if (!store.ok()) return Fail(store.status());
      // 3 s from each child's start: the three must see each other's slots before it, also
      // when a forked child waits for a CPU.
      auto records = Rendezvous(store->get(), "J", Me(rank, 4), In(Seconds(3)));
      if (records.ok()) return 2;
      const std::string& message = records.status().message();
      bool named = records.status().code() == StatusCode::kDeadlineExceeded &&
                   message.find("3 of 4 ranks arrived") != std::string::npos &&
                   message.find("missing: rank 2 ") != std::string::npos;
      return named ? 0 : Fail(records.status());
    }));
  }
  for (pid_t pid : children) EXPECT_EQ(WaitChild(pid, Seconds(10)), 0);
}

TEST(StoreMultiprocTest, WriteErrorIsAStatusNamingThePath) {
  testing::TempDir tmp;
  pid_t child = ForkChild([&] {
    auto store = FileStore::Open(tmp.path());
    if (!store.ok()) return Fail(store.status());
    // A file-size limit makes every write past 1 KiB fail (EFBIG), as a full disk would.
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1024, 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
    Status status = (*store)->Set("big", std::string(4096, 'v'), In(Seconds(5)));
    if (status.code() != StatusCode::kResourceExhausted) return Fail(status);
    if (status.message().find(tmp.path() + "/.tmp.") == std::string::npos) return Fail(status);
    if (status.message().find("File too large") == std::string::npos) return Fail(status);
    if (status.message().find("'big'") == std::string::npos) return Fail(status);
    // Nothing half-written is visible, and small writes still work.
    auto value = (*store)->TryGet("big", In(Seconds(5)));
    if (!value.ok() || value->has_value()) return 4;
    if (!(*store)->Set("small", "ok", In(Seconds(5))).ok()) return 5;
    return 0;
  });
  EXPECT_EQ(WaitChild(child, Seconds(10)), 0);
  EXPECT_EQ(testing::TempDir::List(tmp.path()), (std::vector<std::string>{".lock", "k.small"}));
}

// A CompareSet whose comparison fails writes nothing, so a full disk does not fail it: it
// answers the value that is there (or that the key is absent), as on a disk with room.
TEST(StoreMultiprocTest, AFailingCompareSetNeedsNoRoomOnTheDisk) {
  testing::TempDir tmp;
  pid_t child = ForkChild([&] {
    auto store = FileStore::Open(tmp.path());
    if (!store.ok()) return Fail(store.status());
    if (!(*store)->Set("size", "4", In(Seconds(5))).ok()) return 3;
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1024, 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 4;
    const std::string big(4096, 'v');
    auto taken = (*store)->CompareSet("size", "", big, In(Seconds(5)));
    if (!taken.ok()) return Fail(taken.status());
    if (*taken != "4") return 5;
    auto absent = (*store)->CompareSet("none", "x", big, In(Seconds(5)));
    if (absent.status().code() != StatusCode::kNotFound) return Fail(absent.status());
    // One that matches must write, and the full disk is its error.
    auto matches = (*store)->CompareSet("size", "4", big, In(Seconds(5)));
    if (matches.status().code() != StatusCode::kResourceExhausted) return Fail(matches.status());
    return 0;
  });
  EXPECT_EQ(WaitChild(child, Seconds(10)), 0);
  EXPECT_EQ(testing::TempDir::List(tmp.path()), (std::vector<std::string>{".lock", "k.size"}));
}

// build/bin/gyre-store: GYRE_BIN_DIR is set by CTest; run by hand, the binary sits in ../bin
// next to tests/.
std::string GyreStoreBinary() {
  if (const char* env = std::getenv("GYRE_BIN_DIR")) return std::string(env) + "/gyre-store";
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/')) + "/../bin/gyre-store";
}

// Starts build/bin/gyre-store on a kernel-picked port; returns its pid and port. With
// `nofile`, the server starts under that file descriptor limit; `args` are added to its
// command line; with `stderr_path`, its log goes to that file.
bool StartServerBinary(pid_t* pid, int* port, const struct rlimit* nofile = nullptr,
                       const std::vector<std::string>& args = {},
                       const std::string& stderr_path = "") {
  const std::string binary = GyreStoreBinary();
  if (::access(binary.c_str(), X_OK) != 0) {
    ADD_FAILURE() << binary << " is not there; build the gyre-store target";
    return false;
  }
  std::vector<std::string> command = {binary, "--host=127.0.0.1", "--port=0"};
  command.insert(command.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return false;
  std::fflush(nullptr);
  *pid = ::fork();
  if (*pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    if (!stderr_path.empty()) {
      const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (err < 0 || ::dup2(err, STDERR_FILENO) < 0) ::_exit(125);
    }
    if (nofile != nullptr && ::setrlimit(RLIMIT_NOFILE, nofile) != 0) ::_exit(126);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  TimePoint until = SteadyClock::Get()->Now() + Seconds(10);
  while (line.find('\n') == std::string::npos && SteadyClock::Get()->Now() < until) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  const std::string prefix = "gyre-store listening on 127.0.0.1:";
  if (line.compare(0, prefix.size(), prefix) != 0) {
    ADD_FAILURE() << "unexpected first line from gyre-store: '" << line << "'";
    return false;
  }
  *port = std::atoi(line.c_str() + prefix.size());
  return *port > 0;
}

// The soft limit as /proc/<pid>/limits shows it ("Max open files  <soft>  <hard>  files").
long SoftNofileOf(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/limits").c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  long soft = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "Max open files", 14) == 0) soft = std::atol(line + 14);
  }
  std::fclose(f);
  return soft;
}

// One connection per rank: a server started under a low soft limit (Debian's 1024) raises it
// for --max_ranks (4096 by default), the tools' connections and a margin, as far as the hard
// limit allows.
TEST(StoreMultiprocTest, GyreStoreRaisesItsDescriptorLimitForTheRanksItServes) {
  const struct rlimit low = {256, 8192};
  pid_t server = 0;
  int port = 0;
  ASSERT_TRUE(StartServerBinary(&server, &port, &low));
  EXPECT_EQ(SoftNofileOf(server), 4096 + 64 + 64);
  ::kill(server, SIGTERM);
  EXPECT_EQ(WaitChild(server, Seconds(10)), 0);
  // A count it cannot serve is a usage error, not a server that raises nothing.
  const int status = std::system((GyreStoreBinary() + " --max_ranks=0 2>/dev/null").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

std::string ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Opens authenticated connections until `n` are held or one is refused; returns them.
std::vector<int> HoldConnections(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = testing::ConnectAuthenticated(port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

// The connection cap follows --max_ranks: its ranks and the tools' 64 connections are served,
// the next one is refused, and the log names the cap and the flag that raises it.
TEST(StoreMultiprocTest, GyreStoreCapFollowsMaxRanksAndSaysHowToRaiseIt) {
  testing::TempDir tmp;
  const std::string log = tmp.path() + "/gyre-store.log";
  pid_t server = 0;
  int port = 0;
  ASSERT_TRUE(StartServerBinary(&server, &port, nullptr, {"--max_ranks=4"}, log));
  std::vector<int> held = HoldConnections(port, 4 + 64);
  EXPECT_EQ(held.size(), 4u + 64u);
  const int over = testing::ConnectAuthenticated(port);
  EXPECT_LT(over, 0) << "a connection beyond --max_ranks 4 plus 64 was served";
  if (over >= 0) ::close(over);
  for (int fd : held) ::close(fd);
  ::kill(server, SIGTERM);
  EXPECT_EQ(WaitChild(server, Seconds(10)), 0);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("already 68 connections, the cap of 68 (--max_ranks 4 plus 64 for "
                              "tools; restart gyre-store with a larger --max_ranks)"));
}

// More than 1024 ranks meet at one gyre-store when --max_ranks says so. Needs a descriptor
// limit of a few hundred above that here and in the server; skipped where the hard limit is
// lower.
TEST(StoreMultiprocTest, GyreStoreServesMoreThan1024RanksWhenMaxRanksSaysSo) {
  constexpr int kRanks = 1100;
  struct rlimit mine = {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &mine), 0);
  constexpr rlim_t kNeeded = kRanks + 300;
  if (mine.rlim_max != RLIM_INFINITY && mine.rlim_max < kNeeded) {
    GTEST_SKIP() << "the hard descriptor limit " << mine.rlim_max << " is below " << kNeeded;
  }
  if (mine.rlim_cur != RLIM_INFINITY && mine.rlim_cur < kNeeded) {
    struct rlimit raised = mine;
    raised.rlim_cur = kNeeded;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &raised), 0);
  }
  pid_t server = 0;
  int port = 0;
  ASSERT_TRUE(
      StartServerBinary(&server, &port, nullptr, {"--max_ranks=" + std::to_string(kRanks)}));
  std::vector<int> held = HoldConnections(port, kRanks);
  EXPECT_EQ(held.size(), static_cast<size_t>(kRanks));
  {
    auto store = TcpStore::Connect("127.0.0.1", port, In(Seconds(5)));
    EXPECT_TRUE(store.ok()) << store.status();
    if (store.ok()) {
      EXPECT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
    }
  }
  for (int fd : held) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &mine);
  ::kill(server, SIGTERM);
  EXPECT_EQ(WaitChild(server, Seconds(10)), 0);
}

TEST(StoreMultiprocTest, GyreStoreBinaryServesForkedRanksAndStopsOnSigterm) {
  pid_t server = 0;
  int port = 0;
  ASSERT_TRUE(StartServerBinary(&server, &port));
  constexpr int kWorld = 4;
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    children.push_back(ForkChild([&, rank] {
      auto store = TcpStore::Connect("127.0.0.1", port, In(Seconds(10)));
      if (!store.ok()) return Fail(store.status());
      return RendezvousChild(store->get(), "tcp-job", rank, kWorld, Seconds(20));
    }));
  }
  std::string pid_list;
  for (pid_t pid : children) pid_list += std::to_string(pid) + ",";
  for (pid_t pid : children) EXPECT_EQ(WaitChild(pid, Seconds(30)), 0);
  {
    auto store = TcpStore::Connect("127.0.0.1", port, In(Seconds(5)));
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->Get("seen/3", In(Seconds(5))), pid_list);
  }
  ASSERT_EQ(::kill(server, SIGTERM), 0);
  EXPECT_EQ(WaitChild(server, Seconds(10)), 0);
}

}  // namespace
}  // namespace gyre::store
