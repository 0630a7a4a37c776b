// One TCP connection per pair of ranks, carrying messages both ways: which rank connects,
// what happens when the lower rank never does, and how closing one direction closes both.
// Connections are counted in /proc/net/tcp by the listening port of the accepting rank.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/tcp/tcp_transport.h"
#include "tests/tcp/tcp_test_util.h"
#include "tests/tcp/tcp_world.h"

namespace gyre {
namespace {

const char kJob[] = "tcp-pairing-test";

std::vector<std::unique_ptr<TcpTransport>> World(int n, TcpTransportOptions options = {}) {
  options.job_id = kJob;
  options.secret = TestSecret();
  auto world = MakeTcpTransports(n, options);
  EXPECT_TRUE(world.ok()) << world.status();
  return world.ok() ? std::move(world).value() : std::vector<std::unique_ptr<TcpTransport>>();
}

// Rank `rank` of a world of `n`, listening but without SetPeers (the test decides when).
std::unique_ptr<TcpTransport> Unpeered(int rank, int n) {
  TcpTransportOptions options;
  options.job_id = kJob;
  options.secret = TestSecret();
  options.rank = rank;
  options.world_size = n;
  auto t = TcpTransport::Create(options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// Established IPv4 connections whose local end is `port`: the accepted ends of connections
// made to a rank listening there.
int AcceptedOn(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  int count = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (colon == std::string::npos || state != "01") continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) ++count;
  }
  return count;
}

// Two ranks of an n = 2 world that have not called SetPeers yet; their addresses out.
std::vector<std::unique_ptr<TcpTransport>> UnpeeredPair(std::vector<std::string>* addresses) {
  std::vector<std::unique_ptr<TcpTransport>> world;
  for (int r = 0; r < 2; ++r) {
    world.push_back(Unpeered(r, 2));
    if (!world.back()) return {};
    addresses->push_back(world.back()->address());
  }
  return world;
}

// One message of `bytes` from rank `from` to rank `to` (receive posted first); it must arrive
// intact and both sides must complete OK.
void SendOne(std::vector<std::unique_ptr<TcpTransport>>& world, int from, int to, uint64_t seq,
             size_t bytes, uint32_t seed) {
  std::vector<uint8_t> payload = Pattern(bytes, seed), got(bytes);
  DoneWaiter send, recv;
  world[to]->Recv(from, Header(seq, 0), got.data(), got.size(), recv.Callback());
  world[from]->Send(to, Header(seq, 0), payload.data(), payload.size(), send.Callback());
  ASSERT_TRUE(send.Wait().ok());
  ASSERT_TRUE(recv.Wait().ok());
  EXPECT_EQ(got, payload);
}

// Every rank sends one message to every other at once; each must arrive intact.
void ExchangeAll(std::vector<std::unique_ptr<TcpTransport>>& world, uint64_t seq) {
  const int n = static_cast<int>(world.size());
  std::vector<std::vector<uint8_t>> got(n * n, std::vector<uint8_t>(100));
  std::vector<std::unique_ptr<DoneWaiter>> recvs, sends;
  for (int to = 0; to < n; ++to) {
    for (int from = 0; from < n; ++from) {
      if (from == to) continue;
      recvs.push_back(std::make_unique<DoneWaiter>());
      world[to]->Recv(from, Header(seq, from), got[from * n + to].data(), 100,
                      recvs.back()->Callback());
    }
  }
  std::vector<std::vector<uint8_t>> sent(n * n);
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (from == to) continue;
      sent[from * n + to] = Pattern(100, static_cast<uint32_t>(seq * 100 + from * n + to));
      sends.push_back(std::make_unique<DoneWaiter>());
      world[from]->Send(to, Header(seq, from), sent[from * n + to].data(), 100,
                        sends.back()->Callback());
    }
  }
  for (auto& w : sends) ASSERT_TRUE(w->Wait().ok());
  for (auto& w : recvs) ASSERT_TRUE(w->Wait().ok());
  for (int i = 0; i < n * n; ++i) {
    if (i / n == i % n) continue;
    EXPECT_EQ(got[i], sent[i]) << "from " << i / n << " to " << i % n;
  }
}

TEST(TcpPairingTest, EachPairSharesOneConnectionOpenedByTheLowerRank) {
  auto world = World(4);
  ASSERT_EQ(world.size(), 4u);
  ExchangeAll(world, 1);
  ExchangeAll(world, 2);
  for (int r = 0; r < 4; ++r) {
    // Rank r accepted one connection from each lower rank, and none from a higher one.
    const int port = PortOf(world[r]->address());
    EXPECT_TRUE(WaitUntil([&] { return AcceptedOn(port) == r; }))
        << "rank " << r << " accepted " << AcceptedOn(port);
  }
}

TEST(TcpPairingTest, WithoutItEachDirectionHasAConnectionOfItsOwn) {
  TcpTransportOptions options;
  options.one_connection_per_pair = false;
  auto world = World(4, options);
  ASSERT_EQ(world.size(), 4u);
  ExchangeAll(world, 1);
  for (int r = 0; r < 4; ++r) {
    const int port = PortOf(world[r]->address());
    EXPECT_TRUE(WaitUntil([&] { return AcceptedOn(port) == 3; }))
        << "rank " << r << " accepted " << AcceptedOn(port);
  }
}

// Rank 0 has not called SetPeers, so it does not connect: rank 1's message waits for it a
// while, then rank 1 connects itself, and rank 0 (which had no connection of its own to
// rank 1) sends back on that connection, before and after its SetPeers.
TEST(TcpPairingTest, AHigherRankConnectsItselfWhenTheLowerNeverDoes) {
  std::vector<std::string> addresses;
  auto world = UnpeeredPair(&addresses);
  ASSERT_EQ(world.size(), 2u);
  ASSERT_TRUE(world[1]->SetPeers(addresses).ok());
  ASSERT_NO_FATAL_FAILURE(SendOne(world, 1, 0, 1, 5000, 7));
  EXPECT_EQ(AcceptedOn(PortOf(addresses[0])), 1);
  EXPECT_EQ(AcceptedOn(PortOf(addresses[1])), 0);

  ASSERT_TRUE(world[0]->SetPeers(addresses).ok());
  ASSERT_NO_FATAL_FAILURE(SendOne(world, 0, 1, 2, 3000, 8));
  EXPECT_EQ(AcceptedOn(PortOf(addresses[0])), 1);
  EXPECT_EQ(AcceptedOn(PortOf(addresses[1])), 0);
}

// Rank 0 connects before rank 1 has called SetPeers: rank 1 still sends on that connection
// (it does not wait for a second connection, nor open one of its own).
TEST(TcpPairingTest, AConnectionAcceptedBeforeSetPeersCarriesTheRepliesToo) {
  std::vector<std::string> addresses;
  auto world = UnpeeredPair(&addresses);
  ASSERT_EQ(world.size(), 2u);
  ASSERT_TRUE(world[0]->SetPeers(addresses).ok());
  ASSERT_TRUE(WaitUntil([&] { return AcceptedOn(PortOf(addresses[1])) == 1; }));
  ASSERT_TRUE(world[1]->SetPeers(addresses).ok());
  ASSERT_NO_FATAL_FAILURE(SendOne(world, 1, 0, 1, 900, 5));
  EXPECT_EQ(AcceptedOn(PortOf(addresses[0])), 0);
  EXPECT_EQ(AcceptedOn(PortOf(addresses[1])), 1);
}

// A world larger than a rank's cap on connections in the handshake does not connect every
// pair up front (so many handshakes at once would be refused); the first sender connects.
TEST(TcpPairingTest, LargeWorldsConnectOnTheFirstSend) {
  TcpTransportOptions options;
  options.max_unauthenticated_connections = 3;
  auto world = World(4, options);
  ASSERT_EQ(world.size(), 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(AcceptedOn(PortOf(world[r]->address())), 0) << r;
  ExchangeAll(world, 1);
  ExchangeAll(world, 2);
}

// Either end going away fails the survivor's receives and sends, naming the peer.
class SharedCloseTest : public ::testing::TestWithParam<int> {};

TEST_P(SharedCloseTest, APeerLeavingFailsBothDirections) {
  const int leaver = GetParam();
  const int survivor = 1 - leaver;
  auto world = World(2);
  ASSERT_EQ(world.size(), 2u);
  ExchangeAll(world, 1);
  std::vector<uint8_t> buffer(64);
  DoneWaiter pending;
  world[survivor]->Recv(leaver, Header(5, 0), buffer.data(), buffer.size(), pending.Callback());
  world[leaver]->Shutdown();
  Status s = pending.Wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank " + std::to_string(leaver)), std::string::npos) << s;
  Status sent;
  ASSERT_TRUE(WaitUntil([&] {
    DoneWaiter send;
    world[survivor]->Send(leaver, Header(6, 0), buffer.data(), buffer.size(), send.Callback());
    sent = send.Wait();
    return !sent.ok();
  }));
  EXPECT_EQ(sent.code(), StatusCode::kUnavailable) << sent;
  EXPECT_NE(sent.message().find("rank " + std::to_string(leaver)), std::string::npos) << sent;
}

INSTANTIATE_TEST_SUITE_P(Leaver, SharedCloseTest, ::testing::Values(0, 1));

// The connecting side of the pair, against a fake rank 1 that promises its replies on the
// connection: they are read there, and a broken frame among them closes both directions.
TEST(TcpPairingTest, RepliesArriveOnTheConnectionAndABrokenOneClosesIt) {
  std::unique_ptr<TcpTransport> rank0 = Unpeered(0, 2);
  ASSERT_TRUE(rank0);
  auto listener = RawListener::Listen();
  ASSERT_TRUE(listener);
  ASSERT_TRUE(rank0->SetPeers({rank0->address(), listener->address()}).ok());
  auto fake = listener->Accept();  // rank 0 connects to the higher rank at once
  ASSERT_TRUE(fake);
  proto::PeerHello hello;
  ASSERT_TRUE(AcceptorHandshake(*fake, FakeRank(kJob, 1, 2), &hello, /*replies_here=*/true));
  EXPECT_EQ(hello.rank(), 0);

  std::vector<uint8_t> reply = Pattern(2000, 3), got(2000);
  DoneWaiter recv;
  rank0->Recv(1, Header(3, 0), got.data(), got.size(), recv.Callback());
  ASSERT_TRUE(fake->SendAll(DataFrame(3, 0, Header(3, 0).desc, reply)));
  ASSERT_TRUE(recv.Wait().ok());
  EXPECT_EQ(got, reply);

  std::vector<uint8_t> out = Pattern(700, 4);
  DoneWaiter send;
  rank0->Send(1, Header(4, 0), out.data(), out.size(), send.Callback());
  ASSERT_TRUE(send.Wait().ok());
  FrameHeader frame;
  std::vector<uint8_t> meta, payload;
  ASSERT_TRUE(ReadFrame(*fake, &frame, &meta, &payload));
  EXPECT_EQ(frame.seq, 4u);
  EXPECT_EQ(payload, out);

  DoneWaiter pending;
  rank0->Recv(1, Header(5, 0), got.data(), 64, pending.Callback());
  std::vector<uint8_t> broken = DataFrame(5, 0, Header(5, 0).desc, std::vector<uint8_t>(64));
  broken[10] ^= 0xFF;  // the CRC no longer matches
  ASSERT_TRUE(fake->SendAll(broken));
  Status s = pending.Wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
  EXPECT_TRUE(fake->WaitClosed());
  DoneWaiter after;
  rank0->Send(1, Header(6, 0), out.data(), out.size(), after.Callback());
  Status a = after.Wait();
  EXPECT_EQ(a.code(), StatusCode::kUnavailable) << a;
}

}  // namespace
}  // namespace gyre
