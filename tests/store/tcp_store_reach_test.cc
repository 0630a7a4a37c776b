// Reaching a TcpStore's server: a peer that answers but is not a gyre store fails at once,
// naming what it answered; a store that cannot be reached is retried, with a line now and
// then saying so, until the deadline. Real sockets on 127.0.0.1, ports from bind 0.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "core/store/store.h"
#include "core/store/tcp_store.h"
#include "glog/logging.h"
#include "tests/store/store_test_util.h"
#include "tests/support/loopback_listener.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;
using ::testing::Not;

// The WARNING lines logged while it exists.
class WarningLines : public google::LogSink {
 public:
  WarningLines() { google::AddLogSink(this); }
  ~WarningLines() override { google::RemoveLogSink(this); }
  using google::LogSink::send;
  void send(google::LogSeverity severity, const char*, const char*, int,
            const google::LogMessageTime&, const char* message, size_t message_len) override {
    if (severity != google::GLOG_WARNING) return;
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(message, message_len);
  }
  // The lines that contain `part`.
  std::vector<std::string> With(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const std::string& line : lines_) {
      if (line.find(part) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// Reports soon and often, for a test to see several within a few seconds.
TcpStoreConnectOptions Often() {
  TcpStoreConnectOptions options;
  options.first_report = Millis(500);
  options.report_every = Seconds(1);
  return options;
}

// A server of another protocol on 127.0.0.1 (a kernel-picked port): every connection is
// read from once, sent `answer` and closed, as often as a client comes.
class ForeignServer {
 public:
  // `reset`: the connection is closed with a reset (RST), not an orderly end (FIN).
  explicit ForeignServer(std::string answer, bool reset = false)
      : answer_(std::move(answer)), reset_(reset) {
    listener_ = gyre::testing::ListenOnLoopback(&port_);
    EXPECT_GE(listener_, 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ForeignServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }
  int served() const { return served_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, 2000) > 0) {
        char buf[512];
        [[maybe_unused]] ssize_t n = ::read(fd, buf, sizeof(buf));
      }
      testing::SendRaw(fd, answer_);
      if (reset_) {
        ::usleep(50 * 1000);  // the answer arrives first
        linger hard{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      }
      ::close(fd);
      ++served_;
    }
  }

  const std::string answer_;
  const bool reset_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::thread thread_;
};

// An HTTP server on the store's port answered 400, whose "HTTP" the client read as a frame
// length of 1347703880 bytes: "not a gyre store server", and then it tried again, silently,
// until the rendezvous deadline (60 s by default). It fails at once, showing the answer.
TEST(TcpStoreReachTest, AnHttpServerIsNotAGyreStoreAtOnce) {
  ForeignServer http("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = TcpStore::Connect("127.0.0.1", http.port(), In(Seconds(20)));
  const Duration took = SteadyClock::Get()->Now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status();
  const std::string& message = store.status().message();
  EXPECT_THAT(message, HasSubstr("tcp://127.0.0.1:" + std::to_string(http.port())));
  EXPECT_THAT(message, HasSubstr("answered \"HTTP/1.1 400 Bad Request\""));
  EXPECT_THAT(message, HasSubstr("not a gyre store"));
  EXPECT_LT(took, Seconds(2)) << FormatDuration(took);
  EXPECT_EQ(http.served(), 1) << "asked again after an answer of another protocol";
}

// So does it through OpenStore, as a rank opens GYRE_STORE.
TEST(TcpStoreReachTest, OpenStoreOfAnHttpServerFailsAtOnce) {
  ForeignServer http("HTTP/1.0 400 Bad request\r\n\r\n");
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = OpenStore("tcp://127.0.0.1:" + std::to_string(http.port()), In(Seconds(20)));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("answered \"HTTP/1.0 400 Bad request\""));
  const Duration took = SteadyClock::Get()->Now() - start;
  EXPECT_LT(took, Seconds(2)) << FormatDuration(took);
}

// A short answer cut off by the peer's close (no gyre store does that: one that turns a
// connection away closes it before answering) is another protocol too.
TEST(TcpStoreReachTest, AShortAnswerAndACloseIsNotAGyreStore) {
  ForeignServer other(std::string("no\n"));
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = TcpStore::Connect("127.0.0.1", other.port(), In(Seconds(20)));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("answered \"no\""));
  EXPECT_THAT(store.status().message(), HasSubstr("not a gyre store"));
  const Duration took = SteadyClock::Get()->Now() - start;
  EXPECT_LT(took, Seconds(2)) << FormatDuration(took);
}

// So is one cut off by a reset, as a service that closes without reading all it was sent
// ends its connections.
TEST(TcpStoreReachTest, AShortAnswerAndAResetIsNotAGyreStore) {
  ForeignServer other(std::string("no\n"), /*reset=*/true);
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = TcpStore::Connect("127.0.0.1", other.port(), In(Seconds(20)));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("answered \"no\""));
  const Duration took = SteadyClock::Get()->Now() - start;
  EXPECT_LT(took, Seconds(2)) << FormatDuration(took);
}

// Unprintable bytes of an answer are shown escaped, not written raw to a terminal.
TEST(TcpStoreReachTest, AnUnprintableAnswerIsShownEscaped) {
  ForeignServer other(std::string("\xff\xfe\x01\x02\x1b[2J", 8));
  auto store = TcpStore::Connect("127.0.0.1", other.port(), In(Seconds(20)));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("answered \"\\xff\\xfe\\x01\\x02\\x1b[2J\""));
}

// A store not listening (yet) is retried until the deadline, as one that starts late must
// be; that went on for the whole rendezvous deadline without a word. Now a line says so
// after a while, then at intervals, and the error at the end names the address, the time
// and the last error.
TEST(TcpStoreReachTest, AStoreNotListeningIsReportedWhileItIsRetried) {
  const int port = testing::FreePort();
  ASSERT_GT(port, 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  WarningLines log;
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = TcpStore::Connect("127.0.0.1", port, In(Millis(3500)), auth::Credentials(), Often());
  const Duration took = SteadyClock::Get()->Now() - start;
  ASSERT_EQ(store.status().code(), StatusCode::kDeadlineExceeded) << store.status();
  EXPECT_GE(took, Millis(3400)) << FormatDuration(took);
  const std::string& message = store.status().message();
  EXPECT_THAT(message, HasSubstr("could not connect to " + url + " after 3."));
  EXPECT_THAT(message, HasSubstr("last error: connect failed: Connection refused"));
  // At 0.5, 1.5 and 2.5 s; none at 3.5 s, as the error comes then.
  const std::vector<std::string> lines = log.With("still trying to reach the store at " + url);
  EXPECT_EQ(lines.size(), 3u) << Joined(lines);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0], HasSubstr("(for 1 s; last error: connect failed: Connection refused); "
                                  "giving up in 3 s"));
  if (lines.size() >= 2) {
    EXPECT_THAT(lines[1], HasSubstr("(for 2 s; "));
  }
}

// By default the first line comes after 5 s: a store that comes up within a few seconds, as
// gyrerun's does, costs no line.
TEST(TcpStoreReachTest, NoLineBeforeFiveSecondsByDefault) {
  const int port = testing::FreePort();
  WarningLines log;
  auto store = TcpStore::Connect("127.0.0.1", port, In(Millis(1500)));
  ASSERT_EQ(store.status().code(), StatusCode::kDeadlineExceeded) << store.status();
  EXPECT_THAT(log.With("still trying"), ::testing::IsEmpty());
}

// An attempt that hangs (a peer that accepted the connection but does not answer; a host
// that drops the SYN) is reported while it lasts, not only between attempts.
TEST(TcpStoreReachTest, AnAttemptThatHangsIsReportedWhileItLasts) {
  int port = 0;
  const int listener = gyre::testing::ListenOnLoopback(&port, 4);
  ASSERT_GE(listener, 0);
  WarningLines log;
  auto store = TcpStore::Connect("127.0.0.1", port, In(Millis(2000)), auth::Credentials(), Often());
  ::close(listener);
  ASSERT_EQ(store.status().code(), StatusCode::kDeadlineExceeded) << store.status();
  const std::vector<std::string> lines = log.With("still trying to reach the store");
  ASSERT_GE(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("waiting for the handshake's answer, no answer yet"));
}

// A host name that does not resolve is retried too (a store host's name may be published
// after the ranks start), and reported like the rest.
TEST(TcpStoreReachTest, AHostThatDoesNotResolveIsReportedWhileItIsRetried) {
  WarningLines log;
  auto store =
      TcpStore::Connect("no-such-host.invalid", 1, In(Millis(2000)), auth::Credentials(), Often());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("tcp://no-such-host.invalid:1"));
  const std::vector<std::string> lines =
      log.With("still trying to reach the store at tcp://no-such-host.invalid:1");
  ASSERT_GE(lines.size(), 1u);
  EXPECT_THAT(lines[0], Not(HasSubstr("last error: tcp://")));
}

}  // namespace
}  // namespace gyre::store
