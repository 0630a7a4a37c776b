// The mutual challenge-response that opens every gyre connection, as two small state
// machines that turn received bytes into bytes to send, with no sockets in them: the TCP
// transport, the TcpStore client and server and the daemon's Unix socket all drive them.
//
//   connector                                   acceptor
//     hello {job, rank, world, channel, Nc} -->
//                                           <-- challenge {Na}
//     proof {HMAC(K, "connector" | T)}      -->   checked in constant time
//                                           <-- ack {HMAC(K, "acceptor" | T)}
//
// T is the transcript: channel, job id, both ranks, world size, Nc and Na. Both nonces are
// fresh, so a recorded proof is worthless on any other connection. The acceptor answers
// every well-formed hello with a challenge and closes silently on any refusal, so a stranger
// learns nothing about why; the reason goes to the acceptor's log and counters.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/auth/secret.h"
#include "core/base/status.h"

namespace gyre::auth {

// Which kind of endpoint a connection is for; part of the transcript, so a proof made for
// one kind is useless on another.
enum class Channel : uint32_t {
  kPeer = 1,     // rank to rank, the TCP transport
  kStore = 2,    // TcpStore client to TcpStoreServer
  kClient = 3,   // a program to its rank's daemon
  kControl = 4,  // rank to rank, the control endpoint (status queries, verdicts)
};
const char* ChannelName(Channel channel);

inline constexpr uint32_t kHandshakeMagic = 0x45525947;  // "GYRE"
inline constexpr uint32_t kHandshakeVersion = 2;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;
// Every handshake message is far smaller; a longer length prefix is refused unread.
inline constexpr size_t kMaxHandshakeMessageBytes = 1024;
inline constexpr size_t kMaxJobIdBytes = 256;
inline constexpr int kNoRank = -1;

// Why an acceptor refused a connection. Never sent to the other side.
enum class Refusal : int {
  kMalformed = 0,  // bytes that are not a handshake message, or a field of the wrong size
  kProtocol,       // wrong magic, protocol version or channel
  kOtherJob,       // a hello for another job id
  kWorldMismatch,  // a hello for a world of another size
  kBadRank,        // a rank out of range, or this rank itself
  kBadProof,       // the proof does not match: the connector lacks this job's secret
  kReplay,         // a connector nonce seen before: a recorded handshake played again
  kDuplicate,      // an authenticated rank that is already connected
  kTimeout,        // no complete handshake within the deadline (slow or silent sender)
  kOverCap,        // too many connections still unauthenticated
  // The connector closed the connection before the handshake was complete: a querier that
  // gave up waiting (the job's own, when this process was slow), or a port scan.
  kAbandoned,
};
inline constexpr int kNumRefusals = 11;
const char* RefusalName(Refusal refusal);

// Per-endpoint counts of refused connections, readable from any thread.
class RefusalCounters {
 public:
  void Count(Refusal refusal) {
    counts_[static_cast<int>(refusal)].fetch_add(1, std::memory_order_relaxed);
  }
  int64_t count(Refusal refusal) const {
    return counts_[static_cast<int>(refusal)].load(std::memory_order_relaxed);
  }
  int64_t total() const;

 private:
  std::array<std::atomic<int64_t>, kNumRefusals> counts_{};
};

// Remembers the most recent connector nonces an endpoint has seen, so a replayed hello is
// refused under its own name (its proof would fail anyway: the acceptor's nonce is new).
// Thread-safe.
class ReplayGuard {
 public:
  explicit ReplayGuard(size_t capacity = 8192) : capacity_(capacity) {}
  // Records `nonce`; true when it had been recorded before.
  bool SeenBefore(const std::string& nonce);

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::unordered_set<std::string> seen_;  // guarded by mu_
  std::deque<std::string> order_;         // guarded by mu_; oldest first
};

// Who this side of a connection is.
struct Credentials {
  Secret secret;  // empty: the job runs without a secret (see secret.h)
  // A connector always sends it. An acceptor with an empty job id accepts any job's hello
  // (a standalone store server shared by several jobs); the proof still binds the id.
  std::string job_id;
  int rank = kNoRank;  // kNoRank for stores, daemons' client sockets and programs
  int world_size = 0;  // 0 when not known; an acceptor then does not check it
};

// HMAC-SHA256(secret, label | channel | job id | ranks | world size | nonces), every field
// length-prefixed so no two transcripts share an encoding. Exposed for tests and tools.
std::string ComputeProof(const Secret& secret, bool by_acceptor, Channel channel,
                         const std::string& job_id, int connector_rank, int acceptor_rank,
                         int world_size, const std::string& connector_nonce,
                         const std::string& acceptor_nonce);

// Compares without an early exit, so the time taken says nothing about where they differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

StatusOr<std::string> RandomBytes(size_t n);

// The side that opened the connection. Call Hello, then Proof with the challenge received,
// then CheckAck with the answer.
class Connector {
 public:
  // `acceptor_rank`: the rank this side means to reach; kNoRank for a store or a daemon.
  // `self` must outlive the Connector.
  Connector(Channel channel, const Credentials* self, int acceptor_rank);

  StatusOr<std::string> Hello();
  // InvalidArgument for a challenge that is not one.
  StatusOr<std::string> Proof(const std::string& challenge);
  // OK once the acceptor proved it holds the secret and accepted. Unavailable with its reason
  // when it proved it and refused (it is a rank of this job, e.g. already connected);
  // InvalidArgument for an answer that is malformed or lacks the right proof. `replies_here`
  // (may be null) receives the acceptor's promise to send its messages on this connection.
  Status CheckAck(const std::string& ack, bool* replies_here = nullptr) const;

 private:
  const Channel channel_;
  const Credentials* const self_;
  const int acceptor_rank_;
  std::string nonce_;
  std::string acceptor_nonce_;
};

// The side that accepted the connection. Call Challenge with the hello, then CheckProof with
// the proof, then send Accept() or Refuse(). After any failure close the connection without
// a word; refusal() and the Status message say why, for the log.
class Acceptor {
 public:
  // `self` and `guard` (may be null) must outlive the Acceptor.
  Acceptor(Channel channel, const Credentials* self, ReplayGuard* guard);

  // A challenge for any well-formed hello, even one that will be refused at the proof (so a
  // stranger cannot tell a wrong job id from a wrong secret). InvalidArgument for bytes that
  // are not a hello of this protocol and channel.
  StatusOr<std::string> Challenge(const std::string& hello);
  // OK once the connector has proved the secret for this job, these ranks and these nonces.
  Status CheckProof(const std::string& proof);

  // The answers for an authenticated connector. `replies_here`: this side will send its own
  // messages to the connector on the same connection.
  std::string Accept(bool replies_here = false) const;
  std::string Refuse(const std::string& reason) const;

  Refusal refusal() const { return refusal_; }
  bool authenticated() const { return authenticated_; }
  // From the hello; meaningful after Challenge succeeded.
  int peer_rank() const { return peer_rank_; }
  int peer_world_size() const { return peer_world_size_; }
  const std::string& peer_job_id() const { return peer_job_id_; }

 private:
  Status Fail(Refusal refusal, const std::string& why);
  std::string AckMessage(bool accepted, const std::string& reason, bool replies_here) const;

  const Channel channel_;
  const Credentials* const self_;
  ReplayGuard* const guard_;
  Refusal refusal_ = Refusal::kMalformed;
  bool challenged_ = false;
  bool authenticated_ = false;
  // A refusal decided at the hello but reported only at the proof.
  bool deferred_ = false;
  Refusal deferred_refusal_ = Refusal::kMalformed;
  std::string deferred_reason_;
  int peer_rank_ = kNoRank;
  int peer_world_size_ = 0;
  std::string peer_job_id_;
  std::string connector_nonce_;
  std::string nonce_;
};

}  // namespace gyre::auth
