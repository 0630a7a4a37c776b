#include "core/auth/handshake.h"

#include <glog/logging.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "proto/peer.pb.h"

namespace gyre::auth {
namespace {

constexpr char kProofDomain[] = "gyre-auth-v2";

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutField(std::string* out, const std::string& field) {
  PutU32(out, static_cast<uint32_t>(field.size()));
  out->append(field);
}

bool KnownChannel(uint32_t channel) {
  return channel >= static_cast<uint32_t>(Channel::kPeer) &&
         channel <= static_cast<uint32_t>(Channel::kControl);
}

}  // namespace

const char* ChannelName(Channel channel) {
  switch (channel) {
    case Channel::kPeer:
      return "peer";
    case Channel::kStore:
      return "store";
    case Channel::kClient:
      return "client";
    case Channel::kControl:
      return "control";
  }
  return "unknown";
}

const char* RefusalName(Refusal refusal) {
  switch (refusal) {
    case Refusal::kMalformed:
      return "malformed";
    case Refusal::kProtocol:
      return "protocol";
    case Refusal::kOtherJob:
      return "other-job";
    case Refusal::kWorldMismatch:
      return "world-mismatch";
    case Refusal::kBadRank:
      return "bad-rank";
    case Refusal::kBadProof:
      return "bad-proof";
    case Refusal::kReplay:
      return "replay";
    case Refusal::kDuplicate:
      return "duplicate";
    case Refusal::kTimeout:
      return "timeout";
    case Refusal::kOverCap:
      return "over-cap";
    case Refusal::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

int64_t RefusalCounters::total() const {
  int64_t sum = 0;
  for (const auto& c : counts_) sum += c.load(std::memory_order_relaxed);
  return sum;
}

bool ReplayGuard::SeenBefore(const std::string& nonce) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seen_.count(nonce) > 0) return true;
  seen_.insert(nonce);
  order_.push_back(nonce);
  while (order_.size() > capacity_) {
    seen_.erase(order_.front());
    order_.pop_front();
  }
  return false;
}

std::string ComputeProof(const Secret& secret, bool by_acceptor, Channel channel,
                         const std::string& job_id, int connector_rank, int acceptor_rank,
                         int world_size, const std::string& connector_nonce,
                         const std::string& acceptor_nonce) {
  std::string transcript;
  PutField(&transcript, kProofDomain);
  PutField(&transcript, by_acceptor ? "acceptor" : "connector");
  PutU32(&transcript, static_cast<uint32_t>(channel));
  PutField(&transcript, job_id);
  PutU32(&transcript, static_cast<uint32_t>(connector_rank));
  PutU32(&transcript, static_cast<uint32_t>(acceptor_rank));
  PutU32(&transcript, static_cast<uint32_t>(world_size));
  PutField(&transcript, connector_nonce);
  PutField(&transcript, acceptor_nonce);
  // HMAC with an empty key is well defined (the key is zero-padded); a valid pointer keeps
  // OpenSSL from treating the call as "reuse the previous key".
  static const unsigned char kNoKey = 0;
  const unsigned char* key =
      secret.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(secret.key().data());
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  unsigned char* ok = HMAC(EVP_sha256(), key, static_cast<int>(secret.key().size()),
                           reinterpret_cast<const unsigned char*>(transcript.data()),
                           transcript.size(), mac, &mac_len);
  if (ok == nullptr || mac_len != kProofBytes) {
    // Cannot happen with SHA-256; an empty proof never matches one that was received.
    return std::string();
  }
  std::string proof(reinterpret_cast<const char*>(mac), mac_len);
  OPENSSL_cleanse(mac, sizeof(mac));
  return proof;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || a.empty()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

StatusOr<std::string> RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    return InternalError("the system random source failed to produce a nonce");
  }
  return bytes;
}

// ---- Connector -----------------------------------------------------------------------------

Connector::Connector(Channel channel, const Credentials* self, int acceptor_rank)
    : channel_(channel), self_(self), acceptor_rank_(acceptor_rank) {}

StatusOr<std::string> Connector::Hello() {
  GYRE_ASSIGN_OR_RETURN(nonce_, RandomBytes(kNonceBytes));
  proto::PeerHello hello;
  hello.set_magic(kHandshakeMagic);
  hello.set_protocol_version(kHandshakeVersion);
  hello.set_job_id(self_->job_id);
  hello.set_rank(self_->rank);
  hello.set_world_size(self_->world_size);
  hello.set_nonce(nonce_);
  hello.set_channel(static_cast<uint32_t>(channel_));
  return hello.SerializeAsString();
}

StatusOr<std::string> Connector::Proof(const std::string& challenge) {
  proto::PeerChallenge message;
  if (nonce_.empty()) return InternalError("Connector::Proof before Hello");
  if (!message.ParseFromString(challenge) || message.nonce().size() != kNonceBytes) {
    return InvalidArgumentError("the answer to the hello is not a challenge of this protocol");
  }
  acceptor_nonce_ = message.nonce();
  proto::PeerProof proof;
  proof.set_proof(ComputeProof(self_->secret, false, channel_, self_->job_id, self_->rank,
                               acceptor_rank_, self_->world_size, nonce_, acceptor_nonce_));
  return proof.SerializeAsString();
}

Status Connector::CheckAck(const std::string& ack, bool* replies_here) const {
  proto::PeerHelloAck message;
  if (acceptor_nonce_.empty()) return InternalError("Connector::CheckAck before Proof");
  if (!message.ParseFromString(ack) || message.proof().size() != kProofBytes) {
    return InvalidArgumentError(
        "the answer to the proof is not an acknowledgement of this protocol");
  }
  std::string expected = ComputeProof(self_->secret, true, channel_, self_->job_id, self_->rank,
                                      acceptor_rank_, self_->world_size, nonce_, acceptor_nonce_);
  if (!ConstantTimeEquals(expected, message.proof())) {
    return InvalidArgumentError(
        "the other side does not prove it holds this job's secret (another job, or a different "
        "secret file)");
  }
  if (!message.accepted()) {
    return UnavailableError("refused the connection: " + message.reason());
  }
  if (replies_here != nullptr) *replies_here = message.replies_here();
  return Status::Ok();
}

// ---- Acceptor ------------------------------------------------------------------------------

Acceptor::Acceptor(Channel channel, const Credentials* self, ReplayGuard* guard)
    : channel_(channel), self_(self), guard_(guard) {}

Status Acceptor::Fail(Refusal refusal, const std::string& why) {
  refusal_ = refusal;
  return InvalidArgumentError(why);
}

StatusOr<std::string> Acceptor::Challenge(const std::string& hello_bytes) {
  if (challenged_) return Fail(Refusal::kProtocol, "a second hello on one connection");
  proto::PeerHello hello;
  if (!hello.ParseFromString(hello_bytes)) return Fail(Refusal::kMalformed, "malformed hello");
  if (hello.magic() != kHandshakeMagic) {
    return Fail(Refusal::kProtocol, "hello without the gyre magic");
  }
  if (hello.protocol_version() != kHandshakeVersion) {
    return Fail(Refusal::kProtocol, "hello for protocol version " +
                                        std::to_string(hello.protocol_version()) +
                                        ", this side speaks " + std::to_string(kHandshakeVersion));
  }
  if (hello.channel() != static_cast<uint32_t>(channel_)) {
    std::string theirs = KnownChannel(hello.channel())
                             ? ChannelName(static_cast<Channel>(hello.channel()))
                             : "unknown (" + std::to_string(hello.channel()) + ")";
    return Fail(Refusal::kProtocol,
                "hello for a " + theirs + " endpoint on a " + ChannelName(channel_) + " endpoint");
  }
  if (hello.nonce().size() != kNonceBytes) {
    return Fail(Refusal::kMalformed,
                "hello with a nonce of " + std::to_string(hello.nonce().size()) + " bytes");
  }
  if (hello.job_id().size() > kMaxJobIdBytes) {
    return Fail(Refusal::kMalformed,
                "hello with a job id of " + std::to_string(hello.job_id().size()) + " bytes");
  }
  challenged_ = true;
  peer_rank_ = hello.rank();
  peer_world_size_ = hello.world_size();
  peer_job_id_ = hello.job_id();
  connector_nonce_ = hello.nonce();

  auto defer = [this](Refusal refusal, std::string reason) {
    if (deferred_) return;
    deferred_ = true;
    deferred_refusal_ = refusal;
    deferred_reason_ = std::move(reason);
  };
  // Replay first: the nonce must be recorded whatever else is wrong with the hello.
  if (guard_ != nullptr && guard_->SeenBefore(connector_nonce_)) {
    defer(Refusal::kReplay, "replayed handshake: this connector nonce was used before");
  }
  if (!self_->job_id.empty() && peer_job_id_ != self_->job_id) {
    defer(Refusal::kOtherJob, "hello for job \"" + Printable(peer_job_id_) + "\", this is job \"" +
                                  self_->job_id + "\"");
  }
  if (self_->world_size > 0 && peer_world_size_ != self_->world_size) {
    defer(Refusal::kWorldMismatch, "hello for a world of " + std::to_string(peer_world_size_) +
                                       " ranks, this world has " +
                                       std::to_string(self_->world_size));
  }
  if (channel_ == Channel::kPeer &&
      (peer_rank_ < 0 || peer_rank_ >= self_->world_size || peer_rank_ == self_->rank)) {
    defer(Refusal::kBadRank, "hello from rank " + std::to_string(peer_rank_) +
                                 ", which is out of range or this rank itself");
  }
  StatusOr<std::string> nonce = RandomBytes(kNonceBytes);
  if (!nonce.ok()) return Fail(Refusal::kMalformed, nonce.status().message());
  nonce_ = std::move(*nonce);
  proto::PeerChallenge challenge;
  challenge.set_nonce(nonce_);
  return challenge.SerializeAsString();
}

Status Acceptor::CheckProof(const std::string& proof_bytes) {
  if (!challenged_) return Fail(Refusal::kProtocol, "a proof before the hello");
  if (authenticated_) return Fail(Refusal::kProtocol, "a second proof on one connection");
  proto::PeerProof proof;
  if (!proof.ParseFromString(proof_bytes) || proof.proof().size() != kProofBytes) {
    return Fail(Refusal::kMalformed, "malformed proof");
  }
  if (deferred_) return Fail(deferred_refusal_, deferred_reason_);
  std::string expected = ComputeProof(self_->secret, false, channel_, peer_job_id_, peer_rank_,
                                      self_->rank, peer_world_size_, connector_nonce_, nonce_);
  if (!ConstantTimeEquals(expected, proof.proof())) {
    if (self_->secret.empty()) {
      return Fail(Refusal::kBadProof,
                  "wrong proof: the connector proves a secret and this side has none (give "
                  "both sides the same --secret_file)");
    }
    return Fail(Refusal::kBadProof,
                "wrong proof: the connector does not hold this job's secret (or holds none)");
  }
  authenticated_ = true;
  return Status::Ok();
}

std::string Acceptor::AckMessage(bool accepted, const std::string& reason,
                                 bool replies_here) const {
  proto::PeerHelloAck ack;
  ack.set_accepted(accepted);
  ack.set_replies_here(replies_here);
  ack.set_reason(reason);
  ack.set_rank(self_->rank);
  ack.set_proof(ComputeProof(self_->secret, true, channel_, peer_job_id_, peer_rank_, self_->rank,
                             peer_world_size_, connector_nonce_, nonce_));
  return ack.SerializeAsString();
}

std::string Acceptor::Accept(bool replies_here) const {
  CHECK(authenticated_) << "Acceptor::Accept before the proof checked out";
  return AckMessage(true, "", replies_here);
}

std::string Acceptor::Refuse(const std::string& reason) const {
  CHECK(authenticated_) << "Acceptor::Refuse before the proof checked out";
  return AckMessage(false, reason, false);
}

}  // namespace gyre::auth
