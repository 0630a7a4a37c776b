// The control endpoint under a crowd of idle strangers: they hold connections without a
// word, yet a real query (the job's secret) is still answered, so a live rank is never taken
// for a dead one, and the strangers cut off at the cap are counted. Garbage on it is dropped
// with a logged reason.
#include <arpa/inet.h>
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <vector>

#include "core/auth/secret.h"
#include "core/job/bootstrap.h"
#include "core/job/control.h"
#include "core/transport/loopback.h"
#include "tests/support/forwarding_transport.h"

namespace gyre::job {
namespace {

int ConnectIdle(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A one-rank world's rank 0 with its control server (not started) and the job's credentials.
struct Rank0 {
  explicit Rank0(const std::string& job,
                 std::unique_ptr<Transport> transport = std::move(LoopbackHub::CreateWorld(1)[0]))
      : comm(std::move(transport), CommOptions()),
        credentials(Credentials(job)),
        server(&comm, RankInfo{0, ::getpid(), "here", "127.0.0.1:1"}, credentials) {}
  static auth::Credentials Credentials(const std::string& job) {
    auth::Credentials c;
    c.secret = *auth::Secret::Generate();
    c.job_id = job;
    c.rank = 0;
    return c;
  }
  Communicator comm;
  auth::Credentials credentials;
  ControlServer server;
};

TEST(ControlServerTest, IdleStrangersAtTheCapCannotMakeALiveRankLookDead) {
  Rank0 rank0("control-cap");
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  ControlServer& server = rank0.server;
  const auth::Credentials& credentials = rank0.credentials;

  // More idle connections than the cap, none sending a byte (each would sit for 2 s).
  std::vector<int> idle;
  for (int i = 0; i < ControlServer::kMaxActive + 8; ++i) {
    int fd = ConnectIdle(server.address());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  ::usleep(300 * 1000);  // every one accepted by now

  proto::ControlRequest q;
  q.mutable_status();
  auth::Credentials asker = credentials;
  asker.rank = auth::kNoRank;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const QueryResult r = QueryControl(server.address(), 0, q, Seconds(1), asker);
    EXPECT_EQ(r.reach, Reach::kAnswered) << "attempt " << attempt << ": " << r.error;
  }
  EXPECT_GE(server.over_cap(), 8) << "the strangers cut off at the cap are not counted";
  EXPECT_GE(server.refused(), server.over_cap());
  for (int fd : idle) ::close(fd);
  server.Stop();
}

// Bytes that are not a handshake are dropped, counted, and logged with the reason and where
// they came from (the data port, the store and the client socket did so already).
TEST(ControlServerTest, GarbageIsDroppedWithALoggedReason) {
  Rank0 rank0("control-garbage");
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  ControlServer& server = rank0.server;
  ::testing::internal::CaptureStderr();
  const int fd = ConnectIdle(server.address());
  ASSERT_GE(fd, 0);
  const std::string garbage(4096, '\x7f');
  ASSERT_EQ(::write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  for (int i = 0; i < 300 && server.refused() == 0; ++i) ::usleep(10 * 1000);
  ::close(fd);
  ::usleep(50 * 1000);  // the log line follows the count
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server.refused(), 1);
  EXPECT_NE(err.find("rank 0 refused a control connection from 127.0.0.1:"), std::string::npos)
      << err;
  EXPECT_NE(err.find("[malformed]"), std::string::npos) << err;
  server.Stop();
}

// Anyone who can reach the control port can make it refuse a connection; at most 20 of the
// refusals a minute are logged, and the first line after a held-back run says how many were.
TEST(ControlServerTest, RefusalsAreLoggedWithinABudgetAndAllCounted) {
  Rank0 rank0("control-budget");
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  ControlServer& server = rank0.server;
  ::testing::internal::CaptureStderr();
  const std::string garbage(64, '\x7f');
  for (int i = 0; i < 40; ++i) {
    const int fd = ConnectIdle(server.address());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
    for (int j = 0; j < 300 && server.refused() <= i; ++j) ::usleep(1000);
    ::close(fd);
  }
  ::usleep(50 * 1000);  // the last log line follows the count
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server.refused(), 40);
  size_t lines = 0;
  for (size_t at = err.find("refused a control connection"); at != std::string::npos;
       at = err.find("refused a control connection", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 20u) << err;
  server.Stop();
}

// A query that gave up and closed its connection before the handshake was through (another
// rank's, or gyrectl's, while this process was stopped or slow) was logged as a [malformed]
// refusal at WARNING, the class of garbage and attacks. It is [abandoned], at INFO; a message
// cut off in its middle is still malformed.
TEST(ControlServerTest, AConnectionClosedBetweenMessagesIsAbandonedNotMalformed) {
  Rank0 rank0("control-abandoned");
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  ControlServer& server = rank0.server;
  const bool to_stderr = FLAGS_logtostderr;
  const int min_level = FLAGS_minloglevel;
  FLAGS_logtostderr = true;  // INFO lines too
  FLAGS_minloglevel = 0;
  ::testing::internal::CaptureStderr();
  int fd = ConnectIdle(server.address());
  ASSERT_GE(fd, 0);
  ::close(fd);  // nothing sent
  for (int i = 0; i < 300 && server.refused() < 1; ++i) ::usleep(10 * 1000);
  fd = ConnectIdle(server.address());
  ASSERT_GE(fd, 0);
  const std::string cut = std::string("\x40\x00\x00\x00", 4) + "abc";  // 64 announced, 3 sent
  ASSERT_EQ(::write(fd, cut.data(), cut.size()), static_cast<ssize_t>(cut.size()));
  ::close(fd);
  for (int i = 0; i < 300 && server.refused() < 2; ++i) ::usleep(10 * 1000);
  ::usleep(50 * 1000);  // the log lines follow the counts
  const std::string err = ::testing::internal::GetCapturedStderr();
  FLAGS_logtostderr = to_stderr;
  FLAGS_minloglevel = min_level;
  EXPECT_EQ(server.refused(), 2);
  const size_t abandoned = err.find("[abandoned] (its connector closed it first");
  ASSERT_NE(abandoned, std::string::npos) << err;
  EXPECT_EQ(err[err.rfind('\n', abandoned) + 1], 'I') << "logged as INFO:\n" << err;
  const size_t malformed = err.find("[malformed]");
  ASSERT_NE(malformed, std::string::npos) << err;
  EXPECT_EQ(err[err.rfind('\n', malformed) + 1], 'W') << "logged as WARNING:\n" << err;
  server.Stop();
}

// A loopback transport that has dropped a message of operation 7 for want of memory.
class MemoryShortTransport final : public gyre::testing::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  std::optional<Exhaustion> LastExhaustion() const override {
    return Exhaustion{7, "ResourceExhausted: rank 0 cannot allocate a buffer"};
  }
};

// What the transport dropped for want of memory is in the rank's answer at once, for a call
// the rank has not reached (its monitor knows nothing of it yet).
TEST(ControlServerTest, ADropForWantOfMemoryIsInTheRanksState) {
  Rank0 rank0("control-memory",
              std::make_unique<MemoryShortTransport>(std::move(LoopbackHub::CreateWorld(1)[0])));
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  proto::ControlRequest q;
  q.mutable_status();
  auth::Credentials asker = rank0.credentials;
  asker.rank = auth::kNoRank;
  const QueryResult r = QueryControl(rank0.server.address(), 0, q, Seconds(5), asker);
  ASSERT_EQ(r.reach, Reach::kAnswered) << r.error;
  EXPECT_EQ(r.response.state().exhausted_seq(), 7u);
  EXPECT_EQ(r.response.state().exhausted_error(),
            "ResourceExhausted: rank 0 cannot allocate a buffer");
  EXPECT_EQ(r.response.state().last_started_seq(), 0u);
  rank0.server.Stop();
}

TEST(ControlServerTest, StopStateReadsTheStateAfterTheLastParenthesis) {
  EXPECT_EQ(StopStateOf("123 (python3) T 1 2 3"), "stopped by a signal");
  EXPECT_EQ(StopStateOf("123 (a) b) t 1"), "stopped by a tracer");
  EXPECT_EQ(StopStateOf("123 (T) S 1 2"), "");  // a command named T, sleeping
  EXPECT_EQ(StopStateOf("123 (x) R 1"), "");
  EXPECT_EQ(StopStateOf("123 (x)"), "");
  EXPECT_EQ(StopStateOf(""), "");
}

// A daemon's control endpoint reports its program's pid and, while it is stopped, that it is.
TEST(ControlServerTest, AStoppedProgramIsInTheRanksState) {
  Rank0 rank0("control-program");
  ASSERT_TRUE(rank0.server.Start("127.0.0.1").ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  proto::ControlRequest q;
  q.mutable_status();
  auth::Credentials asker = rank0.credentials;
  asker.rank = auth::kNoRank;
  auto ask = [&] {
    const QueryResult r = QueryControl(rank0.server.address(), 0, q, Seconds(5), asker);
    EXPECT_EQ(r.reach, Reach::kAnswered) << r.error;
    return r.response.state();
  };
  EXPECT_EQ(ask().program_pid(), 0);  // no program yet
  rank0.server.SetProgramPid(child);
  EXPECT_EQ(ask().program_pid(), child);
  EXPECT_EQ(ask().program_state(), "");
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  // The stop is delivered asynchronously: wait (bounded) for the state to read T.
  std::string state;
  for (int i = 0; i < 200 && state.empty(); ++i) {
    state = ask().program_state();
    if (state.empty()) ::usleep(10000);
  }
  EXPECT_EQ(state, "stopped by a signal");
  ::kill(child, SIGCONT);
  for (int i = 0; i < 200 && !state.empty(); ++i) {
    state = ask().program_state();
    if (!state.empty()) ::usleep(10000);
  }
  EXPECT_EQ(state, "");
  rank0.server.SetProgramPid(0);
  EXPECT_EQ(ask().program_pid(), 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  rank0.server.Stop();
}

// A flight folder that cannot hold the record (a file where the folder should be) is the
// folder's fault, not an exhausted resource: a verdict then named "out of disk space" or
// "memory" for a typo in GYRE_FLIGHT_DIR.
TEST(ControlServerTest, AFlightFolderThatIsAFileIsNotAnExhaustedResource) {
  Rank0 rank0("control-flight");
  char file[] = "/tmp/gyre-flight-file-XXXXXX";
  const int fd = ::mkstemp(file);
  ASSERT_GE(fd, 0);
  ::close(fd);
  StatusOr<std::string> written = WriteFlightRecord(&rank0.comm, file);
  ::unlink(file);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), StatusCode::kInvalidArgument) << written.status();
  EXPECT_NE(written.status().message().find("Not a directory"), std::string::npos)
      << written.status();
  char dir[] = "/tmp/gyre-flight-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  StatusOr<std::string> fine = WriteFlightRecord(&rank0.comm, dir);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(*fine, std::string(dir) + "/flight-rank0.json");
  ::unlink(fine->c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace gyre::job
