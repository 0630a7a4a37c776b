#include "tests/tcp/epoll_faults.h"

#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace {

std::atomic<int> adds_refused{0};
std::atomic<int> pwait2_refused{0};

}  // namespace

namespace gyre::testing {

int EpollAddsRefused() { return adds_refused.load(); }
int EpollPwait2Refused() { return pwait2_refused.load(); }

}  // namespace gyre::testing

#if GYRE_EPOLL_FAULT == 1
extern "C" int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  // The driver's datum is a rank (or all ones for its wake-up descriptor); Asio's is an
  // object's address.
  if (op == EPOLL_CTL_ADD && event != nullptr && event->data.u64 < (uint64_t{1} << 20)) {
    adds_refused.fetch_add(1);
    errno = ENOSPC;
    return -1;
  }
  return static_cast<int>(syscall(SYS_epoll_ctl, epfd, op, fd, event));
}
#elif GYRE_EPOLL_FAULT == 2
extern "C" int epoll_pwait2(int, epoll_event*, int, const timespec*, const sigset_t*) {
  pwait2_refused.fetch_add(1);
  errno = ENOSYS;
  return -1;
}
#endif
