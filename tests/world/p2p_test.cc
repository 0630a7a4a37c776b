// Point-to-point Send/Recv over the loopback and TCP transports: exact data, MPI's
// per-(sender, receiver, tag) ordering, independence from the collectives' sequence, the
// byte and message counters, and clear errors for bad arguments, a mismatched size, a
// missing message and a closed peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <thread>

#include "core/transport/faulty.h"
#include "core/transport/loopback.h"
#include "tests/world/world.h"
#include "tests/world/world_factories.h"

namespace gyre::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> Pattern(int64_t n, int from, int to, int salt = 0) {
  std::vector<int32_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<int32_t>(i * 7 + from * 1000003 + to * 101 + salt * 31);
  }
  return v;
}

class P2PTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::unique_ptr<Communicator>> World(int p, Duration timeout = Seconds(10)) {
    CommOptions options;
    options.timeout = timeout;
    auto world = MakeWorld(FactoryByName(GetParam()), p, options);
    EXPECT_TRUE(world.ok()) << world.status();
    return world.ok() ? std::move(*world) : std::vector<std::unique_ptr<Communicator>>{};
  }
};

// Every rank sends to the next before receiving from the previous: sends do not wait for
// their receive, so the ring cannot deadlock; the data arrives bit for bit.
TEST_P(P2PTest, RingExchangeSendsFirstAndIsExact) {
  for (int p : {2, 3, 4}) {
    auto world = World(p);
    ASSERT_EQ(static_cast<int>(world.size()), p);
    const int64_t n = 3000;
    std::vector<std::vector<int32_t>> got(p, std::vector<int32_t>(n, -1));
    auto st = RunOnRanks(p, [&](int r) {
      const int next = (r + 1) % p, prev = (r + p - 1) % p;
      std::vector<int32_t> mine = Pattern(n, r, next);
      GYRE_RETURN_IF_ERROR(world[r]->Send(mine.data(), n, DataType::kInt32, next, 0));
      return world[r]->Recv(got[r].data(), n, DataType::kInt32, prev, 0);
    });
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(st[r].ok()) << "p=" << p << " rank " << r << ": " << st[r];
      EXPECT_EQ(got[r], Pattern(n, (r + p - 1) % p, r)) << "p=" << p << " rank " << r;
    }
  }
}

// Both ranks post their receive before their send (torch's batch_isend_irecv order): the
// posted receives do not block the sends, and each lands in its own buffer.
TEST_P(P2PTest, ReceivesPostedBeforeSendsMatch) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  const int64_t n = 100000;
  std::vector<std::vector<int32_t>> got(2, std::vector<int32_t>(n, 0));
  auto st = RunOnRanks(2, [&](int r) -> Status {
    const int other = 1 - r;
    std::vector<int32_t> mine = Pattern(n, r, other);
    GYRE_ASSIGN_OR_RETURN(auto recv,
                          world[r]->PostRecv(got[r].data(), n, DataType::kInt32, other, 4));
    GYRE_ASSIGN_OR_RETURN(auto send,
                          world[r]->PostSend(mine.data(), n, DataType::kInt32, other, 4));
    GYRE_RETURN_IF_ERROR(world[r]->WaitMessage(*recv));
    GYRE_RETURN_IF_ERROR(world[r]->WaitMessage(*send));
    // Waiting again gives the same answer.
    return world[r]->WaitMessage(*recv);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(got[r], Pattern(n, 1 - r, r)) << "rank " << r;
  }
}

// A wait bounded by the caller's deadline returns without failing the message; a later
// wait still completes it.
TEST_P(P2PTest, ShortWaitLeavesTheMessagePosted) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  int32_t v = 7, got = 0;
  auto recv = world[1]->PostRecv(&got, 1, DataType::kInt32, 0, 0);
  ASSERT_TRUE(recv.ok()) << recv.status();
  Status early =
      world[1]->WaitMessage(**recv, {}, Deadline::After(*SteadyClock::Get(), Millis(20)));
  EXPECT_EQ(early.code(), StatusCode::kDeadlineExceeded) << early;
  EXPECT_NE(early.message().find("not finished"), std::string::npos) << early;
  ASSERT_TRUE(world[0]->Send(&v, 1, DataType::kInt32, 1, 0).ok());
  ASSERT_TRUE(world[1]->WaitMessage(**recv).ok());
  EXPECT_EQ(got, 7);
}

// A caller that waits in short slices (as a binding checking for signals does) has waited
// since its first slice: the control path reported each slice's few microseconds, so a rank
// blocked in a receive for seconds showed "0.00 s" in gyrectl.
TEST_P(P2PTest, AWaitInSlicesCountsFromTheFirstSlice) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  int32_t v = 7, got = 0;
  auto recv = world[1]->PostRecv(&got, 1, DataType::kInt32, 0, 0);
  ASSERT_TRUE(recv.ok()) << recv.status();
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    while (!stop.load()) {
      const Status s =
          world[1]->WaitMessage(**recv, {}, Deadline::After(*SteadyClock::Get(), Millis(20)));
      if (s.ok()) return;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  // Sampled until a slice is in progress (between two slices nothing is listed).
  std::vector<MessageWait> waits;
  for (int i = 0; i < 100 && waits.empty(); ++i) {
    waits = world[1]->WaitingMessages();
    if (waits.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const Status sent = world[0]->Send(&v, 1, DataType::kInt32, 1, 0);
  if (!sent.ok()) stop = true;
  waiter.join();
  ASSERT_TRUE(sent.ok()) << sent;
  EXPECT_EQ(got, 7);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_GE(waits[0].waited, Millis(350)) << FormatDuration(waits[0].waited);
}

// Messages of one (sender, receiver, tag) arrive in the order sent; other tags may be
// received in any order.
TEST_P(P2PTest, SameTagKeepsOrderOtherTagsMayOvertake) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  const int64_t n = 257;
  std::vector<std::vector<int32_t>> got(5, std::vector<int32_t>(n, 0));
  auto st = RunOnRanks(2, [&](int r) -> Status {
    if (r == 0) {
      for (int i = 0; i < 3; ++i) {
        auto v = Pattern(n, 0, 1, i);
        GYRE_RETURN_IF_ERROR(world[0]->Send(v.data(), n, DataType::kInt32, 1, 5));
      }
      auto a = Pattern(n, 0, 1, 100), b = Pattern(n, 0, 1, 200);
      GYRE_RETURN_IF_ERROR(world[0]->Send(a.data(), n, DataType::kInt32, 1, 7));
      return world[0]->Send(b.data(), n, DataType::kInt32, 1, 9);
    }
    // Tag 9 first, then 7, then the three of tag 5.
    GYRE_RETURN_IF_ERROR(world[1]->Recv(got[4].data(), n, DataType::kInt32, 0, 9));
    GYRE_RETURN_IF_ERROR(world[1]->Recv(got[3].data(), n, DataType::kInt32, 0, 7));
    for (int i = 0; i < 3; ++i) {
      GYRE_RETURN_IF_ERROR(world[1]->Recv(got[i].data(), n, DataType::kInt32, 0, 5));
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st[0].ok()) << st[0];
  ASSERT_TRUE(st[1].ok()) << st[1];
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], Pattern(n, 0, 1, i)) << "message " << i;
  EXPECT_EQ(got[3], Pattern(n, 0, 1, 100));
  EXPECT_EQ(got[4], Pattern(n, 0, 1, 200));
}

// Messages between two ranks do not move the collectives' sequence, so ranks that took no
// part still match the others' next collective; the counters count the message once.
TEST_P(P2PTest, CollectivesAroundMessagesStayInStep) {
  const int p = 3;
  auto world = World(p);
  ASSERT_EQ(static_cast<int>(world.size()), p);
  const int64_t n = 1 << 18;  // 1 MiB of int32
  std::vector<int32_t> got(n, 0);
  std::vector<std::vector<int64_t>> sums(p, std::vector<int64_t>(16));
  auto st = RunOnRanks(p, [&](int r) -> Status {
    std::vector<int64_t> in(16, r + 1);
    GYRE_RETURN_IF_ERROR(
        world[r]->Allreduce(in.data(), sums[r].data(), 16, DataType::kInt64, ReduceOp::kSum));
    if (r == 0) {
      auto v = Pattern(n, 0, 2);
      GYRE_RETURN_IF_ERROR(world[0]->Send(v.data(), n, DataType::kInt32, 2, 0));
      const OpCounters& c = world[0]->last().counters;
      if (c.msgs_sent() != 1 || c.bytes_sent() != n * 4 || c.peers[2].msgs_sent != 1 ||
          c.msgs_recv() != 0) {
        return InternalError("send counters: " + std::to_string(c.msgs_sent()) + " messages, " +
                             std::to_string(c.bytes_sent()) + " bytes");
      }
    } else if (r == 2) {
      GYRE_RETURN_IF_ERROR(world[2]->Recv(got.data(), n, DataType::kInt32, 0, 0));
      const OpCounters& c = world[2]->last().counters;
      if (c.msgs_recv() != 1 || c.bytes_recv() != n * 4 || c.peers[0].msgs_recv != 1) {
        return InternalError("recv counters: " + std::to_string(c.msgs_recv()) + " messages");
      }
    }
    std::vector<int64_t> again(16, 10 * (r + 1));
    return world[r]->Allreduce(again.data(), sums[r].data(), 16, DataType::kInt64, ReduceOp::kSum);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(sums[r], std::vector<int64_t>(16, 60)) << "rank " << r;
  }
  EXPECT_EQ(got, Pattern(n, 0, 2));
  // The collectives took seq 1 and 2 on every rank, the message none.
  for (int r = 0; r < p; ++r) EXPECT_EQ(world[r]->next_seq(), 3u) << "rank " << r;
}

TEST_P(P2PTest, BadArgumentsAreClearErrorsAndLoseNothing) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  int32_t x[4] = {1, 2, 3, 4};
  Communicator& c = *world[0];
  struct Case {
    Status status;
    const char* says;
  } cases[] = {
      {c.Send(x, 4, DataType::kInt32, 2, 0), "rank 2 is not in this job (world size 2)"},
      {c.Send(x, 4, DataType::kInt32, -1, 0), "rank -1 is not in this job"},
      {c.Recv(x, 4, DataType::kInt32, 0, 0), "cannot send to or receive from itself"},
      {c.Send(x, 4, DataType::kInt32, 1, -3), "the tag must be in 0..65535"},
      {c.Send(x, 4, DataType::kInt32, 1, 70000), "the tag must be in 0..65535"},
      {c.Send(nullptr, 4, DataType::kInt32, 1, 0), "the buffer is null but must hold 4"},
      {c.Recv(x, -1, DataType::kInt32, 1, 0), "the count is negative"},
      {c.Send(x, 4, static_cast<DataType>(99), 1, 0), "unknown dtype"},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(k.status.code(), StatusCode::kInvalidArgument) << k.status;
    EXPECT_NE(k.status.message().find(k.says), std::string::npos) << k.status;
    EXPECT_NE(k.status.message().find("on rank 0"), std::string::npos) << k.status;
  }
  // None of them consumed a message number: a real exchange still matches.
  int32_t got[4] = {0, 0, 0, 0};
  auto st = RunOnRanks(2, [&](int r) {
    return r == 0 ? world[0]->Send(x, 4, DataType::kInt32, 1, 0)
                  : world[1]->Recv(got, 4, DataType::kInt32, 0, 0);
  });
  ASSERT_TRUE(st[0].ok()) << st[0];
  ASSERT_TRUE(st[1].ok()) << st[1];
  EXPECT_EQ(std::vector<int32_t>(got, got + 4), std::vector<int32_t>(x, x + 4));
}

TEST_P(P2PTest, MismatchedCountNamesBothSides) {
  auto world = World(2, Seconds(5));
  ASSERT_EQ(world.size(), 2u);
  std::vector<float> a(10, 1.0f), b(12, 0.0f);
  auto start = Clock::now();
  auto st = RunOnRanks(2, [&](int r) {
    return r == 0 ? world[0]->Send(a.data(), 10, DataType::kFloat32, 1, 3)
                  : world[1]->Recv(b.data(), 12, DataType::kFloat32, 0, 3);
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  ASSERT_EQ(st[1].code(), StatusCode::kInvalidArgument) << st[1];
  EXPECT_NE(st[1].message().find("rank 0"), std::string::npos) << st[1];
  EXPECT_NE(st[1].message().find("count=10"), std::string::npos) << st[1];
  EXPECT_NE(st[1].message().find("count=12"), std::string::npos) << st[1];
  EXPECT_NE(st[1].message().find("recv from rank 0 (tag 3"), std::string::npos) << st[1];
  // The message's sequence number is shown decoded, not as the 64-bit number it travels as.
  EXPECT_EQ(st[1].message().find("92233"), std::string::npos) << st[1];
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  // Nothing was written into the receiver's buffer.
  EXPECT_EQ(b, std::vector<float>(12, 0.0f));
}

// A point-to-point message is named by its pair, its tag and its place among that pair's
// messages with that tag: "message 0 with tag 63" read as if it counted every message.
TEST(PointToPointSeqTest, IsNamedAsTheNthMessageWithItsTag) {
  Communicator comm(std::move(LoopbackHub::CreateWorld(1)[0]), CommOptions());  // installs it
  EXPECT_EQ(DescribeSeqTag(PointToPointSeq(0, 1, 63, 0), 0),
            "point-to-point message from rank 0 to rank 1 with tag 63 (the 1st with that tag)");
  EXPECT_EQ(DescribeSeqTag(PointToPointSeq(5, 2, 7, 1), 0),
            "point-to-point message from rank 5 to rank 2 with tag 7 (the 2nd with that tag)");
  EXPECT_NE(DescribeSeqTag(PointToPointSeq(0, 1, 1, 2), 0).find("(the 3rd with"),
            std::string::npos);
  EXPECT_NE(DescribeSeqTag(PointToPointSeq(0, 1, 1, 10), 0).find("(the 11th with"),
            std::string::npos);
  EXPECT_NE(DescribeSeqTag(PointToPointSeq(0, 1, 1, 20), 0).find("(the 21st with"),
            std::string::npos);
  EXPECT_NE(DescribeSeqTag(PointToPointSeq(0, 1, 1, 111), 0).find("(the 112th with"),
            std::string::npos);
}

// A receive nobody sends to (here: the sender used another tag) ends at the progress
// timeout, naming the peer and the tag it waited under.
TEST_P(P2PTest, MissingMessageTimesOutNamingThePeer) {
  auto world = World(2, Millis(300));
  ASSERT_EQ(world.size(), 2u);
  int32_t v = 42, got = 0;
  auto start = Clock::now();
  auto st = RunOnRanks(2, [&](int r) {
    return r == 0 ? world[0]->Send(&v, 1, DataType::kInt32, 1, 1)
                  : world[1]->Recv(&got, 1, DataType::kInt32, 0, 2);
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(st[0].ok()) << st[0];
  ASSERT_EQ(st[1].code(), StatusCode::kDeadlineExceeded) << st[1];
  EXPECT_NE(st[1].message().find("recv from rank 0 (tag 2"), std::string::npos) << st[1];
  EXPECT_NE(st[1].message().find("waiting for rank 0"), std::string::npos) << st[1];
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 0.3 + 1.5);
}

// A receive that gave up had taken its message number: what the sender sends under it is
// dropped when it comes. A receive posted after it (a retry) is refused, naming that one,
// where before it was matched with the sender's next message and returned it as the first
// (the first lost, and the pair a message apart from then on). Other tags are untouched.
TEST_P(P2PTest, AReceiveAfterOneThatGaveUpIsRefusedNotMatchedWithTheNextMessage) {
  auto world = World(2, Millis(300));
  ASSERT_EQ(world.size(), 2u);
  int32_t got = 0;
  const Status first = world[1]->Recv(&got, 1, DataType::kInt32, 0, 5);
  ASSERT_EQ(first.code(), StatusCode::kDeadlineExceeded) << first;
  const int32_t one = 1, two = 2, three = 3;
  ASSERT_TRUE(world[0]->Send(&one, 1, DataType::kInt32, 1, 5).ok());
  ASSERT_TRUE(world[0]->Send(&two, 1, DataType::kInt32, 1, 5).ok());
  const Status retry = world[1]->Recv(&got, 1, DataType::kInt32, 0, 5);
  EXPECT_EQ(got, 0);
  ASSERT_EQ(retry.code(), StatusCode::kAborted) << retry;
  EXPECT_NE(retry.message().find("recv from rank 0 (tag 5, 1 x int32) on rank 1 #0 gave up (no "
                                 "progress) after its message number was taken"),
            std::string::npos)
      << retry;
  ASSERT_TRUE(world[0]->Send(&three, 1, DataType::kInt32, 1, 6).ok());
  ASSERT_TRUE(world[1]->Recv(&got, 1, DataType::kInt32, 0, 6).ok());
  EXPECT_EQ(got, 3);
}

INSTANTIATE_TEST_SUITE_P(World, P2PTest, ::testing::ValuesIn(TransportNames()),
                         [](const auto& info) { return info.param; });

// A peer whose connection closes is named at once, not waited out.
TEST(P2PFaultTest, ClosedPeerIsNamedPromptly) {
  FaultPlan plan;
  plan.close_after = 0;
  TransportFactory factory = [plan](int n) -> StatusOr<std::vector<std::unique_ptr<Transport>>> {
    auto world = LoopbackHub::CreateWorld(n);
    world[0] = std::make_unique<FaultyTransport>(std::move(world[0]), plan);
    return world;
  };
  CommOptions options;
  options.timeout = Seconds(5);
  auto world = MakeWorld(factory, 2, options);
  ASSERT_TRUE(world.ok()) << world.status();
  int32_t v = 1, got = 0;
  auto start = Clock::now();
  auto st = RunOnRanks(2, [&](int r) {
    return r == 0 ? (*world)[0]->Send(&v, 1, DataType::kInt32, 1, 0)
                  : (*world)[1]->Recv(&got, 1, DataType::kInt32, 0, 0);
  });
  EXPECT_FALSE(st[0].ok());
  ASSERT_EQ(st[1].code(), StatusCode::kUnavailable) << st[1];
  EXPECT_NE(st[1].message().find("rank 0"), std::string::npos) << st[1];
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
}

// A peer that keeps sending other messages (under another tag) while this rank waits on it
// does not hold the wait's deadline off: the bytes of other messages are not progress of the
// one waited for, nor of a collective the peer never enters. Over TCP, which counts bytes by
// operation; the in-process loopback counts every byte.
TEST(P2PFaultTest, OtherMessagesFromThePeerAreNotProgress) {
  CommOptions options;
  options.timeout = Millis(500);
  auto world = MakeWorld(FactoryByName("tcp"), 2, options);
  ASSERT_TRUE(world.ok()) << world.status();
  // Runs `wait` on rank 1 while rank 0 sends under tag 1 every 20 ms, for up to 4 s (far past
  // the 0.5 s timeout); returns how long the wait took.
  auto amid_traffic = [&](const std::function<Status()>& wait, Status* status) {
    std::atomic<bool> stop{false};
    std::thread flood([&] {
      std::vector<int32_t> v(256, 7);
      const auto until = Clock::now() + std::chrono::seconds(4);
      while (!stop && Clock::now() < until) {
        (*world)[0]->Send(v.data(), 256, DataType::kInt32, 1, 1).IgnoreError();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    const auto start = Clock::now();
    *status = wait();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stop = true;
    flood.join();
    return seconds;
  };
  int32_t x = 1, got = 0;
  Status reduce, recv;
  const double reduce_s = amid_traffic(
      [&] { return (*world)[1]->Allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum); }, &reduce);
  EXPECT_EQ(reduce.code(), StatusCode::kDeadlineExceeded) << reduce;
  EXPECT_LT(reduce_s, 1.5) << reduce;
  const double recv_s =
      amid_traffic([&] { return (*world)[1]->Recv(&got, 1, DataType::kInt32, 0, 2); }, &recv);
  EXPECT_EQ(recv.code(), StatusCode::kDeadlineExceeded) << recv;
  EXPECT_NE(recv.message().find("recv from rank 0 (tag 2"), std::string::npos) << recv;
  EXPECT_LT(recv_s, 1.5) << recv;
}

}  // namespace
}  // namespace gyre::testing
