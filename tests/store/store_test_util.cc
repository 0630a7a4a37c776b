#include "tests/store/store_test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/auth/fd_handshake.h"

namespace gyre::store::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/gyre_store_test.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) std::abort();
  path_ = buf.data();
}

TempDir::~TempDir() {
  ::nftw(
      path_.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

std::vector<std::string> TempDir::List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

int ConnectRaw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

Status RawHandshake(int fd, const auth::Credentials& credentials) {
  return auth::ConnectOnFd(fd, auth::Channel::kStore, credentials, auth::kNoRank,
                           Deadline::After(*SteadyClock::Get(), Seconds(5)), "raw store client");
}

int ConnectAuthenticated(int port, const auth::Credentials& credentials) {
  int fd = ConnectRaw(port);
  if (fd < 0) return -1;
  if (!RawHandshake(fd, credentials).ok()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendRaw(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

namespace {

// -1 error, 0 timeout or EOF (eof set), >0 bytes.
ssize_t ReadSome(int fd, char* buf, size_t n, TimePoint until, bool* eof) {
  *eof = false;
  while (true) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::Get()->Now());
    if (left.count() <= 0) return 0;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0) return -1;
    if (r == 0) continue;
    ssize_t got = ::recv(fd, buf, n, 0);
    if (got == 0) *eof = true;
    if (got < 0 && errno == ECONNRESET) {
      *eof = true;
      return 0;
    }
    return got;
  }
}

}  // namespace

bool WaitForEof(int fd, Duration timeout, std::string* got) {
  TimePoint until = SteadyClock::Get()->Now() + timeout;
  char buf[4096];
  while (true) {
    bool eof = false;
    ssize_t n = ReadSome(fd, buf, sizeof(buf), until, &eof);
    if (eof) return true;
    if (n <= 0) return false;
    if (got != nullptr) got->append(buf, static_cast<size_t>(n));
  }
}

bool ReadExactly(int fd, size_t n, Duration timeout, std::string* out) {
  TimePoint until = SteadyClock::Get()->Now() + timeout;
  out->clear();
  char buf[4096];
  while (out->size() < n) {
    bool eof = false;
    ssize_t got = ReadSome(fd, buf, std::min(sizeof(buf), n - out->size()), until, &eof);
    if (got <= 0) return false;
    out->append(buf, static_cast<size_t>(got));
  }
  return true;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace gyre::store::testing
