#include "core/ipc/ipc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

namespace gyre::ipc {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Status WaitFd(int fd, short events, Deadline deadline, const std::string& what, TimePoint start) {
  const Clock& clock = *SteadyClock::Get();
  while (true) {
    Duration left = deadline.Remaining(clock);
    if (left <= Duration::zero()) {
      return DeadlineExceededError(what + ": timed out after " +
                                   FormatDuration(clock.Now() - start));
    }
    int ms =
        left == Duration::max()
            ? 1000
            : static_cast<int>(std::min<int64_t>(
                  1000, std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1));
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return UnavailableError(what + ": poll: " + std::strerror(errno));
  }
}

}  // namespace

Status WriteAll(int fd, const void* buf, size_t n, Deadline deadline, const std::string& what) {
  const char* data = static_cast<const char*>(buf);
  const TimePoint start = SteadyClock::Get()->Now();
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::send(fd, data + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GYRE_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, what, start));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return UnavailableError(what + ": connection lost (" + std::strerror(errno) + ")");
  }
  return Status::Ok();
}

namespace {

// Receives at least one and at most n bytes into `data` (n > 0), waiting for them by
// `deadline`; `*got` is how many. Unavailable on EOF or a broken connection.
Status RecvSome(int fd, char* data, size_t n, size_t* got, Deadline deadline,
                const std::string& what, TimePoint start) {
  while (true) {
    const ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
    if (r > 0) {
      *got = static_cast<size_t>(r);
      return Status::Ok();
    }
    if (r == 0) return UnavailableError(what + ": connection closed by the other side");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      GYRE_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, what, start));
      continue;
    }
    if (errno == EINTR) continue;
    return UnavailableError(what + ": connection lost (" + std::strerror(errno) + ")");
  }
}

uint32_t DecodeLength(const unsigned char* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

Status CheckLength(uint32_t n, const std::string& what) {
  if (n <= kMaxMessageBytes) return Status::Ok();
  return InvalidArgumentError(what + ": length prefix " + std::to_string(n) +
                              " exceeds the cap of " + std::to_string(kMaxMessageBytes));
}

}  // namespace

Status ReadAll(int fd, void* buf, size_t n, Deadline deadline, const std::string& what) {
  char* data = static_cast<char*>(buf);
  const TimePoint start = SteadyClock::Get()->Now();
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    GYRE_RETURN_IF_ERROR(RecvSome(fd, data + done, n - done, &got, deadline, what, start));
    done += got;
  }
  return Status::Ok();
}

void SpinForMessage(int fd, Duration spin) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
  const Clock& clock = *SteadyClock::Get();
  const TimePoint until = clock.Now() + spin;
  while (true) {
    unsigned char len[4];
    const ssize_t got = ::recv(fd, len, sizeof(len), MSG_PEEK | MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return;  // EOF, error
    if (got == 4) {
      const uint32_t n = DecodeLength(len);
      int ready = 0;
      if (::ioctl(fd, FIONREAD, &ready) != 0 || static_cast<uint32_t>(ready) >= n + 4) return;
    }
    if (clock.Now() >= until) return;
  }
}

StatusOr<bool> SpinWaitPays(int world_size) {
  int local = world_size;
  if (const char* env = std::getenv("GYRE_LOCAL_WORLD_SIZE"); env != nullptr && *env != '\0') {
    // Refused by name, as every GYRE_* number is: atoi read "abc" as 0 and "4x" as 4.
    const std::string text = env;
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 1) {
      return InvalidArgumentError(
          "GYRE_LOCAL_WORLD_SIZE=\"" + text.substr(0, 64) + "\" is not a whole number from 1 to " +
          std::to_string(std::numeric_limits<int>::max()) + " (the ranks on this host)");
    }
    local = v;
  }
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  return CPU_COUNT(&allowed) >= 2 * std::max(local, 1);
}

namespace {

// The frame WriteMessage sends: the 4-byte length, then the message.
StatusOr<std::string> Frame(const google::protobuf::MessageLite& msg, const std::string& what) {
  const size_t size = msg.ByteSizeLong();
  if (size > kMaxMessageBytes) {
    return InvalidArgumentError(what + ": message of " + std::to_string(size) +
                                " bytes exceeds the cap of " + std::to_string(kMaxMessageBytes));
  }
  std::string frame(4 + size, '\0');
  const uint32_t n = static_cast<uint32_t>(size);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  if (!msg.SerializeToArray(frame.data() + 4, static_cast<int>(size))) {
    return InternalError(what + ": cannot serialize");
  }
  return frame;
}

}  // namespace

Status WriteMessage(int fd, const google::protobuf::MessageLite& msg, Deadline deadline,
                    const std::string& what) {
  // The length prefix and the message go out in one send: the reader wakes once.
  GYRE_ASSIGN_OR_RETURN(std::string frame, Frame(msg, what));
  return WriteAll(fd, frame.data(), frame.size(), deadline, what);
}

Status WriteMessageWithFd(int fd, const google::protobuf::MessageLite& msg, int pass,
                          Deadline deadline, const std::string& what) {
  GYRE_ASSIGN_OR_RETURN(std::string frame, Frame(msg, what));
  const TimePoint start = SteadyClock::Get()->Now();
  // The descriptor goes with the first bytes that leave; the rest follow as WriteAll sends.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  while (true) {
    iovec iov{frame.data(), frame.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass, sizeof(int));
    const ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      const size_t sent = static_cast<size_t>(w);
      return WriteAll(fd, frame.data() + sent, frame.size() - sent, deadline, what);
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GYRE_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, what, start));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return UnavailableError(what + ": cannot pass a descriptor (" + std::strerror(errno) + ")");
  }
}

Status ReadMessage(int fd, google::protobuf::MessageLite* msg, Deadline deadline,
                   const std::string& what) {
  unsigned char len[4];
  GYRE_RETURN_IF_ERROR(ReadAll(fd, len, 4, deadline, what));
  const uint32_t n = DecodeLength(len);
  GYRE_RETURN_IF_ERROR(CheckLength(n, what));
  std::string body(n, '\0');
  GYRE_RETURN_IF_ERROR(ReadAll(fd, body.data(), n, deadline, what));
  if (!msg->ParseFromString(body)) return InvalidArgumentError(what + ": unparsable message");
  return Status::Ok();
}

Status MessageReader::Read(google::protobuf::MessageLite* msg, Deadline deadline,
                           const std::string& what, ReadStart read_start) {
  const TimePoint start = SteadyClock::Get()->Now();
  bool may_wait_first = read_start == ReadStart::kWaitFirst;
  while (true) {
    size_t need = 4;
    if (buffered() >= 4) {
      const uint32_t n = DecodeLength(reinterpret_cast<const unsigned char*>(buf_.data() + begin_));
      GYRE_RETURN_IF_ERROR(CheckLength(n, what));
      need = 4 + size_t{n};
      if (buffered() >= need) {
        const bool parsed = msg->ParseFromArray(buf_.data() + begin_ + 4, static_cast<int>(n));
        begin_ += need;
        if (begin_ == end_) begin_ = end_ = 0;
        if (!parsed) return InvalidArgumentError(what + ": unparsable message");
        return Status::Ok();
      }
    }
    // Room for at least the rest of this message, and for a small one whole.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, buffered());
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() < std::max<size_t>(need, 4096)) buf_.resize(std::max<size_t>(need, 4096));
    if (may_wait_first && buffered() == 0) {
      GYRE_RETURN_IF_ERROR(WaitFd(fd_, POLLIN, deadline, what, start));
    }
    may_wait_first = false;
    GYRE_RETURN_IF_ERROR(Fill(buf_.size() - end_, deadline, what, start));
  }
}

MessageReader::~MessageReader() {
  for (int fd : fds_) ::close(fd);
}

int MessageReader::TakeFd() {
  if (fds_.empty()) return -1;
  const int fd = fds_.front();
  fds_.erase(fds_.begin());
  return fd;
}

// RecvSome through recvmsg, keeping the descriptors that come with the bytes.
Status MessageReader::Fill(size_t room, Deadline deadline, const std::string& what,
                           TimePoint start) {
  while (true) {
    iovec iov{buf_.data() + end_, room};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxHeldFds)];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    const ssize_t r = ::recvmsg(fd_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      GYRE_RETURN_IF_ERROR(WaitFd(fd_, POLLIN, deadline, what, start));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return UnavailableError(what + ": connection lost (" + std::strerror(errno) + ")");
    size_t arrived = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds_.push_back(fd);
        ++arrived;
      }
    }
    if ((m.msg_flags & MSG_CTRUNC) != 0 || fds_.size() > kMaxHeldFds) {
      for (int fd : fds_) ::close(fd);
      fds_.clear();
      return InvalidArgumentError(what + ": the other side passed more file descriptors (" +
                                  std::to_string(arrived) + " at once) than it sent requests for");
    }
    if (r == 0) return UnavailableError(what + ": connection closed by the other side");
    end_ += static_cast<size_t>(r);
    return Status::Ok();
  }
}

namespace {

// What sits at a path, for an error that says why the path cannot be used.
std::string FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a file that is not a socket";
}

// How long ConnectUnix waits quietly before it says it is still waiting.
constexpr Duration kConnectPatience = std::chrono::seconds(5);

// The address of the Unix socket at `path`, which must fit sun_path.
StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("socket path '" + path + "' is too long");
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

StatusOr<int> ConnectUnix(const std::string& path, Deadline deadline) {
  GYRE_ASSIGN_OR_RETURN(const sockaddr_un addr, UnixAddress(path));
  const Clock& clock = *SteadyClock::Get();
  const TimePoint start = clock.Now();
  bool told = false;
  Duration backoff = Millis(5);
  std::string last_error;
  while (true) {
    // What is there and is no socket will not become one: said at once, not after the wait.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
      return InvalidArgumentError("cannot connect to the daemon at " + path + ": it is " +
                                  FileKind(st.st_mode) + ", not a socket");
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    last_error = std::strerror(errno);
    ::close(fd);
    if (deadline.Expired(clock)) {
      return UnavailableError("cannot connect to the daemon at " + path + ": " + last_error +
                              " (waited " + FormatDuration(clock.Now() - start) + ")");
    }
    // A daemon still starting answers within a second or two; a wrong path never does, and
    // a silent wait of a minute looks like a hang.
    if (!told && clock.Now() - start >= kConnectPatience) {
      told = true;
      std::fprintf(stderr,
                   "gyre: the daemon at %s is not serving yet (%s) after %s; waiting up to %s "
                   "more (its rendezvous may still be going on)\n",
                   path.c_str(), last_error.c_str(), FormatDuration(clock.Now() - start).c_str(),
                   FormatDuration(deadline.Remaining(clock)).c_str());
      std::fflush(stderr);
    }
    std::this_thread::sleep_for(std::min(backoff, deadline.Remaining(*SteadyClock::Get())));
    backoff = std::min<Duration>(backoff * 2, Millis(200));
  }
}

namespace {

// The directory part of `path` ("." when it has none).
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Whether a new listener may take `path`: nothing there (*stale false), or a socket nobody
// serves on (*stale true, for the caller to remove). Anything else is an error that says what
// is there; it is left untouched.
Status InspectSocketPath(const std::string& path, const sockaddr_un& addr, bool* stale) {
  *stale = false;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return UnavailableError("cannot listen on " + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return AlreadyExistsError("cannot listen on " + path + ": " + FileKind(st.st_mode) +
                              " is there, not a socket; remove it or choose another path");
  }
  // A live listener accepts (or, with a full backlog, makes a non-blocking connect fail with
  // EAGAIN); only a refused connect means nobody is serving on it.
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  const int rc = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int connect_errno = errno;
  ::close(probe);
  if (rc == 0 || connect_errno == EAGAIN || connect_errno == EINPROGRESS) {
    return AlreadyExistsError("cannot listen on " + path + ": another process is serving on " +
                              path + "; stop it or choose another path");
  }
  if (connect_errno != ECONNREFUSED) {
    return UnavailableError("cannot listen on " + path +
                            ": cannot tell whether the socket there is in use (connect: " +
                            std::strerror(connect_errno) + ")");
  }
  *stale = true;
  return Status::Ok();
}

}  // namespace

Status CheckUnixSocketPath(const std::string& path) {
  GYRE_ASSIGN_OR_RETURN(const sockaddr_un addr, UnixAddress(path));
  // Its folder must be there and writable: found only at bind time, that came after the
  // rendezvous, when every other rank had joined.
  const std::string dir = DirectoryOf(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return InvalidArgumentError("cannot listen on " + path + ": its folder " + dir + ": " +
                                std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("cannot listen on " + path + ": " + dir + " is " +
                                FileKind(st.st_mode) + ", not a folder");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return InvalidArgumentError("cannot listen on " + path + ": its folder " + dir + ": " +
                                std::strerror(errno));
  }
  bool stale = false;
  return InspectSocketPath(path, addr, &stale);
}

StatusOr<int> ListenUnix(const std::string& path) {
  GYRE_ASSIGN_OR_RETURN(const sockaddr_un addr, UnixAddress(path));
  // Two listeners starting on one path at once: without a lock, one could find the other's
  // socket bound but not yet listening, take it for stale and remove it. The check, the
  // removal and the bind happen under a lock on the socket's directory (closing the
  // descriptor releases it).
  const int dir_fd = ::open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    while (::flock(dir_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  auto listen_locked = [&]() -> StatusOr<int> {
    bool stale = false;
    GYRE_RETURN_IF_ERROR(InspectSocketPath(path, addr, &stale));
    if (stale && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return UnavailableError("cannot listen on " + path +
                              ": cannot remove the stale socket there: " + std::strerror(errno));
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
    mode_t old = ::umask(0077);
    int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    ::umask(old);
    if (rc != 0 || ::listen(fd, 16) != 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return UnavailableError("cannot listen on " + path + ": " + e);
    }
    ::chmod(path.c_str(), 0600);
    return fd;
  };
  StatusOr<int> fd = listen_locked();
  if (dir_fd >= 0) ::close(dir_fd);
  return fd;
}

StatusOr<int> ListenTcp(const std::string& host, int port, std::string* bound) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("'" + host + "' is not an IPv4 address");
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    std::string e = std::strerror(errno);
    ::close(fd);
    return UnavailableError("cannot listen on " + host + ":" + std::to_string(port) + ": " + e);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = host + ":" + std::to_string(ntohs(addr.sin_port));
  return fd;
}

StatusOr<int> ConnectTcp(const std::string& address, Deadline deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("'" + Printable(address) + "' is not host:port");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return InvalidArgumentError("'" + Printable(address) + "' is not an IPv4 host:port");
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS) {
    std::string e = std::strerror(errno);
    ::close(fd);
    return UnavailableError("connect to " + address + " failed: " + e);
  }
  if (rc != 0) {
    Status w = WaitFd(fd, POLLOUT, deadline, "connect to " + address, SteadyClock::Get()->Now());
    if (!w.ok()) {
      ::close(fd);
      return w;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      return UnavailableError("connect to " + address + " failed: " + std::strerror(err));
    }
  }
  return fd;
}

}  // namespace gyre::ipc
