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
