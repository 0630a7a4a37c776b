// TcpStoreServer's connection cap: it serves as many connections as it was sized for (one per
// rank plus the tools'), refuses the next one at once, and logs the cap and how to raise it.
// Real sockets on 127.0.0.1, the port from bind 0.
#include <glog/logging.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/store/tcp_store.h"
#include "core/store/tcp_store_server.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;
using ::testing::Not;

// Collects the WARNING lines logged while it exists.
class WarningCollector : public google::LogSink {
 public:
  WarningCollector() { google::AddLogSink(this); }
  ~WarningCollector() override { google::RemoveLogSink(this); }
  using google::LogSink::send;
  void send(google::LogSeverity severity, const char*, const char*, int,
            const google::LogMessageTime&, const char* message, size_t message_len) override {
    if (severity != google::GLOG_WARNING) return;
    std::lock_guard<std::mutex> lock(mu_);
    text_.append(message, message_len).append("\n");
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  std::mutex mu_;
  std::string text_;
};

std::unique_ptr<TcpStoreServer> ServerWithCap(int max_connections, const std::string& hint) {
  TcpStoreServer::Options options;
  options.max_connections = max_connections;
  options.max_connections_hint = hint;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Opens `n` authenticated connections; every one must complete its handshake.
std::vector<int> Hold(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = testing::ConnectAuthenticated(port);
    EXPECT_GE(fd, 0) << "connection " << i + 1 << " of " << n << " was not served";
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

TEST(StoreCapTest, ConnectionsForCoversEveryRankAndTheTools) {
  EXPECT_EQ(TcpStoreServer::ConnectionsFor(4), 4 + TcpStoreServer::kToolConnections);
  EXPECT_EQ(TcpStoreServer::ConnectionsFor(4096), 4096 + TcpStoreServer::kToolConnections);
  EXPECT_EQ(TcpStoreServer::ConnectionsFor(0), 1 + TcpStoreServer::kToolConnections);
  EXPECT_EQ(TcpStoreServer::ConnectionsFor(1 << 30),
            TcpStoreServer::kMaxRanks + TcpStoreServer::kToolConnections);
}

TEST(StoreCapTest, SmallCapRefusesTheNextConnectionAndSaysHowToRaiseIt) {
  WarningCollector warnings;
  auto server = ServerWithCap(4, "raise it with --test_cap");
  ASSERT_NE(server, nullptr);
  std::vector<int> held = Hold(server->port(), 4);
  ASSERT_EQ(held.size(), 4u);
  const int fifth = testing::ConnectRaw(server->port());
  ASSERT_GE(fifth, 0);
  EXPECT_TRUE(testing::WaitForEof(fifth, Seconds(5)));
  ::close(fifth);
  EXPECT_EQ(server->dropped_connections(), 1);
  EXPECT_THAT(warnings.text(), HasSubstr("already 4 connections, the cap of 4"));
  EXPECT_THAT(warnings.text(), HasSubstr("raise it with --test_cap"));
  // The cap counts live connections: one closed, a rank gets in and is served.
  ::close(held.back());
  held.pop_back();
  Status served;
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto store = TcpStore::Connect("127.0.0.1", server->port(), In(Seconds(5)));
    served = store.ok() ? (*store)->Set("k", "v", In(Seconds(5))) : store.status();
    if (served.ok()) break;
    ::usleep(20000);  // the server may not have seen the close yet
  }
  EXPECT_TRUE(served.ok()) << served;
  CloseAll(held);
}

TEST(StoreCapTest, LargerCapAcceptsMore) {
  WarningCollector warnings;
  const int cap = TcpStoreServer::ConnectionsFor(16);
  auto server = ServerWithCap(cap, "raise it with --test_cap");
  ASSERT_NE(server, nullptr);
  std::vector<int> held = Hold(server->port(), cap);
  EXPECT_EQ(held.size(), static_cast<size_t>(cap));
  EXPECT_EQ(server->dropped_connections(), 0);
  EXPECT_THAT(warnings.text(), Not(HasSubstr("the cap of")));
  const int over = testing::ConnectRaw(server->port());
  ASSERT_GE(over, 0);
  EXPECT_TRUE(testing::WaitForEof(over, Seconds(5)));
  ::close(over);
  EXPECT_THAT(warnings.text(), HasSubstr("the cap of " + std::to_string(cap)));
  CloseAll(held);
}

TEST(StoreCapTest, CapBelowOneIsRefusedAtStart) {
  TcpStoreServer::Options options;
  options.max_connections = 0;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("max_connections must be at least 1, not 0"));
}

}  // namespace
}  // namespace gyre::store
