// What the handshake costs: the two state machines alone (CPU), over a Unix socket pair (the
// daemon's path), a TcpStore connection against a bare TCP connect, and a TCP transport's
// first message against its second. Medians over many runs are printed (the numbers quoted
// in docs/security.md) and held to loose bounds, so a pathological slowdown fails.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include "core/auth/fd_handshake.h"
#include "core/auth/handshake.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_server.h"
#include "core/transport/tcp/frame.h"
#include "core/transport/tcp/tcp_transport.h"

namespace gyre {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

auth::Credentials Creds(int rank, int world, auth::Secret secret) {
  auth::Credentials c;
  c.secret = std::move(secret);
  c.job_id = "cost";
  c.rank = rank;
  c.world_size = world;
  return c;
}

TEST(HandshakeCostTest, StateMachinesAlone) {
  const auth::Secret secret = *auth::Secret::Generate();
  const auth::Credentials conn = Creds(1, 2, secret), acc = Creds(0, 2, secret);
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    auto start = Clock::now();
    auth::Connector c(auth::Channel::kPeer, &conn, 0);
    auth::Acceptor a(auth::Channel::kPeer, &acc, nullptr);
    std::string proof = *c.Proof(*a.Challenge(*c.Hello()));
    ASSERT_TRUE(a.CheckProof(proof).ok());
    ASSERT_TRUE(c.CheckAck(a.Accept()).ok());
    us.push_back(Micros(Clock::now() - start));
  }
  const double median = Median(us);
  std::printf("handshake CPU (both sides, 4 HMACs, 2 nonces): median %.1f us over %zu\n", median,
              us.size());
  EXPECT_LT(median, 2000.0);
}

TEST(HandshakeCostTest, OverAUnixSocketPair) {
  const auth::Secret secret = *auth::Secret::Generate();
  const auth::Credentials client = Creds(auth::kNoRank, 0, secret);
  const auth::Credentials daemon = Creds(auth::kNoRank, 0, secret);
  std::vector<double> us;
  for (int i = 0; i < 300; ++i) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    auto accepted = std::async(std::launch::async, [&] {
      auth::Refusal refusal;
      return auth::AcceptOnFd(fds[1], auth::Channel::kClient, daemon, nullptr, In(Seconds(5)),
                              &refusal);
    });
    auto start = Clock::now();
    Status s = auth::ConnectOnFd(fds[0], auth::Channel::kClient, client, auth::kNoRank,
                                 In(Seconds(5)), "cost");
    us.push_back(Micros(Clock::now() - start));
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(accepted.get().ok());
    ::close(fds[0]);
    ::close(fds[1]);
  }
  const double median = Median(us);
  std::printf("handshake over a Unix socket (client to daemon): median %.1f us over %zu\n", median,
              us.size());
  EXPECT_LT(median, 20000.0);
}

TEST(HandshakeCostTest, TcpStoreConnectAgainstABareConnect) {
  store::TcpStoreServer::Options options;
  options.secret = *auth::Secret::Generate();
  options.job_id = "cost";
  auto server = store::TcpStoreServer::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const auth::Credentials me = Creds(0, 1, options.secret);
  std::vector<double> bare, store;
  for (int i = 0; i < 200; ++i) {
    auto start = Clock::now();
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    bare.push_back(Micros(Clock::now() - start));
    ::close(fd);

    start = Clock::now();
    auto client = store::TcpStore::Connect("127.0.0.1", port, In(Seconds(5)), me);
    store.push_back(Micros(Clock::now() - start));
    ASSERT_TRUE(client.ok()) << client.status();
  }
  const double b = Median(bare), s = Median(store);
  std::printf(
      "TcpStore connect: median %.1f us with the handshake, %.1f us for a bare TCP "
      "connect (the handshake adds %.1f us, 2 round trips)\n",
      s, b, s - b);
  EXPECT_LT(s, 50000.0);
}

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendFrame(int fd, FrameType type, const std::string& meta) {
  std::vector<uint8_t> frame = EncodeControlFrame(type, meta);
  return ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
}

bool ReadAll(int fd, void* data, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, static_cast<char*>(data) + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool ReadFrameMeta(int fd, std::string* meta) {
  uint8_t header[kFrameHeaderBytes];
  FrameHeader h;
  if (!ReadAll(fd, header, sizeof(header)) ||
      !DecodeFrameHeader(header, FrameLimits{1024, 0}, &h).ok()) {
    return false;
  }
  meta->assign(h.meta_len, '\0');
  return ReadAll(fd, meta->data(), meta->size());
}

// A peer handshake with a rank's TcpTransport, played with blocking calls so only the
// handshake's round trips and HMACs are timed (not the transport's own connect path).
TEST(HandshakeCostTest, PeerHandshakeAgainstABareConnect) {
  TcpTransportOptions o;
  o.job_id = "cost";
  o.world_size = 1000;  // room for a fresh connecting rank every time
  o.secret = *auth::Secret::Generate();
  auto transport = TcpTransport::Create(o);
  ASSERT_TRUE(transport.ok());
  const int port =
      std::stoi((*transport)->address().substr((*transport)->address().rfind(':') + 1));
  std::vector<double> bare, shaken;
  for (int rank = 1; rank < 201; ++rank) {
    auto start = Clock::now();
    int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    const auto connected = Clock::now();
    bare.push_back(Micros(connected - start));
    const auth::Credentials me = Creds(rank, 1000, o.secret);
    auth::Connector c(auth::Channel::kPeer, &me, 0);
    std::string challenge, ack;
    ASSERT_TRUE(SendFrame(fd, FrameType::kHello, *c.Hello()));
    ASSERT_TRUE(ReadFrameMeta(fd, &challenge));
    ASSERT_TRUE(SendFrame(fd, FrameType::kProof, *c.Proof(challenge)));
    ASSERT_TRUE(ReadFrameMeta(fd, &ack));
    ASSERT_TRUE(c.CheckAck(ack).ok());
    shaken.push_back(Micros(Clock::now() - connected));
    ::close(fd);
  }
  const double b = Median(bare), h = Median(shaken);
  std::printf(
      "peer handshake with a TcpTransport: median %.1f us on top of a %.1f us TCP "
      "connect, over %zu connections\n",
      h, b, shaken.size());
  EXPECT_LT(h, 50000.0);
}

TEST(HandshakeCostTest, TransportFirstMessageAgainstSecond) {
  std::vector<double> first, second;
  for (int i = 0; i < 40; ++i) {
    TcpTransportOptions o;
    o.job_id = "cost";
    o.world_size = 2;
    o.secret = *auth::Secret::Generate();
    TcpTransportOptions o1 = o;
    o1.rank = 1;
    auto t0 = TcpTransport::Create(o);
    auto t1 = TcpTransport::Create(o1);
    ASSERT_TRUE(t0.ok() && t1.ok());
    std::vector<std::string> addresses = {(*t0)->address(), (*t1)->address()};
    ASSERT_TRUE((*t0)->SetPeers(addresses).ok());
    ASSERT_TRUE((*t1)->SetPeers(addresses).ok());
    for (int round = 0; round < 2; ++round) {
      uint8_t out = 1, in = 0;
      MessageHeader h;
      h.seq = static_cast<uint64_t>(round + 1);
      std::promise<Status> sent, received;
      auto start = Clock::now();
      (*t1)->Recv(0, h, &in, 1, [&](Status s) { received.set_value(s); });
      (*t0)->Send(1, h, &out, 1, [&](Status s) { sent.set_value(s); });
      ASSERT_TRUE(received.get_future().get().ok());
      (round == 0 ? first : second).push_back(Micros(Clock::now() - start));
      ASSERT_TRUE(sent.get_future().get().ok());
    }
  }
  const double f = Median(first), s = Median(second);
  std::printf(
      "TCP transport: first message %.1f us (connect + handshake), next %.1f us (the "
      "handshake and connect add %.1f us, once per pair of ranks)\n",
      f, s, f - s);
  EXPECT_LT(f, 50000.0);
}

}  // namespace
}  // namespace gyre
