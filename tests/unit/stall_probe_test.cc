// The stall probe's rounds of questions run beside its loop, not in it: the loop also ticks
// the freeze watchdog, and a round that waits on a rank that does not answer (a second per
// query) must not read as this process having stopped running.
#include "core/job/stall_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/auth/secret.h"
#include "core/job/bootstrap.h"
#include "core/transport/loopback.h"

namespace gyre::job {
namespace {

// A listener that never accepts: the kernel completes each connection, nobody answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof(a);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& address() const { return address_; }
  // Connections made to it so far (taken off its queue and closed).
  int Connections() {
    ::fcntl(fd_, F_SETFL, O_NONBLOCK);
    int n = 0;
    for (int c; (c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; ++n) ::close(c);
    return n;
  }

 private:
  int fd_ = -1;
  std::string address_;
};

// Rank 0's broadcast from rank 1, which never calls: quiet until End() aborts it.
class QuietCall {
 public:
  explicit QuietCall(Communicator* comm)
      : comm_(comm), thread_([this] {
          int32_t v = 0;
          status_ = comm_->Broadcast(&v, &v, 1, DataType::kInt32, /*root=*/1);
        }) {}
  // Aborts the call (or, not begun yet, the call to come) and returns how it ended.
  Status End() {
    const OpSnapshot snap = comm_->monitor()->Snapshot();
    comm_->monitor()->Abort(snap.in_op ? snap.seq : snap.last_started_seq + 1,
                            AbortedError("the test is over"));
    thread_.join();
    return status_;
  }

 private:
  Communicator* comm_;
  Status status_;
  std::thread thread_;
};

TEST(StallProbeTest, ARoundWaitingOnASilentRankIsNotTakenForAFreeze) {
  SilentListener silent;
  ASSERT_FALSE(silent.address().empty());
  auto transports = LoopbackHub::CreateWorld(2);
  CommOptions options;
  options.timeout = Seconds(10);  // each query of a round then waits up to 1 s
  Communicator comm(std::move(transports[0]), options);
  auto dir = std::make_shared<JobDirectory>();
  dir->job_id = "stall-probe";
  dir->credentials.secret = *auth::Secret::Generate();
  dir->credentials.job_id = "stall-probe";
  dir->credentials.rank = 0;
  dir->control_addresses = {"127.0.0.1:1", silent.address()};
  StallProbe probe(&comm, dir, options.timeout);
  probe.Start();
  const TimePoint t0 = SteadyClock::Get()->Now();
  QuietCall call(&comm);  // rounds begin after 0.5 s of it
  std::this_thread::sleep_for(Millis(3500));
  const Duration frozen = comm.monitor()->FrozenSince(t0, SteadyClock::Get()->Now());
  const Status ended = call.End();
  probe.Stop();
  EXPECT_EQ(ended.code(), StatusCode::kAborted) << ended;
  EXPECT_GE(silent.Connections(), 2) << "the rounds did not ask the silent rank";
  EXPECT_EQ(frozen, Duration::zero())
      << "the rounds read as a freeze of " << FormatDuration(frozen);
}

// Beyond kMaxProbedWorld ranks a round would be one of p^2 queries made at once by every
// quiet rank: none is made, and the progress timeout judges.
TEST(StallProbeTest, ALargeWorldIsNotProbed) {
  SilentListener silent;
  ASSERT_FALSE(silent.address().empty());
  const int p = StallProbe::kMaxProbedWorld + 1;
  auto transports = LoopbackHub::CreateWorld(p);
  CommOptions options;
  options.timeout = Seconds(10);
  Communicator comm(std::move(transports[0]), options);
  auto dir = std::make_shared<JobDirectory>();
  dir->credentials.secret = *auth::Secret::Generate();
  dir->credentials.job_id = "stall-probe";
  dir->control_addresses.assign(p, silent.address());
  StallProbe probe(&comm, dir, options.timeout);
  probe.Start();
  QuietCall call(&comm);
  std::this_thread::sleep_for(Millis(1500));  // three rounds would have begun by now
  const Status ended = call.End();
  probe.Stop();
  EXPECT_EQ(ended.code(), StatusCode::kAborted) << ended;
  EXPECT_EQ(silent.Connections(), 0);
}

}  // namespace
}  // namespace gyre::job
