// Faults in the driver's epoll set, for tcp_driver_test (tests/tcp/CMakeLists.txt). The test
// binary's own epoll_ctl and epoll_pwait2 stand in for the C library's, for the transport and
// Asio alike; they pass every call on to the kernel until SetEpollFault turns a fault on:
//   kRefuseAdds: epoll_ctl refuses to add a descriptor whose datum is a peer's rank (the
//     driver's entries; Asio's carry pointers), as a kernel over max_user_watches does;
//   kNoPwait2: epoll_pwait2 fails with ENOSYS, as on kernels before 5.11.
#pragma once

namespace gyre::testing {

enum class EpollFault { kNone, kRefuseAdds, kNoPwait2 };

// Before the first transport of the process starts: the fault holds for all of them.
void SetEpollFault(EpollFault fault);

// The epoll_ctl additions refused so far (kRefuseAdds).
int EpollAddsRefused();
// The epoll_pwait2 calls answered with ENOSYS so far (kNoPwait2).
int EpollPwait2Refused();

}  // namespace gyre::testing
