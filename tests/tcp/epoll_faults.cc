#include "tests/tcp/epoll_faults.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace {

std::atomic<gyre::testing::EpollFault> fault{gyre::testing::EpollFault::kNone};
std::atomic<int> adds_refused{0};
std::atomic<int> pwait2_refused{0};

}  // namespace

namespace gyre::testing {

void SetEpollFault(EpollFault f) { fault.store(f); }
int EpollAddsRefused() { return adds_refused.load(); }
int EpollPwait2Refused() { return pwait2_refused.load(); }

}  // namespace gyre::testing

extern "C" int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  // The driver's datum is a rank (or all ones for its wake-up descriptor); Asio's is an
  // object's address.
  if (fault.load(std::memory_order_relaxed) == gyre::testing::EpollFault::kRefuseAdds &&
      op == EPOLL_CTL_ADD && event != nullptr && event->data.u64 < (uint64_t{1} << 20)) {
    adds_refused.fetch_add(1);
    errno = ENOSPC;
    return -1;
  }
  return static_cast<int>(syscall(SYS_epoll_ctl, epfd, op, fd, event));
}

extern "C" int epoll_pwait2(int epfd, epoll_event* events, int maxevents, const timespec* timeout,
                            const sigset_t* sigmask) {
  if (fault.load(std::memory_order_relaxed) == gyre::testing::EpollFault::kNoPwait2) {
    pwait2_refused.fetch_add(1);
    errno = ENOSYS;
    return -1;
  }
  // The kernel's signal set is _NSIG bits, as the C library passes it.
  return static_cast<int>(
      syscall(SYS_epoll_pwait2, epfd, events, maxevents, timeout, sigmask, _NSIG / 8));
}
