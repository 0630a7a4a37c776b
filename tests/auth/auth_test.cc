// The handshake's pieces in isolation: the proof (a known answer pins the transcript
// encoding), constant-time comparison, secret files and their permission checks, and the
// connector and acceptor state machines against every way a connection must be refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/auth/fd_handshake.h"
#include "core/auth/handshake.h"
#include "core/auth/handshake_queue.h"
#include "core/auth/secret.h"
#include "proto/peer.pb.h"

namespace gyre::auth {
namespace {

std::string Bytes(int from, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s.push_back(static_cast<char>(from + i));
  return s;
}

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

Secret MakeSecret(int seed) {
  StatusOr<Secret> s = Secret::FromBytes(Bytes(seed, 32));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Secret();
}

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/gyre-auth-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

// ---- Proof and comparison -----------------------------------------------------------------

TEST(ProofTest, KnownAnswersPinTheTranscriptEncoding) {
  // Computed independently (Python's hmac module) from the encoding in handshake.cc.
  Secret key = *Secret::FromBytes(Bytes(100, 32));
  EXPECT_EQ(
      Hex(ComputeProof(key, false, Channel::kPeer, "job-x", 2, 0, 4, Bytes(0, 32), Bytes(32, 32))),
      "689a15a1d7d218649126f7cc6149f7de30675c5fc5f6b9d55ae52c4bb25e446b");
  EXPECT_EQ(Hex(ComputeProof(Secret(), true, Channel::kStore, "", kNoRank, kNoRank, 0,
                             std::string(32, '\0'), std::string(32, '\xff'))),
            "6ddd7cbc95b2f156819912a057c0f95b6042c182e5fa764b5d71cb0bd6da8527");
}

TEST(ProofTest, EveryFieldChangesTheProof) {
  Secret key = MakeSecret(1);
  const std::string nc = Bytes(0, 32), na = Bytes(50, 32);
  const std::string base = ComputeProof(key, false, Channel::kPeer, "j", 1, 0, 2, nc, na);
  EXPECT_EQ(base.size(), kProofBytes);
  EXPECT_EQ(base, ComputeProof(key, false, Channel::kPeer, "j", 1, 0, 2, nc, na));
  const std::string variants[] = {
      ComputeProof(MakeSecret(2), false, Channel::kPeer, "j", 1, 0, 2, nc, na),
      ComputeProof(Secret(), false, Channel::kPeer, "j", 1, 0, 2, nc, na),
      ComputeProof(key, true, Channel::kPeer, "j", 1, 0, 2, nc, na),
      ComputeProof(key, false, Channel::kStore, "j", 1, 0, 2, nc, na),
      ComputeProof(key, false, Channel::kPeer, "k", 1, 0, 2, nc, na),
      ComputeProof(key, false, Channel::kPeer, "j", 0, 1, 2, nc, na),
      ComputeProof(key, false, Channel::kPeer, "j", 1, 0, 3, nc, na),
      ComputeProof(key, false, Channel::kPeer, "j", 1, 0, 2, na, nc),
  };
  for (const std::string& v : variants) EXPECT_NE(v, base);
}

TEST(ProofTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // an empty proof never passes
}

TEST(ReplayGuardTest, RemembersUpToItsCapacity) {
  ReplayGuard guard(3);
  EXPECT_FALSE(guard.SeenBefore("a"));
  EXPECT_TRUE(guard.SeenBefore("a"));
  EXPECT_FALSE(guard.SeenBefore("b"));
  EXPECT_FALSE(guard.SeenBefore("c"));
  EXPECT_FALSE(guard.SeenBefore("d"));  // "a" is forgotten now
  EXPECT_FALSE(guard.SeenBefore("a"));
  EXPECT_TRUE(guard.SeenBefore("d"));
}

// ---- Secrets ------------------------------------------------------------------------------

TEST(SecretTest, GeneratedSecretsAreLongAndDistinct) {
  Secret a = *Secret::Generate(), b = *Secret::Generate();
  EXPECT_EQ(a.key().size(), kGeneratedSecretBytes);
  EXPECT_NE(a.key(), b.key());
  EXPECT_FALSE(Secret::FromBytes("short").ok());
  EXPECT_TRUE(Secret().empty());
  Secret moved = std::move(a);
  EXPECT_EQ(moved.key().size(), kGeneratedSecretBytes);
}

TEST(SecretTest, FileRoundTripIsOwnerOnly) {
  TempDir dir;
  const std::string path = dir.path() + "/secret";
  Secret s = *Secret::Generate();
  ASSERT_TRUE(WriteSecretFile(path, s).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  StatusOr<Secret> loaded = LoadSecretFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->key(), s.key());
  // An existing file is never overwritten.
  EXPECT_FALSE(WriteSecretFile(path, s).ok());
}

TEST(SecretTest, FilesOthersCanReadOrThatAreNotHexAreRefused) {
  TempDir dir;
  const std::string hex(64, 'a');
  struct Case {
    std::string name, text;
    mode_t mode;
    std::string reason;
  };
  const Case cases[] = {
      {"group-readable", hex, 0640, "mode 0640"},
      {"world-readable", hex, 0604, "mode 0604"},
      {"too-short", "abcd", 0600, "at least 32 hexadecimal digits"},
      {"not-hex", std::string(63, 'a') + "z", 0600, "not an even run of hex digits"},
      {"odd", std::string(63, 'a'), 0600, "hexadecimal digits"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.path() + "/" + c.name;
    WriteFile(path, c.text, c.mode);
    StatusOr<Secret> loaded = LoadSecretFile(path);
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_NE(loaded.status().message().find(c.reason), std::string::npos)
        << c.name << ": " << loaded.status();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status();
  }
  // Whitespace around the digits is fine (an editor's newline).
  WriteFile(dir.path() + "/spaced", "  " + hex + "\n\n", 0600);
  EXPECT_TRUE(LoadSecretFile(dir.path() + "/spaced").ok());
  EXPECT_FALSE(LoadSecretFile(dir.path() + "/missing").ok());
  EXPECT_FALSE(LoadSecretFile(dir.path()).ok());  // a folder
  // A symbolic link, even to a good file, is refused on purpose, and said to be one (it
  // used to read "Too many levels of symbolic links"), with what to do instead.
  const std::string link = dir.path() + "/link";
  ASSERT_EQ(::symlink((dir.path() + "/spaced").c_str(), link.c_str()), 0);
  StatusOr<Secret> linked = LoadSecretFile(link);
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("the secret file " + link +
                                           " is a symbolic link; gyre reads a secret only from "
                                           "a regular file"),
            std::string::npos)
      << linked.status();
  EXPECT_NE(linked.status().message().find("install -m 600"), std::string::npos) << linked.status();
}

TEST(SecretTest, FileOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  TempDir dir;
  const std::string path = dir.path() + "/theirs";
  WriteFile(path, std::string(64, 'b'), 0600);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  StatusOr<Secret> loaded = LoadSecretFile(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("owned by uid 65534"), std::string::npos)
      << loaded.status();
}

TEST(SecretTest, EnvironmentNamesTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/secret";
  Secret s = *Secret::Generate();
  ASSERT_TRUE(WriteSecretFile(path, s).ok());
  ::unsetenv(kSecretFileEnv);
  EXPECT_TRUE(SecretFromEnvironment()->empty());
  ::setenv(kSecretFileEnv, path.c_str(), 1);
  EXPECT_EQ(SecretFromEnvironment()->key(), s.key());
  ::setenv(kSecretFileEnv, (path + ".missing").c_str(), 1);
  Status missing = SecretFromEnvironment().status();
  EXPECT_NE(missing.message().find(kSecretFileEnv), std::string::npos) << missing;
  ::unsetenv(kSecretFileEnv);
}

// ---- State machines -----------------------------------------------------------------------

struct Outcome {
  Status acceptor;  // CheckProof, or Challenge when it failed there
  Refusal refusal = Refusal::kMalformed;
  Status connector;  // CheckAck (only when the acceptor accepted)
};

// Runs one whole handshake between the two state machines.
Outcome RunHandshake(Channel channel, const Credentials& conn, int target_rank,
                     const Credentials& acc, ReplayGuard* guard = nullptr) {
  Outcome out;
  Connector c(channel, &conn, target_rank);
  Acceptor a(channel, &acc, guard);
  StatusOr<std::string> hello = c.Hello();
  EXPECT_TRUE(hello.ok());
  StatusOr<std::string> challenge = a.Challenge(*hello);
  if (!challenge.ok()) {
    out.acceptor = challenge.status();
    out.refusal = a.refusal();
    return out;
  }
  StatusOr<std::string> proof = c.Proof(*challenge);
  EXPECT_TRUE(proof.ok()) << proof.status();
  out.acceptor = a.CheckProof(*proof);
  out.refusal = a.refusal();
  if (out.acceptor.ok()) {
    EXPECT_TRUE(a.authenticated());
    out.connector = c.CheckAck(a.Accept());
  }
  return out;
}

Credentials Rank(int rank, int world, const std::string& job, Secret secret) {
  Credentials c;
  c.secret = std::move(secret);
  c.job_id = job;
  c.rank = rank;
  c.world_size = world;
  return c;
}

TEST(HandshakeTest, SameSecretAuthenticatesBothWays) {
  Outcome o = RunHandshake(Channel::kPeer, Rank(1, 4, "j", MakeSecret(1)), 0,
                           Rank(0, 4, "j", MakeSecret(1)));
  EXPECT_TRUE(o.acceptor.ok()) << o.acceptor;
  EXPECT_TRUE(o.connector.ok()) << o.connector;
}

TEST(HandshakeTest, WithoutASecretOnBothSidesItStillChecksTheJob) {
  Outcome ok =
      RunHandshake(Channel::kStore, Rank(3, 4, "j", Secret()), kNoRank, Rank(kNoRank, 0, "j", {}));
  EXPECT_TRUE(ok.acceptor.ok()) << ok.acceptor;
  EXPECT_TRUE(ok.connector.ok()) << ok.connector;
  Outcome other =
      RunHandshake(Channel::kStore, Rank(3, 4, "k", Secret()), kNoRank, Rank(kNoRank, 0, "j", {}));
  EXPECT_EQ(other.refusal, Refusal::kOtherJob) << other.acceptor;
}

// A side without a secret (a gyre-store started without --secret_file) cannot check the
// proof of a connector that has one; it says which side lacks it and how to match them.
TEST(HandshakeTest, AnAcceptorWithoutASecretSaysSoAndHowToMatch) {
  Outcome o = RunHandshake(Channel::kStore, Rank(3, 4, "j", MakeSecret(1)), kNoRank,
                           Rank(kNoRank, 0, "j", Secret()));
  EXPECT_FALSE(o.acceptor.ok());
  EXPECT_EQ(o.refusal, Refusal::kBadProof) << o.acceptor;
  EXPECT_NE(o.acceptor.message().find("the connector proves a secret and this side has none "
                                      "(give both sides the same --secret_file)"),
            std::string::npos)
      << o.acceptor;
}

TEST(HandshakeTest, EveryMismatchIsRefusedAtTheProofWithItsReason) {
  struct Case {
    const char* name;
    Credentials connector;
    int target;
    Refusal refusal;
    const char* reason;
  };
  const Credentials acceptor = Rank(0, 4, "job", MakeSecret(1));
  const Case cases[] = {
      {"wrong secret", Rank(1, 4, "job", MakeSecret(2)), 0, Refusal::kBadProof, "wrong proof"},
      {"no secret", Rank(1, 4, "job", Secret()), 0, Refusal::kBadProof, "wrong proof"},
      {"other job", Rank(1, 4, "other", MakeSecret(1)), 0, Refusal::kOtherJob,
       "hello for job \"other\", this is job \"job\""},
      {"other world", Rank(1, 5, "job", MakeSecret(1)), 0, Refusal::kWorldMismatch,
       "world of 5 ranks"},
      {"rank out of range", Rank(9, 4, "job", MakeSecret(1)), 0, Refusal::kBadRank, "rank 9"},
      {"itself", Rank(0, 4, "job", MakeSecret(1)), 0, Refusal::kBadRank, "rank 0"},
      {"dialed another rank", Rank(1, 4, "job", MakeSecret(1)), 2, Refusal::kBadProof,
       "wrong proof"},
  };
  for (const Case& c : cases) {
    Outcome o = RunHandshake(Channel::kPeer, c.connector, c.target, acceptor);
    EXPECT_FALSE(o.acceptor.ok()) << c.name;
    EXPECT_EQ(o.refusal, c.refusal) << c.name << ": " << o.acceptor;
    EXPECT_NE(o.acceptor.message().find(c.reason), std::string::npos) << o.acceptor;
  }
}

TEST(HandshakeTest, ReplayedHandshakeIsRefused) {
  const Credentials conn = Rank(1, 2, "j", MakeSecret(1));
  const Credentials acc = Rank(0, 2, "j", MakeSecret(1));
  ReplayGuard guard;
  // Record a real session.
  Connector c(Channel::kPeer, &conn, 0);
  Acceptor first(Channel::kPeer, &acc, &guard);
  std::string hello = *c.Hello();
  std::string proof = *c.Proof(*first.Challenge(hello));
  ASSERT_TRUE(first.CheckProof(proof).ok());

  // Played again to the same endpoint: the nonce is known.
  Acceptor again(Channel::kPeer, &acc, &guard);
  ASSERT_TRUE(again.Challenge(hello).ok());  // a challenge, like for anyone
  Status s = again.CheckProof(proof);
  EXPECT_EQ(again.refusal(), Refusal::kReplay) << s;
  EXPECT_FALSE(again.authenticated());

  // Played to an endpoint that never saw it: the fresh acceptor nonce breaks the proof.
  Acceptor fresh(Channel::kPeer, &acc, nullptr);
  ASSERT_TRUE(fresh.Challenge(hello).ok());
  EXPECT_FALSE(fresh.CheckProof(proof).ok());
  EXPECT_EQ(fresh.refusal(), Refusal::kBadProof);
}

TEST(HandshakeTest, ConnectorRejectsAnAcceptorWithoutTheSecret) {
  const Credentials conn = Rank(1, 2, "j", MakeSecret(1));
  const Credentials impostor = Rank(0, 2, "j", MakeSecret(7));
  Connector c(Channel::kPeer, &conn, 0);
  Acceptor a(Channel::kPeer, &impostor, nullptr);
  std::string proof = *c.Proof(*a.Challenge(*c.Hello()));
  EXPECT_FALSE(a.CheckProof(proof).ok());
  // Even a well-formed ack built with the wrong key does not pass.
  proto::PeerHelloAck forged;
  forged.set_accepted(true);
  forged.set_proof(std::string(kProofBytes, 'x'));
  Status s = c.CheckAck(forged.SerializeAsString());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(c.CheckAck("garbage").ok());
}

TEST(HandshakeTest, AuthenticatedRefusalCarriesItsReason) {
  const Credentials conn = Rank(1, 2, "j", MakeSecret(1));
  const Credentials acc = Rank(0, 2, "j", MakeSecret(1));
  Connector c(Channel::kPeer, &conn, 0);
  Acceptor a(Channel::kPeer, &acc, nullptr);
  ASSERT_TRUE(a.CheckProof(*c.Proof(*a.Challenge(*c.Hello()))).ok());
  Status s = c.CheckAck(a.Refuse("rank 1 already connected"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rank 1 already connected"), std::string::npos) << s;
}

TEST(HandshakeTest, ProtocolViolationsFailAtTheHello) {
  const Credentials acc = Rank(kNoRank, 0, "", MakeSecret(1));
  auto refusal_for = [&](const proto::PeerHello& hello) {
    Acceptor a(Channel::kStore, &acc, nullptr);
    EXPECT_FALSE(a.Challenge(hello.SerializeAsString()).ok());
    return a.refusal();
  };
  proto::PeerHello good;
  good.set_magic(kHandshakeMagic);
  good.set_protocol_version(kHandshakeVersion);
  good.set_nonce(std::string(kNonceBytes, 'n'));
  good.set_channel(static_cast<uint32_t>(Channel::kStore));
  proto::PeerHello h = good;
  h.set_magic(1);
  EXPECT_EQ(refusal_for(h), Refusal::kProtocol);
  h = good;
  h.set_protocol_version(1);
  EXPECT_EQ(refusal_for(h), Refusal::kProtocol);
  h = good;
  h.set_channel(static_cast<uint32_t>(Channel::kPeer));
  EXPECT_EQ(refusal_for(h), Refusal::kProtocol);
  h = good;
  h.set_nonce("short");
  EXPECT_EQ(refusal_for(h), Refusal::kMalformed);
  h = good;
  h.set_job_id(std::string(kMaxJobIdBytes + 1, 'j'));
  EXPECT_EQ(refusal_for(h), Refusal::kMalformed);
  Acceptor a(Channel::kStore, &acc, nullptr);
  EXPECT_FALSE(a.Challenge("\xff\xff\xff").ok());
  EXPECT_EQ(a.refusal(), Refusal::kMalformed);
  Acceptor early(Channel::kStore, &acc, nullptr);
  EXPECT_FALSE(early.CheckProof("x").ok());
  EXPECT_EQ(early.refusal(), Refusal::kProtocol);
}

// ---- Over a socket ------------------------------------------------------------------------

struct SocketPair {
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

TEST(FdHandshakeTest, BothSidesAuthenticate) {
  SocketPair sp;
  const Credentials client = Rank(kNoRank, 0, "j", MakeSecret(3));
  const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(3));
  ReplayGuard guard;
  Refusal refusal = Refusal::kMalformed;
  Status accepted;
  std::thread acceptor([&] {
    accepted = AcceptOnFd(sp.fds[1], Channel::kClient, daemon, &guard, In(Seconds(5)), &refusal);
  });
  Status connected = ConnectOnFd(sp.fds[0], Channel::kClient, client, kNoRank, In(Seconds(5)), "c");
  acceptor.join();
  EXPECT_TRUE(connected.ok()) << connected;
  EXPECT_TRUE(accepted.ok()) << accepted;
}

// The hook runs once, after the proof checks out and before the connector is told it is in;
// refusing there sends nothing more, so the connector is not left believing it got in.
TEST(FdHandshakeTest, TheProvenHookRunsBeforeTheAnswerAndCanStillCutOff) {
  const Credentials client = Rank(kNoRank, 0, "j", MakeSecret(3));
  for (const bool keep : {true, false}) {
    SocketPair sp;
    const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(3));
    Refusal refusal = Refusal::kMalformed;
    Status accepted;
    int calls = 0;
    std::thread acceptor([&] {
      accepted =
          AcceptOnFd(sp.fds[1], Channel::kControl, daemon, nullptr, In(Seconds(5)), &refusal, [&] {
            ++calls;
            return keep;
          });
      if (!accepted.ok()) ::shutdown(sp.fds[1], SHUT_RDWR);
    });
    Status connected =
        ConnectOnFd(sp.fds[0], Channel::kControl, client, kNoRank, In(Seconds(5)), "c");
    acceptor.join();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(accepted.ok(), keep) << accepted;
    EXPECT_EQ(connected.ok(), keep) << connected;
    if (!keep) {
      EXPECT_EQ(refusal, Refusal::kOverCap);
    }
  }
  // A connector without the secret never reaches the hook.
  SocketPair sp;
  const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(4));
  Refusal refusal = Refusal::kMalformed;
  int calls = 0;
  std::thread acceptor([&] {
    AcceptOnFd(sp.fds[1], Channel::kControl, daemon, nullptr, In(Seconds(5)), &refusal, [&] {
      ++calls;
      return true;
    }).IgnoreError();
    ::shutdown(sp.fds[1], SHUT_RDWR);
  });
  EXPECT_FALSE(
      ConnectOnFd(sp.fds[0], Channel::kControl, client, kNoRank, In(Seconds(5)), "c").ok());
  acceptor.join();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(refusal, Refusal::kBadProof);
}

TEST(FdHandshakeTest, WrongSecretIsRefusedAndTheConnectorSeesOnlyAClose) {
  SocketPair sp;
  const Credentials client = Rank(kNoRank, 0, "j", MakeSecret(3));
  const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(4));
  Refusal refusal = Refusal::kMalformed;
  Status accepted;
  std::thread acceptor([&] {
    accepted = AcceptOnFd(sp.fds[1], Channel::kClient, daemon, nullptr, In(Seconds(5)), &refusal);
    ::shutdown(sp.fds[1], SHUT_RDWR);  // what the daemon does on a refusal
  });
  Status connected = ConnectOnFd(sp.fds[0], Channel::kClient, client, kNoRank, In(Seconds(5)), "c");
  acceptor.join();
  EXPECT_EQ(refusal, Refusal::kBadProof) << accepted;
  EXPECT_EQ(connected.code(), StatusCode::kUnavailable) << connected;
  EXPECT_NE(connected.message().find("refused the handshake"), std::string::npos) << connected;
}

TEST(FdHandshakeTest, SlowSenderIsCutOffByTheHandshakeDeadline) {
  SocketPair sp;
  const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(3));
  Refusal refusal = Refusal::kMalformed;
  Status accepted;
  std::atomic<bool> done{false};
  TimePoint start = SteadyClock::Get()->Now();
  std::thread acceptor([&] {
    accepted = AcceptOnFd(sp.fds[1], Channel::kClient, daemon, nullptr, In(Millis(300)), &refusal);
    done = true;
  });
  // A message of 32 bytes, its length prefix (little-endian) first, trickled a byte per
  // 100 ms: the prefix alone outlasts the deadline. A deadline that each byte pushed back
  // would end 300 ms after the last of these 20 bytes, at 2.3 s.
  std::string trickle(20, 'x');
  trickle.replace(0, 4, std::string("\x20\0\0\0", 4));
  for (size_t i = 0; i < trickle.size() && !done; ++i) {
    (void)!::send(sp.fds[0], &trickle[i], 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(Millis(100));
  }
  acceptor.join();
  Duration took = SteadyClock::Get()->Now() - start;
  EXPECT_EQ(accepted.code(), StatusCode::kDeadlineExceeded) << accepted;
  EXPECT_EQ(refusal, Refusal::kTimeout);
  EXPECT_GE(took, Millis(280));
  EXPECT_LT(took, Millis(1500));
}

TEST(FdHandshakeTest, HugeLengthIsRefusedBeforeReading) {
  SocketPair sp;
  const Credentials daemon = Rank(kNoRank, 0, "j", MakeSecret(3));
  ASSERT_EQ(::send(sp.fds[0], "\xff\xff\xff\x7f", 4, MSG_NOSIGNAL), 4);
  Refusal refusal = Refusal::kTimeout;
  Status s = AcceptOnFd(sp.fds[1], Channel::kClient, daemon, nullptr, In(Seconds(5)), &refusal);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("exceeds the cap"), std::string::npos) << s;
  EXPECT_EQ(refusal, Refusal::kMalformed);
}

TEST(HandshakeQueueTest, TheLongestWaitingIsCutOffFirstAndAProvenOneNever) {
  HandshakeQueue<int> queue;
  EXPECT_FALSE(queue.TakeOldest().has_value());  // nothing waits: the newcomer is refused
  for (int fd : {7, 3, 9, 5}) queue.Add(fd);
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_TRUE(queue.Remove(3));  // proven: off the queue, never cut off
  EXPECT_FALSE(queue.Remove(3));
  EXPECT_EQ(queue.TakeOldest(), 7);  // accept order, not the value
  EXPECT_FALSE(queue.Remove(7));     // cut off already: its handler learns so
  queue.Add(3);                      // a reused descriptor number queues as a newcomer
  EXPECT_EQ(queue.TakeOldest(), 9);
  EXPECT_EQ(queue.TakeOldest(), 5);
  EXPECT_EQ(queue.TakeOldest(), 3);
  EXPECT_TRUE(queue.empty());
}

TEST(HandshakeQueueTest, MakeRoomCutsOffTheLongestWaitingOnlyAtTheCap) {
  HandshakeQueue<int> queue;
  std::vector<std::pair<int, size_t>> cut;
  auto record = [&](int id, size_t waiting) { cut.emplace_back(id, waiting); };
  for (int fd : {7, 3, 9}) {
    ASSERT_TRUE(queue.MakeRoom(3, record));
    queue.Add(fd);
  }
  EXPECT_TRUE(cut.empty());  // under the cap nobody is cut off
  ASSERT_TRUE(queue.MakeRoom(3, record));
  queue.Add(4);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0], std::make_pair(7, size_t{3}));  // the longest waiting, of 3
  EXPECT_TRUE(queue.Remove(9));                     // proven: never cut off
  EXPECT_TRUE(queue.MakeRoom(3, record));
  EXPECT_EQ(cut.size(), 1u);  // 2 wait, under the cap
  // A lowered cap cuts off as many as it takes.
  EXPECT_TRUE(queue.MakeRoom(1, record));
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[1], std::make_pair(3, size_t{2}));
  EXPECT_EQ(cut[2], std::make_pair(4, size_t{1}));
  EXPECT_TRUE(queue.empty());
  // A cap of 0 admits nobody, and there is no one to cut off.
  EXPECT_FALSE(queue.MakeRoom(0, record));
  EXPECT_EQ(cut.size(), 3u);
}

}  // namespace
}  // namespace gyre::auth
