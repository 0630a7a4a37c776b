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

// Rank 0's view of a job "stall-probe" with a fresh secret; control addresses are the test's.
std::shared_ptr<JobDirectory> RankZeroDirectory() {
  auto dir = std::make_shared<JobDirectory>();
  dir->job_id = "stall-probe";
  dir->credentials.secret = *auth::Secret::Generate();
  dir->credentials.job_id = "stall-probe";
  dir->credentials.rank = 0;
  return dir;
}

TEST(StallProbeTest, ARoundWaitingOnASilentRankIsNotTakenForAFreeze) {
  SilentListener silent;
  ASSERT_FALSE(silent.address().empty());
  auto transports = LoopbackHub::CreateWorld(2);
  CommOptions options;
  options.timeout = Seconds(10);  // each query of a round then waits up to 1 s
  Communicator comm(std::move(transports[0]), options);
  auto dir = RankZeroDirectory();
  dir->control_addresses = {"127.0.0.1:1", silent.address()};
  StallProbe probe(&comm, dir, options.timeout);
  ASSERT_TRUE(probe.Start().ok());
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
  ASSERT_TRUE(probe.Start().ok());
  QuietCall call(&comm);
  std::this_thread::sleep_for(Millis(1500));  // three rounds would have begun by now
  const Status ended = call.End();
  probe.Stop();
  EXPECT_EQ(ended.code(), StatusCode::kAborted) << ended;
  EXPECT_EQ(silent.Connections(), 0);
}

// Waits until `comm` is inside an operation; returns its seq.
uint64_t QuietSeq(Communicator* comm) {
  while (true) {
    const OpSnapshot snap = comm->monitor()->Snapshot();
    if (snap.in_op) return snap.seq;
    std::this_thread::sleep_for(Millis(1));
  }
}

// With every rank quiet at once, one rank's round asks all the others: a rank asked by a
// round about the very operation it is quiet in counts that round as its own and does not
// ask everyone again (a 64-rank job made 64^2 queries per round, and its first barrier took
// 12.7 s instead of 5.4). A plain status query, or a round about another operation, does
// not count.
TEST(StallProbeTest, ARoundHeardFromAnotherRankStandsForThisRanksOwn) {
  SilentListener silent;  // rank 1: its answers never come
  ASSERT_FALSE(silent.address().empty());
  auto transports = LoopbackHub::CreateWorld(2);
  CommOptions options;
  options.timeout = Seconds(10);  // rounds after 0.5, 1, 2, ... s of quiet
  Communicator comm(std::move(transports[0]), options);
  auto dir = RankZeroDirectory();
  ControlServer control(&comm, RankInfo{0, ::getpid(), "here", "127.0.0.1:1"}, dir->credentials);
  ASSERT_TRUE(control.Start("127.0.0.1").ok());
  dir->control_addresses = {control.address(), silent.address()};
  StallProbe probe(&comm, dir, options.timeout, &control);
  ASSERT_TRUE(probe.Start().ok());
  auth::Credentials rank1 = dir->credentials;
  rank1.rank = 1;
  auto ask = [&](uint64_t probing_seq) {
    proto::ControlRequest q;
    q.mutable_status()->set_probing_seq(probing_seq);
    q.mutable_status()->set_from_rank(1);
    const QueryResult r = QueryControl(control.address(), 0, q, Seconds(5), rank1);
    EXPECT_EQ(r.reach, Reach::kAnswered) << r.error;
  };

  // Rank 1's round about this operation, heard before rank 0's own first round (0.5 s):
  // rank 0's next round is at 1 s, so there is none at 0.7 s.
  TimePoint t0 = SteadyClock::Get()->Now();
  QuietCall heard(&comm);
  ask(QuietSeq(&comm) + 1);
  EXPECT_EQ(control.heard_probes().count, 1u);
  EXPECT_NE(comm.recorder()->DumpJson(0).find("a stall probe from rank 1"), std::string::npos);
  std::this_thread::sleep_until(t0 + Millis(700));
  EXPECT_EQ(silent.Connections(), 0) << "asked everyone again after hearing a round";
  std::this_thread::sleep_until(t0 + Millis(1700));
  EXPECT_GE(silent.Connections(), 1) << "hearing a round turned this rank's rounds off";
  EXPECT_EQ(heard.End().code(), StatusCode::kAborted);

  // A status query (as gyrectl's) and a round about another operation are not this rank's.
  t0 = SteadyClock::Get()->Now();
  QuietCall other(&comm);
  const uint64_t seq = QuietSeq(&comm);
  ask(0);
  ask(seq + 2);
  std::this_thread::sleep_until(t0 + Millis(850));
  EXPECT_GE(silent.Connections(), 1) << "a query that was not a round about this operation "
                                        "held this rank's round back";
  EXPECT_EQ(other.End().code(), StatusCode::kAborted);
  probe.Stop();
  control.Stop();
  EXPECT_EQ(control.heard_probes().count, 2u);
}

// Ranks wait longer the higher their rank, so that with all quiet at once the lowest asks
// first and the others hear it before their own time comes.
TEST(StallProbeTest, HigherRanksWaitLonger) {
  const Duration d = Millis(500);
  EXPECT_EQ(StallProbe::Stretched(d, 0, 64), d);
  EXPECT_EQ(StallProbe::Stretched(d, 32, 64), Millis(750));
  EXPECT_LT(StallProbe::Stretched(d, 63, 64), 2 * d);
  EXPECT_GT(StallProbe::Stretched(d, 63, 64), StallProbe::Stretched(d, 62, 64));
  EXPECT_EQ(StallProbe::Stretched(d, 0, 1), d);
}

}  // namespace
}  // namespace gyre::job
