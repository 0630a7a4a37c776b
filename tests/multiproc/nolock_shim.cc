// Preloaded into gyrerun by multiproc_test: a file system without locks (NFS without its lock
// daemon answers flock with ENOLCK) for gyrerun's run-folder lock only, gyrerun*.lock. Every
// other flock (the file store's) passes straight through.
#include <dlfcn.h>
#include <errno.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

bool IsRunFolderLock(int fd) {
  char link[64];
  char target[512] = {};
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  const char* base = std::strrchr(target, '/');
  base = base == nullptr ? target : base + 1;
  return std::strncmp(base, "gyrerun", 7) == 0 && std::strstr(base, ".lock") != nullptr;
}

}  // namespace

extern "C" int flock(int fd, int operation) {
  if (IsRunFolderLock(fd)) {
    errno = ENOLCK;
    return -1;
  }
  using FlockFn = int (*)(int, int);
  static FlockFn real = reinterpret_cast<FlockFn>(::dlsym(RTLD_NEXT, "flock"));
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(fd, operation);
}
