// The TCP transport against strangers: a wrong secret, a replayed handshake, a slow sender,
// hundreds of idle connections, mutated handshakes and floods of unexpected messages. Each
// must be refused or dropped and counted, while the real ranks keep exchanging exact data
// and the process keeps its memory, descriptors and threads.
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/tcp/frame.h"
#include "core/transport/tcp/tcp_transport.h"
#include "tests/sanitizers.h"
#include "tests/tcp/tcp_test_util.h"
#include "tests/tcp/tcp_world.h"

namespace gyre {
namespace {

constexpr char kJob[] = "tcp-security";

// Resident memory says nothing about leaks under AddressSanitizer (tests/sanitizers.h); its
// leak checker covers those builds instead.
constexpr bool kMemoryIsMeaningful = !testing::kAddressSanitizer;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

std::vector<std::unique_ptr<TcpTransport>> World(int n, TcpTransportOptions options = {}) {
  options.job_id = kJob;
  if (options.secret.empty()) options.secret = TestSecret();
  auto world = MakeTcpTransports(n, options);
  EXPECT_TRUE(world.ok()) << world.status();
  return world.ok() ? std::move(world).value() : std::vector<std::unique_ptr<TcpTransport>>();
}

// One message from `from` to `to`, checked byte for byte.
Status RoundTrip(std::vector<std::unique_ptr<TcpTransport>>& world, int from, int to, uint64_t seq,
                 size_t bytes = 4096) {
  std::vector<uint8_t> payload = Pattern(bytes, static_cast<uint32_t>(seq * 7 + from));
  std::vector<uint8_t> got(bytes);
  DoneWaiter send, recv;
  world[to]->Recv(from, Header(seq, 0), got.data(), got.size(), recv.Callback());
  world[from]->Send(to, Header(seq, 0), payload.data(), payload.size(), send.Callback());
  GYRE_RETURN_IF_ERROR(send.Wait());
  GYRE_RETURN_IF_ERROR(recv.Wait());
  if (got != payload) return InternalError("payload of seq " + std::to_string(seq) + " differs");
  return Status::Ok();
}

// Exchanges messages between ranks 0 and 1 on a thread until stopped, like a job's loop of
// collectives; every result must be exact.
class TrafficLoop {
 public:
  explicit TrafficLoop(std::vector<std::unique_ptr<TcpTransport>>* world) : world_(world) {
    thread_ = std::thread([this] {
      uint64_t seq = 1000;
      while (!stop_) {
        Status s = RoundTrip(*world_, static_cast<int>(seq % 2), static_cast<int>(1 - seq % 2), seq,
                             1 << 16);
        if (!s.ok()) {
          failure_ = s;
          return;
        }
        ++rounds_;
        ++seq;
      }
    });
  }
  // Returns the first failure, if any.
  Status Stop() {
    stop_ = true;
    thread_.join();
    return failure_;
  }
  int64_t rounds() const { return rounds_; }

 private:
  std::vector<std::unique_ptr<TcpTransport>>* world_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> rounds_{0};
  Status failure_;
  std::thread thread_;
};

int64_t StatusField(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, name.size() + 1, name + ":") == 0) {
      return std::stoll(line.substr(name.size() + 1));
    }
  }
  return -1;
}

int OpenDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;  // ".", ".." and the one opendir holds
}

// Resident memory grew by less than `kb` since `before` (see kMemoryIsMeaningful).
void ExpectGrowthBelow(int64_t before, int64_t kb) {
  if (!kMemoryIsMeaningful) return;
  EXPECT_LT(StatusField("VmRSS") - before, kb) << "kB of resident memory more than before";
}

TEST(TcpSecurityTest, WrongSecretIsRefusedAtOnceAndCounted) {
  TcpTransportOptions a;
  a.job_id = kJob;
  a.world_size = 2;
  a.secret = TestSecret();
  TcpTransportOptions b = a;
  b.rank = 1;
  b.secret = *auth::Secret::Generate();
  auto ta = TcpTransport::Create(a);
  auto tb = TcpTransport::Create(b);
  ASSERT_TRUE(ta.ok() && tb.ok());
  std::vector<std::string> addresses = {(*ta)->address(), (*tb)->address()};
  ASSERT_TRUE((*ta)->SetPeers(addresses).ok());
  ASSERT_TRUE((*tb)->SetPeers(addresses).ok());
  uint8_t byte = 7;
  DoneWaiter send;
  auto start = std::chrono::steady_clock::now();
  (*ta)->Send(1, Header(1, 0), &byte, 1, send.Callback());
  Status s = send.Wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "refused the handshake")) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ((*tb)->refusals().count(auth::Refusal::kBadProof), 1);
  EXPECT_EQ((*tb)->BytesReceivedFrom(0), 0u);
  // The other direction: rank 0 finds that rank 1 cannot prove the secret either.
  DoneWaiter back;
  (*tb)->Send(0, Header(1, 0), &byte, 1, back.Callback());
  EXPECT_EQ(back.Wait().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*ta)->refusals().count(auth::Refusal::kBadProof), 1);
}

TEST(TcpSecurityTest, WithoutASecretTheJobStillRunsButASecretSideRefusesIt) {
  TcpTransportOptions none;
  none.job_id = kJob;
  auto world = MakeTcpTransports(2, none);
  ASSERT_TRUE(world.ok());
  EXPECT_TRUE(RoundTrip(*world, 0, 1, 1).ok());
  EXPECT_TRUE(RoundTrip(*world, 1, 0, 2).ok());

  auto secured = World(1);  // a rank that has a secret, plus a stranger that has none
  ASSERT_EQ(secured.size(), 1u);
  auto stranger = RawSocket::Connect(secured[0]->address());
  ASSERT_TRUE(stranger);
  EXPECT_EQ(ConnectorHandshake(*stranger, FakeRank(kJob, 1, 2, auth::Secret()), 0),
            HandshakeOutcome::kClosed);
}

TEST(TcpSecurityTest, ReplayedHandshakeIsRefusedAndChangesNothing) {
  // The test plays rank 1 towards rank 0, so rank 0 must not connect to the real rank 1 (it
  // would, at SetPeers, to carry both ways).
  TcpTransportOptions options;
  options.one_connection_per_pair = false;
  auto world = World(3, options);
  ASSERT_EQ(world.size(), 3u);
  // Rank 1 is played by the test; an eavesdropper records its handshake with rank 0.
  RecordedHandshake record;
  {
    auto genuine = RawSocket::Connect(world[0]->address());
    ASSERT_TRUE(genuine);
    ASSERT_EQ(ConnectorHandshake(*genuine, FakeRank(kJob, 1, 3), 0, nullptr, &record),
              HandshakeOutcome::kAccepted);
  }
  auto replay = RawSocket::Connect(world[0]->address());
  ASSERT_TRUE(replay);
  EXPECT_EQ(ReplayHandshake(*replay, record), HandshakeOutcome::kClosed);
  EXPECT_TRUE(WaitUntil([&] { return world[0]->refusals().count(auth::Refusal::kReplay) == 1; }));
  // Replayed to another rank, which never saw the nonce: the proof simply does not match.
  auto elsewhere = RawSocket::Connect(world[2]->address());
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(ReplayHandshake(*elsewhere, record), HandshakeOutcome::kClosed);
  EXPECT_TRUE(WaitUntil([&] { return world[2]->refusals().count(auth::Refusal::kBadProof) == 1; }));
  EXPECT_TRUE(RoundTrip(world, 2, 0, 5).ok());
  EXPECT_TRUE(RoundTrip(world, 0, 2, 6).ok());
}

TEST(TcpSecurityTest, OneBytePerTickSenderIsCutOffByTheHandshakeDeadline) {
  TcpTransportOptions options;
  options.handshake_timeout = Millis(500);
  auto world = World(2, options);
  ASSERT_EQ(world.size(), 2u);
  // The deadline runs from the accept, so the clock starts before the connect.
  auto start = std::chrono::steady_clock::now();
  auto slow = RawSocket::Connect(world[0]->address());
  ASSERT_TRUE(slow);
  std::vector<uint8_t> hello = HelloFrame(kJob, 1, 2);
  ASSERT_GT(hello.size() * 50, 4000u + 500u);  // the ticks outlast the bound below
  bool closed = false;
  for (size_t i = 0; i < hello.size() && !closed; ++i) {
    if (!slow->SendAll(&hello[i], 1)) break;
    closed = slow->WaitClosed(Millis(50));
  }
  if (!closed) closed = slow->WaitClosed(Seconds(2));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(closed);
  EXPECT_GE(took, std::chrono::milliseconds(450));
  // The whole hello at a byte per tick takes about 6 s: a deadline that each byte pushed
  // back would pass this bound.
  EXPECT_LT(took, std::chrono::milliseconds(4000));
  EXPECT_EQ(world[0]->refusals().count(auth::Refusal::kTimeout), 1);
  EXPECT_TRUE(RoundTrip(world, 1, 0, 1).ok());
}

TEST(TcpSecurityTest, FiveHundredIdleConnectionsTieUpNothing) {
  TcpTransportOptions options;
  options.handshake_timeout = Seconds(1);
  options.max_unauthenticated_connections = 64;
  auto world = World(2, options);
  ASSERT_EQ(world.size(), 2u);
  ASSERT_TRUE(RoundTrip(world, 0, 1, 1).ok());  // connections and threads of the job exist
  ASSERT_TRUE(RoundTrip(world, 1, 0, 2).ok());
  const int fds_before = OpenDescriptors();
  const int64_t threads_before = StatusField("Threads");
  const int64_t rss_before = StatusField("VmRSS");

  TrafficLoop traffic(&world);
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 500; ++i) {
    auto s = RawSocket::Connect(world[0]->address());
    ASSERT_TRUE(s) << i;
    idle.push_back(std::move(s));
  }
  // No thread per connection: only the traffic loop's is new.
  EXPECT_LE(StatusField("Threads"), threads_before + 1);
  // Those over the cap are closed at once, the rest when the handshake deadline passes: all
  // within one deadline, so a transport that leaves them open fails in 30 s, not 500 x 5 s.
  const auto all_closed_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (auto& s : idle) {
    const auto left = all_closed_by - std::chrono::steady_clock::now();
    EXPECT_TRUE(s->WaitClosed(
        std::max<Duration>(Duration::zero(), std::chrono::duration_cast<Duration>(left))));
  }
  const auth::RefusalCounters& refused = world[0]->refusals();
  // Which of the two depends on how fast the slots free up; every one was cut off.
  EXPECT_GT(refused.count(auth::Refusal::kOverCap), 0);
  EXPECT_EQ(refused.count(auth::Refusal::kOverCap) + refused.count(auth::Refusal::kTimeout), 500);
  idle.clear();
  Status traffic_status = traffic.Stop();
  EXPECT_TRUE(traffic_status.ok()) << traffic_status;
  EXPECT_GT(traffic.rounds(), 0);

  EXPECT_TRUE(WaitUntil([&] { return OpenDescriptors() <= fds_before; }))
      << OpenDescriptors() << " descriptors open, " << fds_before << " before";
  // A joined thread leaves /proc's count a moment after pthread_join returns.
  EXPECT_TRUE(WaitUntil([&] { return StatusField("Threads") == threads_before; }))
      << StatusField("Threads") << " threads, " << threads_before << " before";
  ExpectGrowthBelow(rss_before, 64 * 1024);
}

// Strangers that hold every handshake slot of a rank with idle connections (no secret needed)
// cannot keep the job's ranks from connecting: at the cap the longest waiting stranger is
// cut off, and the rank's peer gets in and is served.
TEST(TcpSecurityTest, IdleStrangersAtTheHandshakeCapCannotKeepRanksOut) {
  TcpTransportOptions options;
  options.job_id = kJob;
  options.secret = TestSecret();
  options.world_size = 2;
  options.handshake_timeout = Seconds(60);  // the strangers would hold their slots all test
  options.max_unauthenticated_connections = 8;
  options.connect_timeout = Seconds(10);
  std::vector<std::unique_ptr<TcpTransport>> world;
  for (int r = 0; r < 2; ++r) {
    options.rank = r;
    auto t = TcpTransport::Create(options);
    ASSERT_TRUE(t.ok()) << t.status();
    world.push_back(std::move(*t));
  }
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < options.max_unauthenticated_connections; ++i) {
    auto s = RawSocket::Connect(world[1]->address());
    ASSERT_TRUE(s) << i;
    idle.push_back(std::move(s));
  }
  // A ninth stranger shows that all eight are in the handshake: it cuts off the first.
  auto ninth = RawSocket::Connect(world[1]->address());
  ASSERT_TRUE(ninth);
  EXPECT_TRUE(idle.front()->WaitClosed(Seconds(5)));
  const std::vector<std::string> addresses = {world[0]->address(), world[1]->address()};
  const auto start = std::chrono::steady_clock::now();
  for (auto& t : world) ASSERT_TRUE(t->SetPeers(addresses).ok());
  EXPECT_TRUE(RoundTrip(world, 0, 1, 1).ok());
  EXPECT_TRUE(RoundTrip(world, 1, 0, 2).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(idle[1]->WaitClosed(Seconds(5)));  // rank 0's connection took its slot
  EXPECT_GE(world[1]->refusals().count(auth::Refusal::kOverCap), 2);
}

TEST(TcpSecurityTest, MutatedHandshakesAreRefusedAndTheJobGoesOn) {
  TcpTransportOptions options;
  options.handshake_timeout = Millis(300);
  auto world = World(2, options);
  ASSERT_EQ(world.size(), 2u);
  const int64_t rss_before = StatusField("VmRSS");
  TrafficLoop traffic(&world);
  std::mt19937 rng(42);
  auto mutated = [&rng](int i) {
    std::vector<uint8_t> frame = HelloFrame(kJob, 1, 2);
    switch (i % 4) {
      case 0:  // flip a few bits anywhere
        for (int k = 0; k < 1 + i % 3; ++k) frame[rng() % frame.size()] ^= 1 << (rng() % 8);
        break;
      case 1:  // cut it short
        frame.resize(rng() % frame.size());
        break;
      case 2: {  // a random frame type and lengths, with a valid CRC
        FrameHeader h;
        h.type = static_cast<FrameType>(rng() % 256);
        h.meta_len = static_cast<uint32_t>(rng());
        h.payload_len = rng();
        frame.assign(kFrameHeaderBytes, 0);
        EncodeFrameHeader(h, frame.data());
        break;
      }
      default:  // noise
        for (uint8_t& b : frame) b = static_cast<uint8_t>(rng());
        break;
    }
    return frame;
  };
  int challenged = 0;
  for (int batch = 0; batch < 10; ++batch) {
    std::vector<std::unique_ptr<RawSocket>> strangers;
    for (int i = 0; i < 20; ++i) {
      auto s = RawSocket::Connect(world[0]->address());
      ASSERT_TRUE(s);
      s->SendAll(mutated(batch * 20 + i));
      strangers.push_back(std::move(s));
    }
    for (auto& s : strangers) {
      // Whatever it sent, a stranger never gets further than a challenge.
      FrameHeader header;
      std::vector<uint8_t> meta, payload;
      if (ReadFrame(*s, &header, &meta, &payload, Seconds(2))) {
        EXPECT_EQ(header.type, FrameType::kChallenge);
        ++challenged;
      }
      EXPECT_TRUE(s->WaitClosed(Seconds(2)));
    }
  }
  Status traffic_status = traffic.Stop();
  EXPECT_TRUE(traffic_status.ok()) << traffic_status;
  EXPECT_GE(world[0]->refusals().total(), 200);
  EXPECT_LT(challenged, 200);
  ExpectGrowthBelow(rss_before, 64 * 1024);
}

TEST(TcpSecurityTest, FloodOfUnexpectedMessagesHitsTheCap) {
  TcpTransportOptions options;
  options.max_unexpected_bytes = 1 << 20;
  options.one_connection_per_pair = false;  // the test plays rank 1 towards rank 0
  auto world = World(2, options);
  ASSERT_EQ(world.size(), 2u);
  std::vector<uint8_t> buffer(8);
  DoneWaiter pending;
  world[0]->Recv(1, Header(1, 0), buffer.data(), buffer.size(), pending.Callback());
  const int64_t rss_before = StatusField("VmRSS");
  // Rank 1 is an authenticated fake that sends small messages nobody asked for.
  auto fake = RawSocket::Connect(world[0]->address());
  ASSERT_TRUE(fake);
  ASSERT_EQ(ConnectorHandshake(*fake, FakeRank(kJob, 1, 2), 0), HandshakeOutcome::kAccepted);
  std::vector<uint8_t> burst;
  for (uint64_t seq = 100; seq < 40100; ++seq) {
    std::vector<uint8_t> frame = DataFrame(seq, 0, Header(seq, 0).desc, std::vector<uint8_t>(16));
    burst.insert(burst.end(), frame.begin(), frame.end());
  }
  fake->SendAll(burst);  // may fail part way: the connection is dropped at the cap
  Status s = pending.Wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "max_unexpected_bytes")) << s;
  EXPECT_TRUE(fake->WaitClosed());
  ExpectGrowthBelow(rss_before, 32 * 1024);
}

}  // namespace
}  // namespace gyre
