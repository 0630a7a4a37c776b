// Preloaded into a gyred by daemon_socket_test to make the seal-versus-size race of a shared
// buffer deterministic. When gyred reads the seals of a memfd named "gyre-test-race", this
// shim first creates the file GYRE_TEST_RACE_MARK (the test's signal that the daemon is
// inside its checks), then waits, up to 10 s, until the test has truncated the memfd to 0
// bytes and sealed it against shrinking, and only then answers. A daemon that read the size before
// the seals has the old size by then and maps memory that is gone; one that reads the seals first
// sees the truncation. Every other fcntl passes straight through.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using FcntlFn = int (*)(int, int, ...);

bool IsRaceMemfd(int fd) {
  char link[64];
  char target[256] = {};
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  return n > 0 && std::strstr(target, "gyre-test-race") != nullptr;
}

void HoldUntilTruncatedAndSealed(int fd, FcntlFn real) {
  const char* mark = std::getenv("GYRE_TEST_RACE_MARK");
  if (mark != nullptr) {
    const int m = ::open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (m >= 0) ::close(m);
  }
  for (int i = 0; i < 1000; ++i) {
    struct stat st {};
    const int seals = real(fd, F_GET_SEALS, nullptr);
    if (::fstat(fd, &st) != 0 || seals < 0 || (st.st_size == 0 && (seals & F_SEAL_SHRINK) != 0)) {
      return;
    }
    const timespec ten_ms{0, 10 * 1000 * 1000};
    ::nanosleep(&ten_ms, nullptr);
  }
}

int Forward(const char* name, int fd, int cmd, void* arg) {
  auto real = reinterpret_cast<FcntlFn>(::dlsym(RTLD_NEXT, name));
  if (cmd == F_GET_SEALS && IsRaceMemfd(fd)) HoldUntilTruncatedAndSealed(fd, real);
  return real(fd, cmd, arg);
}

}  // namespace

// Every fcntl command takes at most one argument, an int or a pointer: forwarded as a
// pointer-sized value, as the C library itself does.
extern "C" int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return Forward("fcntl", fd, cmd, arg);
}

extern "C" int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return Forward("fcntl64", fd, cmd, arg);
}
