#include "tests/fuzz/fuzz_targets.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/algo/collective.h"
#include "core/auth/fd_handshake.h"
#include "core/auth/handshake.h"
#include "core/ipc/ipc.h"
#include "core/store/hash_store.h"
#include "core/store/store_wire.h"
#include "core/transport/tcp/frame.h"
#include "proto/client.pb.h"
#include "proto/peer.pb.h"
#include "proto/store.pb.h"

namespace gyre::fuzz {
namespace {

// An invariant that must hold for every input; a failure is a finding.
#define FUZZ_INVARIANT(cond)                                                                   \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Splits the input into two messages; the first byte is the length of the first.
void Split(const uint8_t* data, size_t size, std::string* a, std::string* b) {
  if (size == 0) return;
  size_t cut = 1 + std::min<size_t>(data[0], size - 1);
  *a = AsString(data + 1, cut - 1);
  *b = AsString(data + cut, size - cut);
}

std::string LengthPrefixed(const std::string& body) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
  return out + body;
}

const auth::Credentials& PeerCredentials() {
  static const auth::Credentials* c = [] {
    auto* creds = new auth::Credentials;
    creds->secret = *auth::Secret::FromBytes("fuzzing secret of thirty-two b..");
    creds->job_id = "fuzz-job";
    creds->rank = 0;
    creds->world_size = 4;
    return creds;
  }();
  return *c;
}

// ---- Seeds --------------------------------------------------------------------------------

std::vector<std::string> FrameSeeds() {
  std::vector<std::string> seeds;
  FrameHeader h;
  h.type = FrameType::kData;
  h.seq = 7;
  h.tag = 3;
  h.payload_len = 1000;
  h.desc.count = 250;
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(h, bytes);
  seeds.push_back(AsString(bytes, sizeof(bytes)));
  for (FrameType type :
       {FrameType::kHello, FrameType::kChallenge, FrameType::kProof, FrameType::kHelloAck}) {
    std::vector<uint8_t> frame = EncodeControlFrame(type, std::string(40, 'm'));
    seeds.push_back(AsString(frame.data(), frame.size()));
  }
  return seeds;
}

std::vector<std::string> StoreSeeds() {
  std::vector<std::string> seeds;
  auto add = [&](const proto::StoreRequest& r) {
    std::string frame;
    store::internal::EncodeFrame(r, &frame);
    seeds.push_back(frame);
  };
  proto::StoreRequest r;
  r.set_request_id(1);
  r.set_op(proto::STORE_OP_SET);
  r.add_keys("gyre/rank/0");
  r.set_value("127.0.0.1:4000");
  add(r);
  r.set_op(proto::STORE_OP_ADD);
  r.set_delta(5);
  add(r);
  r.set_op(proto::STORE_OP_COMPARE_SET);
  r.set_expected("127.0.0.1:4000");
  add(r);
  proto::StoreRequest w;
  w.set_op(proto::STORE_OP_WAIT);
  for (int i = 0; i < 4; ++i) w.add_keys("k" + std::to_string(i));
  w.set_deadline_ms(100);
  add(w);
  return seeds;
}

std::vector<std::string> HandshakeSeeds() {
  std::vector<std::string> seeds;
  auth::Credentials me = PeerCredentials();
  me.rank = 1;
  auth::Connector connector(auth::Channel::kPeer, &me, 0);
  const std::string hello = *connector.Hello();
  proto::PeerProof proof;
  proof.set_proof(std::string(auth::kProofBytes, 'p'));
  const std::string proof_bytes = proof.SerializeAsString();
  // First byte: the length of the first message, see Split.
  seeds.push_back(std::string(1, static_cast<char>(hello.size())) + hello + proof_bytes);
  return seeds;
}

std::vector<std::string> ClientSeeds() {
  std::vector<std::string> seeds;
  auth::Credentials me;
  me.job_id = "fuzz-job";
  auth::Connector connector(auth::Channel::kClient, &me, auth::kNoRank);
  seeds.push_back(LengthPrefixed(*connector.Hello()));
  proto::ClientRequest req;
  req.set_id(3);
  proto::CollectiveCall* c = req.mutable_collective();
  c->set_collective(0);
  c->set_count(1000);
  c->set_dtype(static_cast<int>(DataType::kFloat32));
  c->set_reduce_op(static_cast<int>(ReduceOp::kSum));
  c->set_has_input(true);
  c->set_has_output(true);
  c->set_output_offset(4096);
  seeds.push_back(LengthPrefixed(req.SerializeAsString()));
  req.mutable_map_buffer()->set_bytes(1 << 20);
  seeds.push_back(LengthPrefixed(req.SerializeAsString()));
  return seeds;
}

// Feeds `bytes` to one end of a socket pair (then closes it for writing) and returns the
// other end, so an fd-level reader sees exactly these bytes and then EOF.
int PairFedWith(const std::string& bytes, int* writer) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return -1;
  int big = 1 << 20;
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fds[0], bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT);
    if (n <= 0) break;  // the rest would not fit; the reader gets a prefix
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[0], SHUT_WR);
  *writer = fds[0];
  return fds[1];
}

}  // namespace

void FuzzFrameHeader(const uint8_t* data, size_t size) {
  uint8_t header[kFrameHeaderBytes] = {};
  std::memcpy(header, data, std::min(size, kFrameHeaderBytes));
  const FrameLimits all_limits[] = {
      FrameLimits{0, 0},
      FrameLimits{static_cast<uint32_t>(auth::kMaxHandshakeMessageBytes), 0},
      FrameLimits{64 << 10, uint64_t{1} << 30},
  };
  for (const FrameLimits& limits : all_limits) {
    FrameHeader h;
    Status s = DecodeFrameHeader(header, limits, &h);
    if (!s.ok()) {
      FUZZ_INVARIANT(s.code() == StatusCode::kInvalidArgument && !s.message().empty());
      continue;
    }
    FUZZ_INVARIANT(h.meta_len <= limits.max_meta_bytes);
    FUZZ_INVARIANT(h.payload_len <= limits.max_payload_bytes);
    // The encoding is canonical: what decodes re-encodes to the same bytes.
    uint8_t again[kFrameHeaderBytes];
    EncodeFrameHeader(h, again);
    FUZZ_INVARIANT(std::memcmp(again, header, kFrameHeaderBytes) == 0);
  }
}

void FuzzStoreRequest(const uint8_t* data, size_t size) {
  if (size < store::internal::kFrameHeaderBytes) return;
  const uint32_t length = store::internal::DecodeFrameLength(data);
  // The server refuses longer frames before reading them, and waits (under its frame
  // deadline) for the rest of a shorter one.
  if (length > store::internal::kMaxFrameBytes ||
      size - store::internal::kFrameHeaderBytes < length)
    return;
  proto::StoreRequest request;
  if (!request.ParseFromArray(data + store::internal::kFrameHeaderBytes,
                              static_cast<int>(length))) {
    return;
  }
  Status valid = store::internal::CheckRequest(request, "fuzz");
  if (!valid.ok()) {
    FUZZ_INVARIANT(valid.code() == StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_INVARIANT(request.keys_size() >= 1);
  FUZZ_INVARIANT(static_cast<size_t>(request.keys_size()) <= store::internal::kMaxWaitKeys);
  for (const std::string& key : request.keys()) {
    FUZZ_INVARIANT(!key.empty() && key.size() <= store::kMaxKeyBytes);
  }
  // Serve it as the server would (the waiting ops become their non-waiting forms).
  store::HashStore store("fuzz");
  const Deadline now = Deadline::Infinite();
  const std::string& key = request.keys(0);
  proto::StoreResponse response;
  response.set_request_id(request.request_id());
  Status status;
  switch (request.op()) {
    case proto::STORE_OP_SET:
      status = store.Set(key, request.value(), now);
      break;
    case proto::STORE_OP_GET:
    case proto::STORE_OP_TRY_GET:
      status = store.TryGet(key, now).status();
      break;
    case proto::STORE_OP_ADD:
      store.Set(key, request.expected(), now).IgnoreError();
      status = store.Add(key, request.delta(), now).status();
      break;
    case proto::STORE_OP_COMPARE_SET:
      status = store.CompareSet(key, request.expected(), request.value(), now).status();
      break;
    case proto::STORE_OP_WAIT:
      for (const std::string& k : request.keys()) (void)store.Contains(k);
      break;
    case proto::STORE_OP_TRY_GET_MANY: {
      const std::vector<std::string> keys(request.keys().begin(), request.keys().end());
      StatusOr<std::vector<std::optional<std::string>>> values = store.TryGetMany(keys, now);
      FUZZ_INVARIANT(!values.ok() || values->size() == keys.size());
      status = values.status();
      break;
    }
    case proto::STORE_OP_DELETE:
      status = store.Delete(key, now);
      break;
    default:
      FUZZ_INVARIANT(false);  // CheckRequest let an unknown op through
  }
  store::internal::SetResponseStatus(status, &response);
  std::string frame;
  FUZZ_INVARIANT(store::internal::EncodeFrame(response, &frame));
}

void FuzzHandshake(const uint8_t* data, size_t size) {
  std::string first, second;
  Split(data, size, &first, &second);
  const auth::Credentials& acceptor_self = PeerCredentials();
  // The acceptor: whatever arrives, a forged proof never authenticates.
  {
    auth::ReplayGuard guard(16);
    auth::Acceptor acceptor(auth::Channel::kPeer, &acceptor_self, &guard);
    StatusOr<std::string> challenge = acceptor.Challenge(first);
    if (challenge.ok()) {
      FUZZ_INVARIANT(challenge->size() <= auth::kMaxHandshakeMessageBytes);
      FUZZ_INVARIANT(!acceptor.CheckProof(second).ok());
      FUZZ_INVARIANT(!acceptor.authenticated());
    }
  }
  // The connector: a forged answer never passes either.
  {
    auth::Credentials me = acceptor_self;
    me.rank = 1;
    auth::Connector connector(auth::Channel::kPeer, &me, 0);
    FUZZ_INVARIANT(connector.Hello().ok());
    StatusOr<std::string> proof = connector.Proof(first);
    if (proof.ok()) FUZZ_INVARIANT(!connector.CheckAck(second).ok());
  }
  // The same bytes as a store endpoint without a job id or a secret: every branch of the
  // hello checks, and still no proof passes without the acceptor's fresh nonce.
  {
    auth::Credentials open;
    auth::Acceptor acceptor(auth::Channel::kStore, &open, nullptr);
    if (acceptor.Challenge(first).ok()) FUZZ_INVARIANT(!acceptor.CheckProof(second).ok());
  }
}

void FuzzClientRequest(const uint8_t* data, size_t size) {
  const std::string bytes = AsString(data, size);
  // The daemon's first read on a connection: the handshake, length prefix first.
  {
    int writer = -1;
    int fd = PairFedWith(bytes, &writer);
    if (fd >= 0) {
      auth::Credentials self;
      auth::Refusal refusal = auth::Refusal::kMalformed;
      Status s = auth::AcceptOnFd(fd, auth::Channel::kClient, self, nullptr,
                                  Deadline::After(*SteadyClock::Get(), Millis(200)), &refusal);
      FUZZ_INVARIANT(!s.ok());  // no input carries a proof of the acceptor's fresh nonce
      ::close(fd);
      ::close(writer);
    }
  }
  // After it: a length-prefixed ClientRequest, checked the way the daemon checks it.
  int writer = -1;
  int fd = PairFedWith(bytes, &writer);
  if (fd < 0) return;
  proto::ClientRequest request;
  Status read =
      ipc::ReadMessage(fd, &request, Deadline::After(*SteadyClock::Get(), Millis(200)), "fuzz");
  ::close(fd);
  ::close(writer);
  if (!read.ok() || !request.has_collective()) return;
  const proto::CollectiveCall& c = request.collective();
  if (c.collective() < 0 || c.collective() >= algo::kNumCollectives || c.algorithm() < 0 ||
      c.algorithm() >= algo::kNumAlgorithms) {
    return;
  }
  algo::CollectiveSpec spec;
  spec.collective = static_cast<algo::Collective>(c.collective());
  spec.algorithm = static_cast<algo::Algorithm>(c.algorithm());
  spec.count = c.count();
  spec.dtype = static_cast<DataType>(c.dtype());
  spec.op = static_cast<ReduceOp>(c.reduce_op());
  spec.root = c.root();
  spec.world_size = 4;
  if (!algo::ValidateSpec(spec).ok()) return;
  // The daemon's cap: a count the mapping (here 1 MiB) cannot hold is refused first.
  const uint64_t map_bytes = 1 << 20;
  const size_t es = DataTypeSize(spec.dtype);
  FUZZ_INVARIANT(es > 0);
  if (spec.count > 0 && static_cast<uint64_t>(spec.count) > map_bytes / es) return;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    const int64_t in = algo::InputCount(spec, rank);
    const int64_t out = algo::OutputCount(spec, rank);
    FUZZ_INVARIANT(in >= 0 && out >= 0);
    FUZZ_INVARIANT(static_cast<uint64_t>(in) <= uint64_t{1} << 40);
    FUZZ_INVARIANT(static_cast<uint64_t>(out) <= uint64_t{1} << 40);
  }
}

const std::vector<Target>& Targets() {
  static const std::vector<Target> targets = {
      {"frame", FuzzFrameHeader, FrameSeeds},
      {"store", FuzzStoreRequest, StoreSeeds},
      {"handshake", FuzzHandshake, HandshakeSeeds},
      {"client", FuzzClientRequest, ClientSeeds},
  };
  return targets;
}

}  // namespace gyre::fuzz
