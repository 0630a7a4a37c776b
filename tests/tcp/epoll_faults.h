// Faults in the driver's epoll set, for tcp_driver_test built with GYRE_EPOLL_FAULT
// (tests/tcp/CMakeLists.txt). The test binary's own epoll_ctl or epoll_pwait2 then stands in
// for the C library's, for the transport and Asio alike:
//   GYRE_EPOLL_FAULT == 1: epoll_ctl refuses to add a descriptor whose datum is a peer's rank
//     (the driver's entries; Asio's carry pointers), as a kernel over max_user_watches does;
//   GYRE_EPOLL_FAULT == 2: epoll_pwait2 fails with ENOSYS, as on kernels before 5.11.
#pragma once

namespace gyre::testing {

// The epoll_ctl additions refused so far (fault 1).
int EpollAddsRefused();
// The epoll_pwait2 calls answered with ENOSYS so far (fault 2).
int EpollPwait2Refused();

}  // namespace gyre::testing
