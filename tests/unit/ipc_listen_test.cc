// ipc::ListenUnix takes a path only when nothing is there or a stale socket is: a regular
// file or a folder at the path is left alone and named in the error, a socket another process
// serves on is refused, and a socket nobody serves on is replaced. Real sockets and files.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/ipc/ipc.h"

namespace gyre::ipc {
namespace {

using ::testing::HasSubstr;

Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

class ListenUnixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
    std::string templ = base + "/ipc_listen_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// A socket bound at `path` and closed without removing it: what a daemon killed by SIGKILL
// leaves behind.
void LeaveStaleSocket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  ASSERT_TRUE(IsSocket(path));
}

TEST_F(ListenUnixTest, NothingThereListensOwnerOnly) {
  const std::string path = Path("gyred.sock");
  auto fd = ListenUnix(path);
  ASSERT_TRUE(fd.ok()) << fd.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ::close(*fd);
}

TEST_F(ListenUnixTest, RegularFileIsRefusedByNameAndKept) {
  const std::string path = Path("regular.sock");
  { std::ofstream(path) << "hello\n"; }
  EXPECT_TRUE(CheckUnixSocketPath(path).code() == StatusCode::kAlreadyExists);
  auto fd = ListenUnix(path);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(fd.status().message(), HasSubstr(path + ": a regular file is there, not a socket"));
  EXPECT_EQ(ReadAll(path), "hello\n");
}

TEST_F(ListenUnixTest, DirectoryIsRefusedByNameAndKept) {
  const std::string path = Path("folder.sock");
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  { std::ofstream(path + "/inside") << "kept\n"; }
  auto fd = ListenUnix(path);
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(fd.status().message(), HasSubstr(path + ": a directory is there, not a socket"));
  EXPECT_EQ(ReadAll(path + "/inside"), "kept\n");
}

TEST_F(ListenUnixTest, SymlinkIsRefusedAndItsTargetKept) {
  const std::string target = Path("target");
  const std::string path = Path("link.sock");
  { std::ofstream(target) << "target\n"; }
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  auto fd = ListenUnix(path);
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(fd.status().message(), HasSubstr("a symbolic link is there, not a socket"));
  EXPECT_EQ(ReadAll(target), "target\n");
}

// Another process listens on the path: the newcomer is refused, and clients still reach the
// first listener.
TEST_F(ListenUnixTest, SocketServedByAnotherProcessIsRefused) {
  const std::string path = Path("live.sock");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto fd = ListenUnix(path);
    if (!fd.ok()) ::_exit(1);
    char byte = 'r';
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    while (true) {  // answers every connection (the probes too) until the parent kills it
      const int client = ::accept(*fd, nullptr, nullptr);
      if (client < 0) ::_exit(1);
      ::send(client, "A", 1, MSG_NOSIGNAL);
      ::close(client);
    }
  }
  struct KillOnExit {
    pid_t pid;
    ~KillOnExit() {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } kill_child{child};
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);

  EXPECT_EQ(CheckUnixSocketPath(path).code(), StatusCode::kAlreadyExists);
  auto fd = ListenUnix(path);
  EXPECT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(fd.status().message(), HasSubstr("another process is serving on " + path));
  if (fd.ok()) ::close(*fd);
  // The socket is still the child's: a client lands there.
  auto client = ConnectUnix(path, In(Seconds(5)));
  ASSERT_TRUE(client.ok()) << client.status();
  const timeval five_seconds{5, 0};
  ::setsockopt(*client, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof(five_seconds));
  char got = 0;
  EXPECT_EQ(::read(*client, &got, 1), 1);
  EXPECT_EQ(got, 'A');
  ::close(*client);
}

TEST_F(ListenUnixTest, StaleSocketIsReplaced) {
  const std::string path = Path("stale.sock");
  LeaveStaleSocket(path);
  EXPECT_TRUE(CheckUnixSocketPath(path).ok());
  EXPECT_TRUE(IsSocket(path));  // the check alone removes nothing
  auto fd = ListenUnix(path);
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto client = ConnectUnix(path, In(Seconds(5)));
  ASSERT_TRUE(client.ok()) << client.status();
  const int accepted = ::accept(*fd, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  ::close(accepted);
  ::close(*client);
  ::close(*fd);
}

// A path longer than a Unix socket address holds is refused by name by all three entry points,
// before anything is created or connected.
TEST_F(ListenUnixTest, PathTooLongForASocketAddressIsRefusedEverywhere) {
  const std::string path = Path(std::string(sizeof(sockaddr_un::sun_path), 'x'));
  const std::string want = "socket path '" + path + "' is too long";
  const StatusOr<int> listened = ListenUnix(path);
  ASSERT_FALSE(listened.ok());
  EXPECT_EQ(listened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(listened.status().message(), want);
  const Status checked = CheckUnixSocketPath(path);
  EXPECT_EQ(checked.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(checked.message(), want);
  const StatusOr<int> connected =
      ConnectUnix(path, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(connected.status().message(), want);
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0);
}

}  // namespace
}  // namespace gyre::ipc
