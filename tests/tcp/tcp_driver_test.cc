// The TCP transport's driver lease (core/transport/driven.h): the waiting thread moves the
// bytes, connections go back to the io thread when nobody drives, the lease is exclusive,
// Wake and CancelOperation end a Drive, a peer that leaves is still named, and connections
// to this host get the configured congestion control, and peers the driver does not wait for
// are read while it sleeps.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/tcp/socket_options.h"
#include "core/transport/tcp/tcp_transport.h"
#include "tests/tcp/epoll_faults.h"
#include "tests/tcp/tcp_test_util.h"
#include "tests/tcp/tcp_world.h"

namespace gyre {
namespace {

// One binary, run four ways (tests/tcp/CMakeLists.txt) as GYRE_DRIVER_TEST_MODE says:
//   unset or "threshold": small worlds, whose driver sleeps in poll;
//   "epoll": every test's small world with the epoll sleep larger worlds use
//     (TcpTransportOptions::driver_epoll_above_ranks = 0);
//   "epoll_refused": the same with the epoll set refusing the driver's connections;
//   "no_epoll_pwait2": the same on a kernel without epoll_pwait2 (tests/tcp/epoll_faults.h).
enum class Mode { kThreshold, kEpoll, kEpollRefused, kNoEpollPwait2, kUnknown };

Mode DriverMode() {
  static const Mode mode = [] {
    const char* env = std::getenv("GYRE_DRIVER_TEST_MODE");
    const std::string m = env == nullptr ? "" : env;
    if (m.empty() || m == "threshold") return Mode::kThreshold;
    if (m == "epoll") return Mode::kEpoll;
    if (m == "epoll_refused") return Mode::kEpollRefused;
    if (m == "no_epoll_pwait2") return Mode::kNoEpollPwait2;
    return Mode::kUnknown;
  }();
  return mode;
}

// Sets the mode's epoll fault before any test makes a transport. A mode it does not know ends
// the run as failed: a misspelt one would otherwise test the default way, unnoticed (and a
// skip or an assertion here would leave the run looking skipped).
class DriverModeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (DriverMode() == Mode::kUnknown) {
      std::fprintf(stderr,
                   "GYRE_DRIVER_TEST_MODE=%s is not threshold, epoll, epoll_refused or "
                   "no_epoll_pwait2\n",
                   std::getenv("GYRE_DRIVER_TEST_MODE"));
      std::exit(2);
    }
    if (DriverMode() == Mode::kEpollRefused) {
      testing::SetEpollFault(testing::EpollFault::kRefuseAdds);
    }
    if (DriverMode() == Mode::kNoEpollPwait2) {
      testing::SetEpollFault(testing::EpollFault::kNoPwait2);
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kDriverModeEnvironment =
    ::testing::AddGlobalTestEnvironment(new DriverModeEnvironment);

std::vector<std::unique_ptr<TcpTransport>> World(int n, TcpTransportOptions options = {}) {
  options.job_id = "tcp-driver-test";
  if (DriverMode() != Mode::kThreshold) options.driver_epoll_above_ranks = 0;
  auto world = MakeTcpTransports(n, options);
  EXPECT_TRUE(world.ok()) << world.status();
  return world.ok() ? std::move(world).value() : std::vector<std::unique_ptr<TcpTransport>>();
}

// Drives `t` until `waiter` has its status or `timeout` passes, in calls of up to `turn`.
Status DriveUntilDone(TcpTransport* t, DoneWaiter& waiter, Duration timeout = Seconds(10),
                      Duration turn = Millis(100)) {
  const Clock& clock = *SteadyClock::Get();
  const Deadline deadline = Deadline::After(clock, timeout);
  while (!waiter.Ready() && !deadline.Expired(clock)) {
    t->Drive(std::min(deadline.when(), clock.Now() + turn));
  }
  return waiter.Wait(Millis(1));
}

// Connects every other rank to rank 0 with one driven message each, so that rank 0's driver
// reads their connections from then on (the io thread no longer watches them).
void ConnectToDriver(std::vector<std::unique_ptr<TcpTransport>>& w) {
  for (int from = 1; from < static_cast<int>(w.size()); ++from) {
    std::vector<uint8_t> got(8);
    DoneWaiter recv, send;
    std::vector<uint8_t> data = Pattern(8, from);
    ASSERT_TRUE(w[0]->AcquireDriver(got.size()));
    w[0]->Recv(from, Header(from, 1), got.data(), got.size(), recv.Callback());
    w[from]->Send(0, Header(from, 1), data.data(), data.size(), send.Callback());
    ASSERT_TRUE(DriveUntilDone(w[0].get(), recv).ok());
    w[0]->ReleaseDriver();
    ASSERT_TRUE(send.Wait().ok());
  }
}

// One message from rank 0 to rank 1 under (seq, tag), received with rank 1 driving.
void DrivenExchange(std::vector<std::unique_ptr<TcpTransport>>& w, uint64_t seq, size_t bytes) {
  std::vector<uint8_t> data = Pattern(bytes, static_cast<uint32_t>(seq));
  std::vector<uint8_t> got(bytes);
  ASSERT_TRUE(w[1]->AcquireDriver(bytes));
  DoneWaiter recv;
  w[1]->Recv(0, Header(seq, 7), got.data(), got.size(), recv.Callback());
  DoneWaiter send;
  w[0]->Send(1, Header(seq, 7), data.data(), data.size(), send.Callback());
  EXPECT_TRUE(DriveUntilDone(w[1].get(), recv).ok());
  w[1]->ReleaseDriver();
  EXPECT_TRUE(send.Wait().ok());
  EXPECT_EQ(got, data);
}

TEST(TcpDriverTest, DriverReceivesSmallAndMediumMessages) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  for (uint64_t seq = 1; seq <= 20; ++seq) DrivenExchange(w, seq, seq % 2 ? 4 : 300000);
  EXPECT_EQ(w[1]->BytesReceivedFrom(0), 10u * 4 + 10u * 300000);
}

TEST(TcpDriverTest, ReceiveWithoutALeaseAfterDrivenOnesIsServedByTheIoThread) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  for (uint64_t seq = 1; seq <= 3; ++seq) DrivenExchange(w, seq, 64);  // parks the connection
  std::vector<uint8_t> data = Pattern(1000, 9);
  std::vector<uint8_t> got(data.size());
  DoneWaiter recv;
  w[1]->Recv(0, Header(9, 1), got.data(), got.size(), recv.Callback());
  DoneWaiter send;
  w[0]->Send(1, Header(9, 1), data.data(), data.size(), send.Callback());
  EXPECT_TRUE(recv.Wait(Seconds(10)).ok());  // nobody drives: the io thread must read it
  EXPECT_EQ(got, data);
  DrivenExchange(w, 10, 64);  // and the driver can take it back
}

// Small reads go through a per-connection stage, so one recv can take several frames. A
// burst of frames of every size around the stage's 16 KiB, all in the socket before any
// receive is posted, must come out whole and in order: the first half to a driver that stops
// at frame boundaries, the rest to the io thread.
TEST(TcpDriverTest, BurstOfFramesIsHandedOutWholeToDriverAndIoThread) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  const std::vector<size_t> sizes = {0,     1,     4, 100,   4096, 16383,  16384,
                                     16385, 40000, 3, 65536, 7,    200000, 12};
  std::vector<std::vector<uint8_t>> data, got;
  std::vector<std::unique_ptr<DoneWaiter>> sends;
  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(Pattern(sizes[i], static_cast<uint32_t>(i + 1)));
    got.emplace_back(sizes[i]);
    total += sizes[i];
    sends.push_back(std::make_unique<DoneWaiter>());
    w[0]->Send(1, Header(100 + i, 3), data[i].data(), data[i].size(), sends[i]->Callback());
  }
  for (auto& s : sends) ASSERT_TRUE(s->Wait().ok());
  ASSERT_TRUE(WaitUntil([&] { return w[1]->BytesReceivedFrom(0) == total; }));
  const size_t half = sizes.size() / 2;
  for (size_t i = 0; i < half; ++i) {
    ASSERT_TRUE(w[1]->AcquireDriver(sizes[i]));
    DoneWaiter recv;
    w[1]->Recv(0, Header(100 + i, 3), got[i].data(), got[i].size(), recv.Callback());
    EXPECT_TRUE(DriveUntilDone(w[1].get(), recv).ok()) << i;
    w[1]->ReleaseDriver();
  }
  for (size_t i = half; i < sizes.size(); ++i) {
    DoneWaiter recv;
    w[1]->Recv(0, Header(100 + i, 3), got[i].data(), got[i].size(), recv.Callback());
    EXPECT_TRUE(recv.Wait(Seconds(10)).ok()) << i;
  }
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(got[i], data[i]) << "frame " << i;
  // Sent after the burst, with the receive posted first: the stage is empty again.
  DrivenExchange(w, 500, 64);
}

// The congestion control of every socket of this process that `keep` accepts, by fd.
std::map<int, std::string> CongestionControls(const std::function<bool(int)>& keep) {
  std::map<int, std::string> found;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir) || !keep(fd)) continue;
    auto cc = CongestionControl(fd);
    if (cc.ok()) found[fd] = *cc;
  }
  closedir(dir);
  return found;
}

// Every connected TCP socket whose peer is on this host (the transports' connections: a test
// process has no others).
std::map<int, std::string> SameHostCongestionControls() {
  return CongestionControls(PeerOnThisHost);
}

// Every listening TCP socket.
std::map<int, std::string> ListenerCongestionControls() {
  return CongestionControls([](int fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0;
  });
}

std::string SystemCongestionControl() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  f >> name;
  return name;
}

bool KernelHas(const std::string& control) {
  std::ifstream f("/proc/sys/net/ipv4/tcp_available_congestion_control");
  std::string name;
  while (f >> name) {
    if (name == control) return true;
  }
  return false;
}

TEST(TcpDriverTest, SameHostConnectionsUseTheConfiguredCongestionControl) {
  {
    auto w = World(2);
    ASSERT_EQ(w.size(), 2u);
    DrivenExchange(w, 1, 64);
    auto ccs = SameHostCongestionControls();
    ASSERT_GE(ccs.size(), 2u);  // the connection 0 -> 1, both ends in this process
    // Two ranks on this host: Reno where each has a CPU, else the default.
    const std::string want =
        std::thread::hardware_concurrency() >= 2 ? "reno" : SystemCongestionControl();
    for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, want) << "fd " << fd;
  }
  TcpTransportOptions keep;
  keep.same_host_congestion_control = "";
  auto w = World(2, keep);
  ASSERT_EQ(w.size(), 2u);
  DrivenExchange(w, 1, 64);
  auto ccs = SameHostCongestionControls();
  ASSERT_GE(ccs.size(), 2u);
  for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, SystemCongestionControl()) << "fd " << fd;
}

TEST(TcpDriverTest, AnUnknownCongestionControlKeepsTheDefaultAndTheConnectionWorks) {
  TcpTransportOptions options;
  options.same_host_congestion_control = "no-such-algorithm";
  auto w = World(2, options);
  ASSERT_EQ(w.size(), 2u);
  DrivenExchange(w, 1, 300000);  // a warning is logged; the bytes still arrive whole
  auto ccs = SameHostCongestionControls();
  ASSERT_GE(ccs.size(), 2u);
  for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, SystemCongestionControl()) << "fd " << fd;
}

// With more ranks than CPUs, same-host connections run shared_cpu_congestion_control
// (cubic) from their handshake on: the listening sockets already run it, so accepted
// connections inherit it rather than switching after BBR (the system's here) started.
TEST(TcpDriverTest, OversubscribedHostsUseTheSharedCpuControlFromTheHandshake) {
  if (!KernelHas("cubic")) GTEST_SKIP() << "this kernel has no cubic";
  const int n = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  {
    auto w = World(n);
    ASSERT_EQ(w.size(), static_cast<size_t>(n));
    auto listeners = ListenerCongestionControls();
    ASSERT_GE(listeners.size(), static_cast<size_t>(n));
    for (const auto& [fd, cc] : listeners) EXPECT_EQ(cc, "cubic") << "listening fd " << fd;
    DrivenExchange(w, 1, 64);
    auto ccs = SameHostCongestionControls();
    ASSERT_GE(ccs.size(), 2u);
    for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, "cubic") << "fd " << fd;
  }
  TcpTransportOptions keep;
  keep.shared_cpu_congestion_control = "";
  auto w = World(n, keep);
  ASSERT_EQ(w.size(), static_cast<size_t>(n));
  for (const auto& [fd, cc] : ListenerCongestionControls()) {
    EXPECT_EQ(cc, SystemCongestionControl()) << "listening fd " << fd;
  }
  DrivenExchange(w, 1, 64);
  auto ccs = SameHostCongestionControls();
  ASSERT_GE(ccs.size(), 2u);
  for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, SystemCongestionControl()) << "fd " << fd;
}

// Where each rank has a CPU, the listening sockets run same_host_congestion_control.
TEST(TcpDriverTest, ListenersRunTheSameHostControlWhereRanksHaveCpus) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one CPU: two ranks share it";
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  auto listeners = ListenerCongestionControls();
  ASSERT_GE(listeners.size(), 2u);
  for (const auto& [fd, cc] : listeners) EXPECT_EQ(cc, "reno") << "listening fd " << fd;
}

// With more ranks than CPUs, an operation that sends at least bulk_send_bytes switches the
// sending connections to the bulk congestion control, one of 64 KiB up to that switches
// them back to the shared-CPU one, a smaller one leaves them as they are, and messages pass
// whole throughout.
TEST(TcpDriverTest, OversubscribedHostsSwitchToTheBulkControlForLargeOperations) {
  if (!KernelHas("cubic")) GTEST_SKIP() << "this kernel has no cubic";
  const std::string system = "cubic";  // TcpTransportOptions::shared_cpu_congestion_control
  const int n = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  auto w = World(n);
  ASSERT_EQ(w.size(), static_cast<size_t>(n));
  // A message each way on every pair (every connection is up at both ends), or only
  // between ranks 0 and 1.
  uint64_t seq = 1;
  auto exchange = [&](size_t bytes, bool all_pairs) {
    for (int a = 0; a < (all_pairs ? n : 2); ++a) {
      for (int b = 0; b < (all_pairs ? n : 2); ++b) {
        if (a == b) continue;
        std::vector<uint8_t> data = Pattern(bytes, static_cast<uint32_t>(seq));
        std::vector<uint8_t> got(bytes);
        DoneWaiter recv, send;
        w[b]->Recv(a, Header(seq, 2), got.data(), got.size(), recv.Callback());
        w[a]->Send(b, Header(seq, 2), data.data(), data.size(), send.Callback());
        ASSERT_TRUE(recv.Wait().ok()) << a << " -> " << b;
        ASSERT_TRUE(send.Wait().ok());
        ASSERT_EQ(got, data) << a << " -> " << b;
        ++seq;
      }
    }
  };
  auto all_run = [&](const std::string& want) {
    auto ccs = SameHostCongestionControls();
    EXPECT_GE(ccs.size(), static_cast<size_t>(n * (n - 1)));  // both ends of every pair
    for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, want) << "fd " << fd;
  };
  const size_t bulk = TcpTransportOptions{}.bulk_send_bytes;
  exchange(64, true);
  all_run(system);
  for (auto& t : w) t->ExpectSend(bulk);
  all_run("reno");
  exchange(size_t{3} << 20, false);
  for (auto& t : w) t->ExpectSend(1000);  // a barrier, say: stays
  all_run("reno");
  for (auto& t : w) t->ExpectSend(bulk - 1);
  all_run(system);
  exchange(100000, false);
  for (auto& t : w) t->ExpectSend(100);
  all_run(system);
}

// With more ranks than CPUs and `bulk` as the bulk control, a 3 MiB exchange announced as a
// 4 MiB operation arrives whole, and every same-host connection is on cubic after it.
void ExpectBulkOperationLeavesCubic(const std::string& bulk) {
  if (!KernelHas("cubic")) GTEST_SKIP() << "this kernel has no cubic";
  TcpTransportOptions options;
  options.bulk_congestion_control = bulk;
  const int n = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  auto w = World(n, options);
  ASSERT_EQ(w.size(), static_cast<size_t>(n));
  DrivenExchange(w, 1, 64);
  for (auto& t : w) t->ExpectSend(size_t{4} << 20);
  DrivenExchange(w, 2, size_t{3} << 20);
  auto ccs = SameHostCongestionControls();
  ASSERT_GE(ccs.size(), 2u);
  for (const auto& [fd, cc] : ccs) EXPECT_EQ(cc, "cubic") << "fd " << fd;
}

// A bulk control the kernel does not have: the switch is refused (a warning), every
// connection keeps the control it has (the shared-CPU one), and a large message still
// arrives whole.
TEST(TcpDriverTest, AnUnknownBulkControlKeepsTheSharedCpuOneAndTheConnectionWorks) {
  ExpectBulkOperationLeavesCubic("no-such-algorithm");
}

// No bulk control: a large operation switches nothing, and every connection keeps the
// control of its handshake (the shared-CPU one).
TEST(TcpDriverTest, AnEmptyBulkControlSwitchesNothing) { ExpectBulkOperationLeavesCubic(""); }

TEST(TcpDriverTest, LeaseIsExclusiveAndLargeMessagesAreDeclined) {
  TcpTransportOptions options;
  options.driver_max_message_bytes = size_t{1} << 20;
  auto w = World(2, options);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_FALSE(w[0]->AcquireDriver(size_t{8} << 20));
  EXPECT_TRUE(w[0]->AcquireDriver(size_t{1} << 20));
  w[0]->ReleaseDriver();
  ASSERT_TRUE(w[0]->AcquireDriver(1024));
  bool other = true;
  std::thread([&] { other = w[0]->AcquireDriver(1024); }).join();
  EXPECT_FALSE(other);
  w[0]->ReleaseDriver();
  std::thread([&] {
    other = w[0]->AcquireDriver(1024);
    if (other) w[0]->ReleaseDriver();
  }).join();
  EXPECT_TRUE(other);
}

TEST(TcpDriverTest, WakeEndsADriveEarly) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  ASSERT_TRUE(w[1]->AcquireDriver(64));
  const Clock& clock = *SteadyClock::Get();
  std::thread waker([&] {
    std::this_thread::sleep_for(Millis(50));
    w[1]->Wake();
  });
  const TimePoint start = clock.Now();
  w[1]->Drive(start + Seconds(20));
  const Duration took = clock.Now() - start;
  waker.join();
  w[1]->ReleaseDriver();
  EXPECT_LT(took, Seconds(5)) << FormatDuration(took);
}

TEST(TcpDriverTest, CancelDuringALeaseCompletesTheReceive) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  DrivenExchange(w, 1, 64);
  ASSERT_TRUE(w[1]->AcquireDriver(64));
  std::vector<uint8_t> got(64);
  DoneWaiter recv;
  w[1]->Recv(0, Header(2, 1), got.data(), got.size(), recv.Callback());
  std::thread canceller([&] {
    std::this_thread::sleep_for(Millis(20));
    w[1]->CancelOperation(2, AbortedError("test cancels seq 2"));
  });
  Status s = DriveUntilDone(w[1].get(), recv, Seconds(10));
  canceller.join();
  w[1]->ReleaseDriver();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("test cancels seq 2"), std::string::npos) << s;
}

TEST(TcpDriverTest, PeerThatLeavesIsNamedToTheDriver) {
  auto w = World(2);
  ASSERT_EQ(w.size(), 2u);
  const std::string address = w[0]->address();
  DrivenExchange(w, 1, 64);
  w[0]->Shutdown();
  ASSERT_TRUE(w[1]->AcquireDriver(64));
  std::vector<uint8_t> got(64);
  DoneWaiter recv;
  w[1]->Recv(0, Header(2, 1), got.data(), got.size(), recv.Callback());
  Status s = DriveUntilDone(w[1].get(), recv, Seconds(10));
  w[1]->ReleaseDriver();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s;
  EXPECT_NE(s.message().find(address), std::string::npos) << s;
}

// A driver waiting on one peer sleeps on every connection: frames from a peer it is not
// waiting for (small ones and one larger than the kernel buffers) that arrive during the sleep
// are read then and wait whole for their receives, and that peer leaving during a later
// sleep neither ends the wait for the first peer nor is forgotten.
TEST(TcpDriverTest, PeersTheDriverDoesNotWaitForAreReadWhileItSleeps) {
  auto w = World(3);
  ASSERT_EQ(w.size(), 3u);
  const std::string address2 = w[2]->address();
  ASSERT_NO_FATAL_FAILURE(ConnectToDriver(w));
  // 16 MiB is more than the kernel holds for a connection: its sender finishes only if the
  // sleeping driver reads it.
  const std::vector<size_t> early_sizes = {4, 20000, size_t{16} << 20, 1};
  std::vector<std::vector<uint8_t>> early;
  for (size_t i = 0; i < early_sizes.size(); ++i) {
    early.push_back(Pattern(early_sizes[i], static_cast<uint32_t>(40 + i)));
  }
  std::vector<uint8_t> awaited = Pattern(64, 10);
  std::vector<uint8_t> got(awaited.size());
  std::vector<std::unique_ptr<DoneWaiter>> sends;
  for (size_t i = 0; i <= early.size(); ++i) sends.push_back(std::make_unique<DoneWaiter>());
  size_t early_total = 0;
  for (const auto& e : early) early_total += e.size();

  ASSERT_TRUE(w[0]->AcquireDriver(awaited.size()));
  DoneWaiter recv;
  w[0]->Recv(1, Header(10, 1), got.data(), got.size(), recv.Callback());
  std::thread senders([&] {
    std::this_thread::sleep_for(Millis(50));  // the driver is asleep by now
    for (size_t i = 0; i < early.size(); ++i) {
      w[2]->Send(0, Header(20 + i, 1), early[i].data(), early[i].size(), sends[i]->Callback());
    }
    for (size_t i = 0; i < early.size(); ++i) (void)sends[i]->Wait(Seconds(5));
    // A send is done once its bytes are in this side's kernel: rank 1 goes when rank 0 has
    // read them all (or after 5 s, when the check below fails).
    (void)WaitUntil([&] { return w[0]->BytesReceivedFrom(2) == 8 + early_total; }, Seconds(5));
    w[1]->Send(0, Header(10, 1), awaited.data(), awaited.size(), sends.back()->Callback());
  });
  // One call to Drive: it does not return in between to spin (and poll every peer) again.
  Status s = DriveUntilDone(w[0].get(), recv, Seconds(10), Seconds(10));
  senders.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, awaited);
  for (auto& send : sends) EXPECT_TRUE(send->Wait().ok());
  // Rank 2's frames are all here before their receives are posted.
  EXPECT_EQ(w[0]->BytesReceivedFrom(2), 8 + early_total);
  for (size_t i = 0; i < early.size(); ++i) {
    std::vector<uint8_t> got_early(early[i].size());
    DoneWaiter r;
    w[0]->Recv(2, Header(20 + i, 1), got_early.data(), got_early.size(), r.Callback());
    ASSERT_TRUE(DriveUntilDone(w[0].get(), r).ok()) << i;
    EXPECT_EQ(got_early, early[i]) << "frame " << i;
  }

  // Rank 2 leaves while the driver sleeps waiting for rank 1, which then still arrives.
  DoneWaiter recv2;
  w[0]->Recv(1, Header(11, 1), got.data(), got.size(), recv2.Callback());
  DoneWaiter send2;
  std::thread leaver([&] {
    std::this_thread::sleep_for(Millis(50));
    w[2]->Shutdown();
    std::this_thread::sleep_for(Millis(50));
    w[1]->Send(0, Header(11, 1), awaited.data(), awaited.size(), send2.Callback());
  });
  s = DriveUntilDone(w[0].get(), recv2, Seconds(10), Seconds(10));
  leaver.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(send2.Wait().ok());
  std::vector<uint8_t> never(8);
  DoneWaiter recv3;
  w[0]->Recv(2, Header(12, 1), never.data(), never.size(), recv3.Callback());
  s = DriveUntilDone(w[0].get(), recv3);
  w[0]->ReleaseDriver();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s;
  EXPECT_NE(s.message().find(address2), std::string::npos) << s;
}

// The driving thread's CPU time, in milliseconds, while `t` drives for `wait` or until
// `waiter` is ready.
double DrivingCpuMs(TcpTransport* t, DoneWaiter& waiter, Duration wait) {
  timespec before{}, after{};
  EXPECT_EQ(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &before), 0);
  const TimePoint until = SteadyClock::Get()->Now() + wait;
  while (SteadyClock::Get()->Now() < until && !waiter.Ready()) t->Drive(until);
  EXPECT_EQ(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &after), 0);
  return (after.tv_sec - before.tv_sec) * 1e3 + (after.tv_nsec - before.tv_nsec) / 1e6;
}

// Three ranks; rank 0 holds the driver lease and waits for 8 bytes from rank 1 under
// (30, 1).
struct Awaiting {
  std::vector<std::unique_ptr<TcpTransport>> w;
  std::vector<uint8_t> got = std::vector<uint8_t>(8);
  DoneWaiter recv;
};

void StartAwaiting(Awaiting* a) {
  a->w = World(3);
  ASSERT_EQ(a->w.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(ConnectToDriver(a->w));
  ASSERT_TRUE(a->w[0]->AcquireDriver(a->got.size()));
  a->w[0]->Recv(1, Header(30, 1), a->got.data(), a->got.size(), a->recv.Callback());
}

// Rank 1 sends what rank 0 waits for; rank 0's driver receives it and lets the lease go.
void ExpectAwaitedArrives(Awaiting& a) {
  std::vector<uint8_t> data = Pattern(a.got.size(), 30);
  DoneWaiter send;
  a.w[1]->Send(0, Header(30, 1), data.data(), data.size(), send.Callback());
  EXPECT_TRUE(DriveUntilDone(a.w[0].get(), a.recv).ok());
  a.w[0]->ReleaseDriver();
  EXPECT_EQ(a.got, data);
}

// A peer that leaves is read to its end once and then no longer watched: the driver waiting
// for another peer sleeps rather than waking again and again on the closed connection.
// Measured as the driving thread's CPU time over a 400 ms wait: a driver woken without end
// uses all of it (checked: 400 ms with the epoll sleep's reads taken out); one that sleeps,
// a few milliseconds of spinning.
TEST(TcpDriverTest, APeerThatLeftDoesNotKeepTheDriverAwake) {
  Awaiting a;
  ASSERT_NO_FATAL_FAILURE(StartAwaiting(&a));
  a.w[2]->Shutdown();
  // Rank 0 reads rank 2's end of stream within its first wait.
  a.w[0]->Drive(SteadyClock::Get()->Now() + Millis(100));
  const double cpu_ms = DrivingCpuMs(a.w[0].get(), a.recv, Millis(400));
  EXPECT_LT(cpu_ms, 150.0) << "the driver stayed awake for " << cpu_ms << " ms of 400";
  EXPECT_FALSE(a.recv.Ready());
  // Rank 1 is still heard.
  ExpectAwaitedArrives(a);
}

// A message the driver waits for is handed out before it reads on in an early one (a
// message whose receive is not posted): a rank still in one operation must not copy the
// next operation's bulk before it sees the message that ends this one.
TEST(TcpDriverTest, AnAwaitedMessageIsHandedOutBeforeAnEarlyOneIsReadOn) {
  auto w = World(3);
  ASSERT_EQ(w.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(ConnectToDriver(w));
  const Clock& clock = *SteadyClock::Get();
  // Rank 2 streams a message rank 0 has no receive for; a short Drive starts reading it, so
  // the driver stands in the middle of its frame.
  const std::vector<uint8_t> early = Pattern(size_t{64} << 20, 77);
  DoneWaiter early_send;
  w[2]->Send(0, Header(30, 1), early.data(), early.size(), early_send.Callback());
  std::vector<uint8_t> got(64);
  DoneWaiter recv;
  ASSERT_TRUE(w[0]->AcquireDriver(got.size()));
  w[0]->Recv(1, Header(20, 1), got.data(), got.size(), recv.Callback());
  ASSERT_TRUE(WaitUntil([&] {
    w[0]->Drive(clock.Now() + Millis(5));
    return w[0]->BytesReceivedFrom(2) > 8;
  }));
  // The awaited message arrives, and the early sender fills the socket meanwhile.
  const std::vector<uint8_t> awaited = Pattern(got.size(), 20);
  DoneWaiter send;
  w[1]->Send(0, Header(20, 1), awaited.data(), awaited.size(), send.Callback());
  ASSERT_TRUE(send.Wait().ok());
  std::this_thread::sleep_for(Millis(50));
  const uint64_t before = w[0]->BytesReceivedFrom(2);
  Status s = DriveUntilDone(w[0].get(), recv, Seconds(10), Seconds(10));
  const uint64_t read_meanwhile = w[0]->BytesReceivedFrom(2) - before;
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, awaited);
  // At most one turn's read of the early message (1 MiB) before the awaited one is out.
  EXPECT_LE(read_meanwhile, uint64_t{1} << 20);
  // The early message is whole once its receive is posted.
  std::vector<uint8_t> got_early(early.size());
  DoneWaiter early_recv;
  w[0]->Recv(2, Header(30, 1), got_early.data(), got_early.size(), early_recv.Callback());
  EXPECT_TRUE(DriveUntilDone(w[0].get(), early_recv).ok());
  w[0]->ReleaseDriver();
  EXPECT_TRUE(early_send.Wait().ok());
  EXPECT_TRUE(got_early == early);
}

// A connection the kernel will not add to the epoll set is polled with the rest, and is not
// offered to the set again on every turn of every wait (a syscall each, per connection).
TEST(TcpDriverTest, AConnectionTheEpollSetRefusesIsOfferedOnce) {
  if (DriverMode() != Mode::kEpollRefused)
    GTEST_SKIP() << "runs with GYRE_DRIVER_TEST_MODE=epoll_refused";
  const int before = testing::EpollAddsRefused();  // the binary's earlier tests' refusals
  auto w = World(3);
  ASSERT_EQ(w.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(ConnectToDriver(w));
  for (uint64_t seq = 2; seq <= 40; ++seq) DrivenExchange(w, seq, 4);
  // At most one refusal per connection of each rank: 3 ranks, at most 2 connections to each
  // of 2 peers (one each way where both connected at once).
  const int refused = testing::EpollAddsRefused() - before;
  EXPECT_GT(refused, 0);
  EXPECT_LE(refused, 3 * 2 * 2);
}

// Without epoll_pwait2 the driver sleeps in epoll_wait (millisecond timeouts), and a message
// still ends the sleep.
TEST(TcpDriverTest, WithoutEpollPwait2TheDriverSleepsOnEpollWait) {
  if (DriverMode() != Mode::kNoEpollPwait2)
    GTEST_SKIP() << "runs with GYRE_DRIVER_TEST_MODE=no_epoll_pwait2";
  Awaiting a;
  ASSERT_NO_FATAL_FAILURE(StartAwaiting(&a));
  const double cpu_ms = DrivingCpuMs(a.w[0].get(), a.recv, Millis(400));
  EXPECT_LT(cpu_ms, 150.0) << "the driver stayed awake for " << cpu_ms << " ms of 400";
  EXPECT_GT(testing::EpollPwait2Refused(), 0);
  ExpectAwaitedArrives(a);
}

}  // namespace
}  // namespace gyre
