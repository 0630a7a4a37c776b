// The TCP transport between real TcpTransports in one process: matching, ordering, sizes,
// mismatch errors, shutdown and argument checks.
#include "core/transport/tcp/tcp_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/tcp/tcp_test_util.h"
#include "tests/tcp/tcp_world.h"

namespace gyre {
namespace {

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

std::vector<std::unique_ptr<TcpTransport>> World(int n, TcpTransportOptions options = {}) {
  if (options.job_id.empty()) options.job_id = "tcp-test";
  auto world = MakeTcpTransports(n, options);
  EXPECT_TRUE(world.ok()) << world.status();
  return world.ok() ? std::move(world).value() : std::vector<std::unique_ptr<TcpTransport>>();
}

TEST(TcpTransportTest, AddressAndDescribePeer) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  const std::string a0 = world[0]->address();
  const std::string a1 = world[1]->address();
  EXPECT_EQ(a0.rfind("127.0.0.1:", 0), 0u) << a0;
  EXPECT_NE(a0, a1);
  EXPECT_EQ(world[0]->DescribePeer(1), "rank 1 (" + a1 + ")");
  EXPECT_EQ(world[0]->DescribePeer(0), "rank 0 (" + a0 + ")");
  EXPECT_EQ(world[0]->rank(), 0);
  EXPECT_EQ(world[1]->size(), 2);
  EXPECT_EQ(&world[0]->clock(), SteadyClock::Get());
  EXPECT_FALSE(world[0]->SetPeers({a0, a1}).ok());  // only once
}

TEST(TcpTransportTest, MakeTcpWorldConnectsEveryPair) {
  auto world = MakeTcpWorld(3, "tcp-world");
  ASSERT_TRUE(world.ok()) << world.status();
  std::vector<std::unique_ptr<Transport>>& w = *world;
  std::vector<std::vector<uint8_t>> got(9, std::vector<uint8_t>(8));
  std::vector<std::unique_ptr<DoneWaiter>> waiters;
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) {
      if (from == to) continue;
      auto recv = std::make_unique<DoneWaiter>();
      w[to]->Recv(from, Header(1, 0), got[from * 3 + to].data(), 8, recv->Callback());
      waiters.push_back(std::move(recv));
    }
  }
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 9; ++i) sent.push_back(Pattern(8, i));
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) {
      if (from == to) continue;
      auto send = std::make_unique<DoneWaiter>();
      w[from]->Send(to, Header(1, 0), sent[from * 3 + to].data(), 8, send->Callback());
      waiters.push_back(std::move(send));
    }
  }
  for (auto& waiter : waiters) ASSERT_TRUE(waiter->Wait().ok());
  for (int i = 0; i < 9; ++i) {
    if (i / 3 != i % 3) {
      EXPECT_EQ(got[i], sent[i]) << i;
    }
  }
}

TEST(TcpTransportTest, PingPong) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  std::vector<uint8_t> ball = Pattern(1024, 7);
  std::vector<uint8_t> got(ball.size());
  for (uint64_t seq = 0; seq < 200; ++seq) {
    int from = static_cast<int>(seq % 2), to = 1 - from;
    DoneWaiter recv, send;
    world[to]->Recv(from, Header(seq, 0), got.data(), got.size(), recv.Callback());
    world[from]->Send(to, Header(seq, 0), ball.data(), ball.size(), send.Callback());
    ASSERT_TRUE(send.Wait().ok());
    ASSERT_TRUE(recv.Wait().ok());
    ASSERT_EQ(got, ball);
    ball[seq % ball.size()] ^= 0xFF;  // each round carries different bytes
  }
}

TEST(TcpTransportTest, ManyTagsBothDirectionsOutOfOrder) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  constexpr int kTags = 64;
  std::mt19937 rng(42);
  std::vector<int> send_order(kTags), recv_order(kTags);
  for (int i = 0; i < kTags; ++i) send_order[i] = recv_order[i] = i;

  std::vector<std::vector<uint8_t>> payload[2], got[2];
  std::vector<std::unique_ptr<DoneWaiter>> waiters;
  for (int r = 0; r < 2; ++r) {
    for (int tag = 0; tag < kTags; ++tag) {
      payload[r].push_back(Pattern(100 + 37 * tag, r * 1000 + tag));
      got[r].emplace_back(100 + 37 * tag);
    }
  }
  // Half the receives are posted before anything is sent, half after, in a random order.
  std::shuffle(recv_order.begin(), recv_order.end(), rng);
  auto post_recvs = [&](int begin, int end) {
    for (int r = 0; r < 2; ++r) {
      for (int i = begin; i < end; ++i) {
        int tag = recv_order[i];
        auto w = std::make_unique<DoneWaiter>();
        world[r]->Recv(1 - r, Header(5, tag), got[1 - r][tag].data(), got[1 - r][tag].size(),
                       w->Callback());
        waiters.push_back(std::move(w));
      }
    }
  };
  post_recvs(0, kTags / 2);
  for (int r = 0; r < 2; ++r) {
    std::shuffle(send_order.begin(), send_order.end(), rng);
    for (int tag : send_order) {
      auto w = std::make_unique<DoneWaiter>();
      world[r]->Send(1 - r, Header(5, tag), payload[r][tag].data(), payload[r][tag].size(),
                     w->Callback());
      waiters.push_back(std::move(w));
    }
  }
  post_recvs(kTags / 2, kTags);
  for (auto& w : waiters) ASSERT_TRUE(w->Wait().ok());
  for (int r = 0; r < 2; ++r) {
    for (int tag = 0; tag < kTags; ++tag) EXPECT_EQ(got[r][tag], payload[r][tag]) << tag;
  }
}

TEST(TcpTransportTest, MessageSentBeforeItsReceiveIsHeld) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  std::vector<uint8_t> payload = Pattern(300000, 3);
  DoneWaiter send;
  world[0]->Send(1, Header(9, 4), payload.data(), payload.size(), send.Callback());
  ASSERT_TRUE(send.Wait().ok());
  ASSERT_TRUE(WaitUntil([&] { return world[1]->BytesReceivedFrom(0) == payload.size(); }));
  std::vector<uint8_t> got(payload.size());
  DoneWaiter recv;
  world[1]->Recv(0, Header(9, 4), got.data(), got.size(), recv.Callback());
  ASSERT_TRUE(recv.Wait().ok());
  EXPECT_EQ(got, payload);
}

// Sends `count` messages of `bytes` from rank 0 to rank 1 under seq `seq`, lets all of them
// arrive before rank 1 posts a receive (each lands in an early buffer), then receives them
// and checks every byte.
void SendEarlyThenReceive(std::vector<std::unique_ptr<TcpTransport>>& world, uint64_t seq,
                          int count, size_t bytes) {
  const uint64_t before = world[1]->BytesReceivedFrom(0);
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < count; ++i) {
    payloads.push_back(Pattern(bytes, static_cast<uint32_t>(seq * 10 + i)));
    DoneWaiter send;
    world[0]->Send(1, Header(seq, i), payloads.back().data(), bytes, send.Callback());
    ASSERT_TRUE(send.Wait().ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return world[1]->BytesReceivedFrom(0) == before + count * bytes; }));
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> got(bytes);
    DoneWaiter recv;
    world[1]->Recv(0, Header(seq, i), got.data(), got.size(), recv.Callback());
    ASSERT_TRUE(recv.Wait().ok());
    EXPECT_TRUE(got == payloads[i]) << "seq " << seq << " message " << i;
  }
}

TEST(TcpTransportTest, EarlyMessagesReuseTheirBuffers) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  constexpr size_t kBytes = 300000;
  for (uint64_t seq = 1; seq <= 3; ++seq) SendEarlyThenReceive(world, seq, 1, kBytes);
  BufferPoolStats s = world[1]->early_buffers();
  EXPECT_EQ(s.allocated, 1u);
  EXPECT_EQ(s.reused, 2u);
  EXPECT_EQ(s.pooled_buffers, 1u);
  EXPECT_EQ(s.pooled_bytes, kBytes);
  // Two held at once need two buffers; both are kept and serve the next two.
  SendEarlyThenReceive(world, 4, 2, kBytes);
  SendEarlyThenReceive(world, 5, 2, kBytes);
  s = world[1]->early_buffers();
  EXPECT_EQ(s.allocated, 2u);
  EXPECT_EQ(s.reused, 5u);
  EXPECT_EQ(s.pooled_bytes, 2 * kBytes);
  // The sender never buffered anything.
  EXPECT_EQ(world[0]->early_buffers().allocated, 0u);
}

TEST(TcpTransportTest, EarlyBufferPoolKeepsNoMoreThanItsCap) {
  constexpr size_t kBytes = 300000;
  TcpTransportOptions capped;
  capped.early_buffer_pool_bytes = kBytes + kBytes / 2;  // room for one idle buffer
  auto world = World(2, capped);
  ASSERT_EQ(world.size(), 2u);
  SendEarlyThenReceive(world, 1, 2, kBytes);
  BufferPoolStats s = world[1]->early_buffers();
  EXPECT_EQ(s.allocated, 2u);
  EXPECT_EQ(s.pooled_buffers, 1u);
  EXPECT_LE(s.pooled_bytes, capped.early_buffer_pool_bytes);

  TcpTransportOptions off;
  off.early_buffer_pool_bytes = 0;
  auto plain = World(2, off);
  ASSERT_EQ(plain.size(), 2u);
  for (uint64_t seq = 1; seq <= 3; ++seq) SendEarlyThenReceive(plain, seq, 1, kBytes);
  s = plain[1]->early_buffers();
  EXPECT_EQ(s.allocated, 3u);
  EXPECT_EQ(s.reused, 0u);
  EXPECT_EQ(s.pooled_bytes, 0u);
}

TEST(TcpTransportTest, ZeroByteMessagesInBothOrders) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  DoneWaiter recv_first, send_first;
  world[1]->Recv(0, Header(1, 1), nullptr, 0, recv_first.Callback());
  world[0]->Send(1, Header(1, 1), nullptr, 0, send_first.Callback());
  EXPECT_TRUE(send_first.Wait().ok());
  EXPECT_TRUE(recv_first.Wait().ok());

  DoneWaiter send_early;
  world[0]->Send(1, Header(1, 2), nullptr, 0, send_early.Callback());
  ASSERT_TRUE(send_early.Wait().ok());
  // A marker message behind it on the same connection proves the empty one arrived first.
  uint8_t marker = 0x5A, got_marker = 0;
  DoneWaiter marker_send, marker_recv;
  world[0]->Send(1, Header(1, 3), &marker, 1, marker_send.Callback());
  world[1]->Recv(0, Header(1, 3), &got_marker, 1, marker_recv.Callback());
  ASSERT_TRUE(marker_recv.Wait().ok());
  ASSERT_TRUE(marker_send.Wait().ok());
  DoneWaiter recv_late;
  world[1]->Recv(0, Header(1, 2), nullptr, 0, recv_late.Callback());
  EXPECT_TRUE(recv_late.Wait().ok());
  EXPECT_EQ(got_marker, marker);
}

TEST(TcpTransportTest, LargeMessageArrivesBitExactAndProgressIsCounted) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<uint8_t> payload = Pattern(kBytes, 11);
  std::vector<uint8_t> got(kBytes);
  DoneWaiter recv, send;
  world[1]->Recv(0, Header(2, 0), got.data(), got.size(), recv.Callback());
  world[0]->Send(1, Header(2, 0), payload.data(), payload.size(), send.Callback());
  ASSERT_TRUE(send.Wait(Seconds(30)).ok());
  ASSERT_TRUE(recv.Wait(Seconds(30)).ok());
  EXPECT_TRUE(got == payload);
  EXPECT_EQ(world[1]->BytesReceivedFrom(0), kBytes);
  EXPECT_EQ(world[0]->BytesReceivedFrom(1), 0u);
}

TEST(TcpTransportTest, RingOfFourRanks) {
  auto world = World(4);
  ASSERT_EQ(world.size(), 4u);
  for (uint64_t seq = 0; seq < 20; ++seq) {
    std::vector<std::vector<uint8_t>> sent, got(4, std::vector<uint8_t>(4096));
    std::vector<std::unique_ptr<DoneWaiter>> waiters;
    for (int r = 0; r < 4; ++r) sent.push_back(Pattern(4096, static_cast<uint32_t>(seq * 4 + r)));
    for (int r = 0; r < 4; ++r) {
      auto w = std::make_unique<DoneWaiter>();
      world[r]->Recv((r + 3) % 4, Header(seq, 0), got[r].data(), 4096, w->Callback());
      waiters.push_back(std::move(w));
      w = std::make_unique<DoneWaiter>();
      world[r]->Send((r + 1) % 4, Header(seq, 0), sent[r].data(), 4096, w->Callback());
      waiters.push_back(std::move(w));
    }
    for (auto& w : waiters) ASSERT_TRUE(w->Wait().ok());
    for (int r = 0; r < 4; ++r) ASSERT_EQ(got[r], sent[(r + 3) % 4]);
  }
}

// Both the posted-first and the arrived-first paths report a size mismatch with both sides
// described, and the connection stays usable (the payload was drained).
TEST(TcpTransportTest, SizeMismatchDescribesBothSides) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  for (bool recv_first : {true, false}) {
    uint64_t seq = recv_first ? 1 : 2;
    std::vector<uint8_t> payload = Pattern(100, 1), got(200);
    DoneWaiter recv, send;
    if (recv_first) world[1]->Recv(0, Header(seq, 0), got.data(), 200, recv.Callback());
    world[0]->Send(1, Header(seq, 0), payload.data(), 100, send.Callback());
    ASSERT_TRUE(send.Wait().ok());
    if (!recv_first) {
      ASSERT_TRUE(WaitUntil([&] { return world[1]->BytesReceivedFrom(0) >= 100 * seq; }));
      world[1]->Recv(0, Header(seq, 0), got.data(), 200, recv.Callback());
    }
    Status s = recv.Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(Contains(s, world[1]->DescribePeer(0) + " sent")) << s;
    EXPECT_TRUE(Contains(s, "with 100 bytes")) << s;
    EXPECT_TRUE(Contains(s, "this rank (rank 1) expected")) << s;
    EXPECT_TRUE(Contains(s, "with 200 bytes")) << s;
    EXPECT_TRUE(Contains(s, "seq " + std::to_string(seq))) << s;

    std::vector<uint8_t> next = Pattern(50, 2), next_got(50);
    DoneWaiter next_recv, next_send;
    world[1]->Recv(0, Header(seq, 1), next_got.data(), 50, next_recv.Callback());
    world[0]->Send(1, Header(seq, 1), next.data(), 50, next_send.Callback());
    ASSERT_TRUE(next_recv.Wait().ok());
    ASSERT_TRUE(next_send.Wait().ok());
    EXPECT_EQ(next_got, next);
  }
}

TEST(TcpTransportTest, OpDescMismatchDescribesBothCalls) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  MessageHeader sent_header = Header(3, 0, 16);
  MessageHeader expected_header = Header(3, 0, 16);
  expected_header.desc.collective = 4;
  expected_header.desc.root = 1;
  std::vector<uint8_t> payload(64), got(64);
  DoneWaiter recv, send;
  world[0]->Recv(1, expected_header, got.data(), 64, recv.Callback());
  world[1]->Send(0, sent_header, payload.data(), 64, send.Callback());
  Status s = recv.Wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "mismatched calls")) << s;
  EXPECT_TRUE(Contains(s, world[0]->DescribePeer(1) + " sent " + DescribeOpDesc(sent_header.desc)))
      << s;
  EXPECT_TRUE(Contains(s, "this rank (rank 0) expected " + DescribeOpDesc(expected_header.desc)))
      << s;
  EXPECT_TRUE(send.Wait().ok());
}

TEST(TcpTransportTest, BadArgumentsAreRefusedInline) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  uint8_t byte = 0;
  std::vector<Status> results;
  auto collect = [&](Status s) { results.push_back(s); };
  world[0]->Send(0, Header(1, 0), &byte, 1, collect);   // to itself
  world[0]->Send(2, Header(1, 0), &byte, 1, collect);   // out of range
  world[0]->Recv(-1, Header(1, 0), &byte, 1, collect);  // out of range
  world[0]->Send(1, Header(1, 0), nullptr, 5, collect);
  ASSERT_EQ(results.size(), 4u);  // all inline: no waiting needed
  for (const Status& s : results) EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(results[1], "rank 2")) << results[1];

  TcpTransportOptions bad;
  bad.job_id = "x";
  bad.rank = 3;
  bad.world_size = 2;
  EXPECT_EQ(TcpTransport::Create(bad).status().code(), StatusCode::kInvalidArgument);
  bad.rank = 0;
  bad.job_id = "";
  EXPECT_EQ(TcpTransport::Create(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(TcpTransportTest, OversizedMessagesAreRefused) {
  TcpTransportOptions options;
  options.max_frame_bytes = 1000;
  auto world = World(2, options);
  ASSERT_EQ(world.size(), 2u);
  std::vector<uint8_t> big(1001);
  DoneWaiter send, recv;
  world[0]->Send(1, Header(1, 0), big.data(), big.size(), send.Callback());
  world[1]->Recv(0, Header(1, 0), big.data(), big.size(), recv.Callback());
  EXPECT_EQ(send.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(send.Wait(), "max_frame_bytes"));
  EXPECT_EQ(recv.Wait().code(), StatusCode::kInvalidArgument);
}

TEST(TcpTransportTest, SendBeforeSetPeersIsACallerError) {
  TcpTransportOptions options;
  options.job_id = "early";
  options.world_size = 2;
  auto t = TcpTransport::Create(options);
  ASSERT_TRUE(t.ok()) << t.status();
  uint8_t byte = 1;
  DoneWaiter send;
  (*t)->Send(1, Header(1, 0), &byte, 1, send.Callback());
  Status s = send.Wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "before SetPeers")) << s;
}

TEST(TcpTransportTest, ShutdownFailsPendingOperationsWithAborted) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  std::vector<uint8_t> buffer(16);
  DoneWaiter pending;
  world[0]->Recv(1, Header(1, 0), buffer.data(), buffer.size(), pending.Callback());
  world[0]->Shutdown();
  Status s = pending.Wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(Contains(s, "rank 0")) << s;

  // After shutdown every call is refused inline.
  int calls = 0;
  world[0]->Send(1, Header(2, 0), buffer.data(), buffer.size(), [&](Status st) {
    EXPECT_EQ(st.code(), StatusCode::kAborted);
    ++calls;
  });
  world[0]->Recv(1, Header(2, 0), buffer.data(), buffer.size(), [&](Status st) {
    EXPECT_EQ(st.code(), StatusCode::kAborted);
    ++calls;
  });
  EXPECT_EQ(calls, 2);
  world[0]->CancelOperation(2, AbortedError("nothing to cancel"));
  world[0]->Shutdown();  // idempotent
}

TEST(TcpTransportTest, DoneMayCallBackIntoTheTransport) {
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  // Each completion posts the next step from the io thread, as the executor does.
  constexpr int kSteps = 100;
  std::vector<uint8_t> a(32, 1), b(32);
  std::atomic<int> steps{0}, sends_done{0};
  DoneWaiter finished;
  DoneCallback finish = finished.Callback();
  std::function<void(int)> step = [&](int i) {
    if (i == kSteps) return finish(Status::Ok());
    world[1]->Recv(0, Header(i, 0), b.data(), b.size(), [&, i](Status s) {
      if (!s.ok()) return finish(s);
      steps++;
      // Cancelling an unrelated seq from inside a callback must not deadlock.
      world[1]->CancelOperation(1000000 + i, AbortedError("unrelated"));
      step(i + 1);
    });
    world[0]->Send(1, Header(i, 0), a.data(), a.size(), [&](Status s) {
      if (s.ok()) sends_done++;
    });
  };
  step(0);
  ASSERT_TRUE(finished.Wait().ok());
  EXPECT_EQ(steps.load(), kSteps);
  // `a` must outlive every Send's done.
  EXPECT_TRUE(WaitUntil([&] { return sends_done.load() == kSteps; }));
  // The last callback may still be returning on an io thread; joining them before the
  // locals it refers to go away keeps the test itself free of races.
  world[0]->Shutdown();
  world[1]->Shutdown();
}

}  // namespace
}  // namespace gyre
