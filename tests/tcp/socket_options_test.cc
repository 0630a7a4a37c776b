// Per-connection TCP settings: which peers count as on this host, and setting the
// congestion control on real sockets.
#include "core/transport/tcp/socket_options.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gyre {
namespace {

// A connected pair over 127.0.0.1 (port from the kernel), plus the listener.
struct Pair {
  int listener = -1, client = -1, server = -1;
  Pair() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(listener, 1), 0);
    EXPECT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), len), 0);
    server = ::accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~Pair() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

TEST(SocketOptionsTest, LoopbackPeersAreOnThisHostAndUnconnectedSocketsAreNot) {
  Pair pair;
  EXPECT_TRUE(PeerOnThisHost(pair.client));
  EXPECT_TRUE(PeerOnThisHost(pair.server));
  EXPECT_FALSE(PeerOnThisHost(pair.listener));  // listening: no peer
  const int fresh = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_FALSE(PeerOnThisHost(fresh));
  ::close(fresh);
  EXPECT_FALSE(PeerOnThisHost(-1));
}

TEST(SocketOptionsTest, AnIpv4MappedLoopbackPeerIsOnThisHost) {
  const int listener = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (listener < 0) GTEST_SKIP() << "no IPv6 sockets on this machine";
  int off = 0;
  ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  // The client speaks IPv4 from 127.0.0.2 to 127.0.0.1, so the dual-stack listener's end
  // has two different addresses, ::ffff:127.0.0.1 and ::ffff:127.0.0.2: only knowing that a
  // mapped 127.x address is loopback makes the peer local.
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = addr.sin6_port;
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7f000002);
  ASSERT_EQ(::bind(client, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&v4), sizeof(v4)), 0);
  const int server = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  sockaddr_in6 peer{};
  socklen_t peer_len = sizeof(peer);
  ASSERT_EQ(::getpeername(server, reinterpret_cast<sockaddr*>(&peer), &peer_len), 0);
  EXPECT_TRUE(IN6_IS_ADDR_V4MAPPED(&peer.sin6_addr));
  EXPECT_TRUE(PeerOnThisHost(server));
  for (int fd : {listener, client, server}) ::close(fd);
}

TEST(SocketOptionsTest, RenoCanBeSetOnBothEndsAndReadBack) {
  Pair pair;
  for (int fd : {pair.client, pair.server}) {
    ASSERT_TRUE(SetCongestionControl(fd, "reno").ok());
    auto now = CongestionControl(fd);
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    EXPECT_EQ(*now, "reno");
  }
}

TEST(SocketOptionsTest, AnUnknownAlgorithmIsAnErrorNamingItAndChangesNothing) {
  Pair pair;
  auto before = CongestionControl(pair.client);
  ASSERT_TRUE(before.ok());
  Status s = SetCongestionControl(pair.client, "no-such-algorithm");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("no-such-algorithm"), std::string::npos) << s.ToString();
  EXPECT_EQ(*CongestionControl(pair.client), *before);
  EXPECT_FALSE(CongestionControl(-1).ok());
}

}  // namespace
}  // namespace gyre
