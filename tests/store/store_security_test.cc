// The stores against strangers. TcpStoreServer: a wrong secret, another job, a replayed
// handshake, garbage and requests before the handshake, a slow sender and hundreds of idle
// connections, each refused and counted while real clients go on being served exactly.
// FileStore: folders that others could write are refused.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "core/auth/fd_handshake.h"
#include "core/store/file_store.h"
#include "core/store/store_wire.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_server.h"
#include "proto/peer.pb.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;
using ::testing::Not;

auth::Secret JobSecret() { return *auth::Secret::FromBytes("store test secret: 32 bytes long"); }

auth::Credentials Client(auth::Secret secret = JobSecret(), const std::string& job = "job",
                         int rank = 0) {
  auth::Credentials c;
  c.secret = std::move(secret);
  c.job_id = job;
  c.rank = rank;
  c.world_size = 4;
  return c;
}

std::unique_ptr<TcpStoreServer> SecuredServer(TcpStoreServer::Options options = {}) {
  options.secret = JobSecret();
  options.job_id = "job";
  auto server = TcpStoreServer::Start("127.0.0.1", 0, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::string Framed(const std::string& body) {
  std::string out(internal::kFrameHeaderBytes, '\0');
  internal::EncodeFrameLength(static_cast<uint32_t>(body.size()),
                              reinterpret_cast<unsigned char*>(&out[0]));
  return out + body;
}

int OpenDescriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;
}

// Set/Get of fresh values on its own connection until stopped; every answer must be exact.
class ClientLoop {
 public:
  explicit ClientLoop(int port) {
    thread_ = std::thread([this, port] {
      auto store = TcpStore::Connect("127.0.0.1", port, In(Seconds(5)), Client());
      if (!store.ok()) {
        failure_ = store.status();
        return;
      }
      for (int i = 0; !stop_; ++i) {
        const std::string key = "loop/" + std::to_string(i % 16), value = std::to_string(i);
        Status set = (*store)->Set(key, value, In(Seconds(5)));
        StatusOr<std::string> got = (*store)->Get(key, In(Seconds(5)));
        if (!set.ok() || !got.ok() || *got != value) {
          failure_ = !set.ok() ? set : !got.ok() ? got.status() : InternalError("wrong value");
          return;
        }
        ++rounds_;
      }
    });
  }
  Status Stop() {
    stop_ = true;
    thread_.join();
    return failure_;
  }
  int64_t rounds() const { return rounds_; }
  // Waits (bounded) until the loop has completed more than `n` rounds.
  bool PassedRound(int64_t n) const {
    for (int i = 0; i < 1000 && rounds_ <= n; ++i) std::this_thread::sleep_for(Millis(10));
    return rounds_ > n;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> rounds_{0};
  Status failure_;
  std::thread thread_;
};

TEST(StoreSecurityTest, RightSecretIsServed) {
  auto server = SecuredServer();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), In(Seconds(5)), Client());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
  EXPECT_EQ(*(*store)->Get("k", In(Seconds(5))), "v");
  EXPECT_EQ(server->refusals().total(), 0);
}

TEST(StoreSecurityTest, WrongSecretOrJobIsRefusedAtOnceAndCounted) {
  auto server = SecuredServer();
  struct Case {
    const char* name;
    auth::Credentials who;
    auth::Refusal refusal;
  };
  const Case cases[] = {
      {"wrong secret", Client(*auth::Secret::Generate()), auth::Refusal::kBadProof},
      {"no secret", Client(auth::Secret()), auth::Refusal::kBadProof},
      {"other job", Client(JobSecret(), "other-job"), auth::Refusal::kOtherJob},
  };
  for (const Case& c : cases) {
    const int64_t before = server->refusals().count(c.refusal);
    TimePoint start = SteadyClock::Get()->Now();
    auto store = TcpStore::Connect("127.0.0.1", server->port(), In(Seconds(10)), c.who);
    ASSERT_FALSE(store.ok()) << c.name;
    EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status();
    EXPECT_THAT(store.status().message(), HasSubstr("refused the handshake"));
    EXPECT_THAT(store.status().message(), Not(HasSubstr("this is job")));  // nothing leaked
    EXPECT_LT(SteadyClock::Get()->Now() - start, Seconds(2)) << c.name << ": not retried";
    EXPECT_EQ(server->refusals().count(c.refusal), before + 1) << c.name;
  }
  // Through OpenStore too, which is how ranks get there.
  auto opened = OpenStore(server->url(), In(Seconds(5)), Client(auth::Secret()));
  EXPECT_EQ(opened.status().code(), StatusCode::kUnavailable) << opened.status();
  EXPECT_TRUE(OpenStore(server->url(), In(Seconds(5)), Client()).ok());
}

// gyre-store without --secret_file and a job with a secret (gyrerun makes one per job): the
// rank's error says how to match the two.
TEST(StoreSecurityTest, AStoreWithoutASecretRefusesAJobWithOneAndSaysHowToMatch) {
  TcpStoreServer::Options options;
  options.job_id = "job";
  auto server = TcpStoreServer::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = TcpStore::Connect("127.0.0.1", (*server)->port(), In(Seconds(10)), Client());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr("A gyre-store started without --secret_file has no secret, and gyrerun "
                        "makes one for every job unless given --secret_file: give both the same "
                        "file"));
  EXPECT_EQ((*server)->refusals().count(auth::Refusal::kBadProof), 1);
}

TEST(StoreSecurityTest, ReplayedHandshakeIsRefused) {
  auto server = SecuredServer();
  const auth::Credentials me = Client();
  // Record what a genuine client sends.
  int genuine = testing::ConnectRaw(server->port());
  auth::Connector connector(auth::Channel::kStore, &me, auth::kNoRank);
  const std::string hello = *connector.Hello();
  const Deadline deadline = In(Seconds(5));
  ASSERT_TRUE(auth::WriteHandshakeMessage(genuine, hello, deadline, "genuine").ok());
  std::string challenge, ack;
  ASSERT_TRUE(auth::ReadHandshakeMessage(genuine, &challenge, deadline, "genuine").ok());
  const std::string proof = *connector.Proof(challenge);
  ASSERT_TRUE(auth::WriteHandshakeMessage(genuine, proof, deadline, "genuine").ok());
  ASSERT_TRUE(auth::ReadHandshakeMessage(genuine, &ack, deadline, "genuine").ok());
  ASSERT_TRUE(connector.CheckAck(ack).ok());
  ::close(genuine);

  int replay = testing::ConnectRaw(server->port());
  ASSERT_TRUE(auth::WriteHandshakeMessage(replay, hello, deadline, "replay").ok());
  ASSERT_TRUE(auth::ReadHandshakeMessage(replay, &challenge, deadline, "replay").ok());
  ASSERT_TRUE(auth::WriteHandshakeMessage(replay, proof, deadline, "replay").ok());
  EXPECT_TRUE(testing::WaitForEof(replay, Seconds(5)));
  ::close(replay);
  EXPECT_EQ(server->refusals().count(auth::Refusal::kReplay), 1);
}

TEST(StoreSecurityTest, NothingIsServedBeforeTheHandshake) {
  auto server = SecuredServer();
  // A well-formed Set as the very first frame: refused unread, and the key never appears.
  proto::StoreRequest set;
  set.set_request_id(1);
  set.set_op(proto::STORE_OP_SET);
  set.add_keys("planted");
  set.set_value("evil");
  std::string frame;
  ASSERT_TRUE(internal::EncodeFrame(set, &frame));
  int fd = testing::ConnectRaw(server->port());
  ASSERT_TRUE(testing::SendRaw(fd, frame));
  std::string answer;
  EXPECT_TRUE(testing::WaitForEof(fd, Seconds(5), &answer));
  EXPECT_TRUE(answer.empty());  // not even an error response
  ::close(fd);
  auto store = TcpStore::Connect("127.0.0.1", server->port(), In(Seconds(5)), Client());
  ASSERT_TRUE(store.ok());
  auto planted = (*store)->TryGet("planted", In(Seconds(5)));
  ASSERT_TRUE(planted.ok());
  EXPECT_FALSE(planted->has_value());
  EXPECT_EQ(server->refusals().count(auth::Refusal::kProtocol), 1);
}

TEST(StoreSecurityTest, GarbageBeforeTheHandshakeIsDroppedWithItsReason) {
  auto server = SecuredServer();
  ClientLoop loop(server->port());
  ASSERT_TRUE(loop.PassedRound(0));
  std::mt19937 rng(7);
  std::string noise;
  for (int i = 0; i < 600; ++i) noise += static_cast<char>(rng());
  proto::PeerHello wrong_magic;
  wrong_magic.set_magic(0x12345678);
  std::string hello_with_wrong_magic = Framed(wrong_magic.SerializeAsString());
  const std::string garbage[] = {
      Framed(noise),                                   // random bytes in a frame under the cap
      std::string("\xff\xff\xff\xff", 4),              // a huge length prefix
      std::string("\x01\x04\x00\x00", 4),              // 1025: over the handshake cap
      hello_with_wrong_magic,                          // a hello without the gyre magic
      Framed(std::string("\x0a\x03\x01\x02\x03", 5)),  // an unknown message
  };
  for (const std::string& bytes : garbage) {
    int fd = testing::ConnectRaw(server->port());
    ASSERT_TRUE(testing::SendRaw(fd, bytes));
    EXPECT_TRUE(testing::WaitForEof(fd, Seconds(5)));
    ::close(fd);
  }
  {  // a truncated hello, then the writer goes away
    int fd = testing::ConnectRaw(server->port());
    ASSERT_TRUE(testing::SendRaw(fd, std::string("\x40\x00\x00\x00", 4) + "abc"));
    ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(testing::WaitForEof(fd, Seconds(5)));
    ::close(fd);
  }
  // Nothing sent, then closed: a connector that left (gyrerun checking that the store answers
  // does this), counted as abandoned rather than as garbage.
  for (int i = 0; i < 2; ++i) {
    int fd = testing::ConnectRaw(server->port());
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  for (int i = 0; i < 500 && server->refusals().total() < 8; ++i) ::usleep(10 * 1000);
  const int64_t rounds = loop.rounds();
  EXPECT_TRUE(loop.PassedRound(rounds));
  Status loop_status = loop.Stop();
  EXPECT_TRUE(loop_status.ok()) << loop_status;
  EXPECT_EQ(server->refusals().total(), 8);
  EXPECT_EQ(server->refusals().count(auth::Refusal::kProtocol), 2);
  EXPECT_EQ(server->refusals().count(auth::Refusal::kMalformed), 4);
  EXPECT_EQ(server->refusals().count(auth::Refusal::kAbandoned), 2);
}

// Anyone who can reach the port can make the store refuse a connection: one WARNING line
// each let them grow its log without bound (206 connections, 207 lines). At most 20 lines a
// minute are written; every refusal is still counted by reason.
TEST(StoreSecurityTest, RefusalsAreLoggedWithinABudgetAndAllCounted) {
  auto server = SecuredServer();
  ::testing::internal::CaptureStderr();
  const std::string garbage = Framed(std::string(40, '\x5a'));
  for (int i = 0; i < 60; ++i) {
    int fd = testing::ConnectRaw(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(testing::SendRaw(fd, garbage));
    EXPECT_TRUE(testing::WaitForEof(fd, Seconds(5)));
    ::close(fd);
  }
  for (int i = 0; i < 500 && server->refusals().total() < 60; ++i) ::usleep(10 * 1000);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server->refusals().total(), 60);
  size_t lines = 0;
  for (size_t at = err.find("refused the connection from"); at != std::string::npos;
       at = err.find("refused the connection from", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 20u) << err;
}

TEST(StoreSecurityTest, OneBytePerTickSenderIsCutOff) {
  TcpStoreServer::Options options;
  options.handshake_timeout = Millis(500);
  auto server = SecuredServer(options);
  auth::Credentials me = Client();
  auth::Connector connector(auth::Channel::kStore, &me, auth::kNoRank);
  const std::string hello = Framed(*connector.Hello());
  // The deadline runs from the accept, so the clock starts before the connect.
  TimePoint start = SteadyClock::Get()->Now();
  int fd = testing::ConnectRaw(server->port());
  bool closed = false;
  for (size_t i = 0; i < hello.size() && !closed; ++i) {
    if (!testing::SendRaw(fd, hello.substr(i, 1))) break;
    closed = testing::WaitForEof(fd, Millis(100));
  }
  if (!closed) closed = testing::WaitForEof(fd, Seconds(2));
  Duration took = SteadyClock::Get()->Now() - start;
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GE(took, Millis(450));
  // The whole hello at a byte per tick takes over 6 s: a deadline that each byte pushed
  // back would pass this bound.
  ASSERT_GT(hello.size() * 100, 4000u + 500u);
  EXPECT_LT(took, Seconds(4));
  EXPECT_EQ(server->refusals().count(auth::Refusal::kTimeout), 1);
}

TEST(StoreSecurityTest, FiveHundredIdleConnectionsTieUpNothing) {
  TcpStoreServer::Options options;
  options.handshake_timeout = Seconds(1);
  options.max_unauthenticated = 64;
  auto server = SecuredServer(options);
  const int fds_before = OpenDescriptors();
  // A running job's client, connected before the flood.
  ClientLoop loop(server->port());
  ASSERT_TRUE(loop.PassedRound(0));
  const int64_t rounds_before_flood = loop.rounds();
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    int fd = testing::ConnectRaw(server->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  for (int fd : idle) {
    EXPECT_TRUE(testing::WaitForEof(fd, Seconds(5)));
    ::close(fd);
  }
  EXPECT_TRUE(loop.PassedRound(rounds_before_flood));  // served all through the flood
  Status loop_status = loop.Stop();
  EXPECT_TRUE(loop_status.ok()) << loop_status;
  const auth::RefusalCounters& refused = server->refusals();
  EXPECT_GT(refused.count(auth::Refusal::kOverCap), 0);
  EXPECT_EQ(refused.count(auth::Refusal::kOverCap) + refused.count(auth::Refusal::kTimeout), 500);
  // The loop's own connection is gone too, so the count drops to at most where it was.
  for (int i = 0; i < 200 && OpenDescriptors() > fds_before; ++i) {
    std::this_thread::sleep_for(Millis(10));
  }
  EXPECT_LE(OpenDescriptors(), fds_before);
}

// Strangers who hold every handshake slot with idle connections (no secret needed) cannot
// lock the job's ranks out: at the cap the longest waiting one is cut off, the newcomer is
// served, and the refusal is counted.
TEST(StoreSecurityTest, IdleStrangersAtTheHandshakeCapCannotLockRanksOut) {
  TcpStoreServer::Options options;
  options.handshake_timeout = Seconds(60);  // the strangers would hold their slots all test
  options.max_unauthenticated = 8;
  auto server = SecuredServer(options);
  std::vector<int> idle;
  for (int i = 0; i < options.max_unauthenticated; ++i) {
    const int fd = testing::ConnectRaw(server->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // The accepts happen on the server's thread: wait until all eight are in the handshake,
  // which a ninth stranger shows by cutting off the first.
  const int ninth = testing::ConnectRaw(server->port());
  ASSERT_GE(ninth, 0);
  EXPECT_TRUE(testing::WaitForEof(idle.front(), Seconds(5)));
  const TimePoint start = SteadyClock::Get()->Now();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), In(Seconds(5)), Client());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_LT(SteadyClock::Get()->Now() - start, Seconds(2));
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
  auto got = (*store)->Get("k", In(Seconds(5)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  EXPECT_TRUE(testing::WaitForEof(idle[1], Seconds(5)));  // the rank's connection took its slot
  EXPECT_GE(server->refusals().count(auth::Refusal::kOverCap), 2);
  for (int fd : idle) ::close(fd);
  ::close(ninth);
}

// ---- FileStore ----------------------------------------------------------------------------

TEST(FileStoreSecurityTest, NewFolderIsPrivate) {
  testing::TempDir tmp;
  auto store = FileStore::Open(tmp.path() + "/new");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
  struct stat st {};
  ASSERT_EQ(::stat((tmp.path() + "/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((tmp.path() + "/new/k.k").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(FileStoreSecurityTest, WorldWritableFolderIsRefused) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/open";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);  // like /tmp
  auto store = FileStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr("writable by every user (mode 1777)"));
  EXPECT_THAT(store.status().message(), HasSubstr(dir));
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_TRUE(FileStore::Open(dir).ok());
}

TEST(FileStoreSecurityTest, FolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder away";
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/theirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  auto store = FileStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("owned by uid 65534"));
}

}  // namespace
}  // namespace gyre::store
