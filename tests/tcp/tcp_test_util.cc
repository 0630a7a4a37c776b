#include "tests/tcp/tcp_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

namespace gyre {
namespace {

// With TZ unset, glibc re-reads the zone on every mktime() (glog calls it per log line)
// under a lock TSan cannot see, so io threads logging at once look like a race. A fixed TZ,
// set before any thread starts, makes those calls read-only.
const bool kTimeZoneFixed = [] {
  setenv("TZ", "UTC", /*overwrite=*/0);
  tzset();
  return true;
}();

int RemainingMillis(const Deadline& deadline) {
  Duration left = deadline.Remaining(*SteadyClock::Get());
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
}

}  // namespace

DoneWaiter::DoneWaiter()
    : promise_(std::make_shared<std::promise<Status>>()), future_(promise_->get_future()) {}

DoneCallback DoneWaiter::Callback() {
  std::shared_ptr<std::promise<Status>> promise = promise_;
  return [promise](Status s) { promise->set_value(std::move(s)); };
}

Status DoneWaiter::Wait(Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  if (future_.wait_for(deadline.Remaining(*SteadyClock::Get())) != std::future_status::ready) {
    return DeadlineExceededError("done did not run within " + FormatDuration(timeout));
  }
  return future_.get();
}

bool DoneWaiter::Ready() const {
  return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

bool WaitUntil(const std::function<bool()>& condition, Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  while (!condition()) {
    if (deadline.Expired(*SteadyClock::Get())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

MessageHeader Header(uint64_t seq, uint64_t tag, int64_t count) {
  MessageHeader h;
  h.seq = seq;
  h.tag = tag;
  h.desc.collective = 1;
  h.desc.dtype = 2;
  h.desc.count = count;
  return h;
}

std::vector<uint8_t> Pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> v(bytes);
  std::minstd_rand rng(seed + 1);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(rng() >> 7);
  return v;
}

RawSocket::~RawSocket() {
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<RawSocket> RawSocket::Connect(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return nullptr;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) return nullptr;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return nullptr;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::make_unique<RawSocket>(fd);
}

bool RawSocket::SendAll(const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd_, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool RawSocket::RecvAll(void* data, size_t bytes, Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  uint8_t* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, RemainingMillis(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    ssize_t n = recv(fd_, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool RawSocket::WaitClosed(Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  char sink[4096];
  for (;;) {
    pollfd pfd{fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, RemainingMillis(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    ssize_t n = recv(fd_, sink, sizeof(sink), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
  }
}

void RawSocket::SetReceiveBuffer(int bytes) {
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

std::unique_ptr<RawListener> RawListener::Listen(int receive_buffer_bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return nullptr;
  if (receive_buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<RawListener>(new RawListener(fd, ntohs(addr.sin_port)));
}

RawListener::~RawListener() { close(fd_); }

std::string RawListener::address() const { return "127.0.0.1:" + std::to_string(port_); }

std::unique_ptr<RawSocket> RawListener::Accept(Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  pollfd pfd{fd_, POLLIN, 0};
  if (poll(&pfd, 1, RemainingMillis(deadline)) <= 0) return nullptr;
  int fd = accept(fd_, nullptr, nullptr);
  if (fd < 0) return nullptr;
  return std::make_unique<RawSocket>(fd);
}

auth::Secret TestSecret() { return *auth::Secret::FromBytes("tcp test secret, 32 bytes long!!"); }

auth::Credentials FakeRank(const std::string& job_id, int rank, int world_size,
                           auth::Secret secret) {
  auth::Credentials c;
  c.secret = std::move(secret);
  c.job_id = job_id;
  c.rank = rank;
  c.world_size = world_size;
  return c;
}

std::vector<uint8_t> HelloFrame(const std::string& job_id, int rank, int world_size) {
  auth::Credentials self = FakeRank(job_id, rank, world_size);
  auth::Connector connector(auth::Channel::kPeer, &self, 0);
  return EncodeControlFrame(FrameType::kHello, *connector.Hello());
}

std::vector<uint8_t> DataFrame(uint64_t seq, uint64_t tag, const OpDesc& desc,
                               const std::vector<uint8_t>& payload) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.seq = seq;
  h.tag = tag;
  h.desc = desc;
  h.payload_len = payload.size();
  std::vector<uint8_t> frame(kFrameHeaderBytes);
  EncodeFrameHeader(h, frame.data());
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

bool ReadFrame(RawSocket& socket, FrameHeader* header, std::vector<uint8_t>* meta,
               std::vector<uint8_t>* payload, Duration timeout) {
  Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  uint8_t bytes[kFrameHeaderBytes];
  if (!socket.RecvAll(bytes, sizeof(bytes), deadline.Remaining(*SteadyClock::Get()))) {
    return false;
  }
  FrameLimits limits{1 << 20, uint64_t{1} << 32};
  if (!DecodeFrameHeader(bytes, limits, header).ok()) return false;
  meta->resize(header->meta_len);
  payload->resize(header->payload_len);
  return socket.RecvAll(meta->data(), meta->size(), deadline.Remaining(*SteadyClock::Get())) &&
         socket.RecvAll(payload->data(), payload->size(), deadline.Remaining(*SteadyClock::Get()));
}

const char* OutcomeName(HandshakeOutcome outcome) {
  switch (outcome) {
    case HandshakeOutcome::kAccepted:
      return "accepted";
    case HandshakeOutcome::kRefused:
      return "refused";
    case HandshakeOutcome::kClosed:
      return "closed";
    case HandshakeOutcome::kBroken:
      return "broken";
  }
  return "?";
}

namespace {

// Reads one handshake frame of `type`; on failure tells a silent close from anything else.
HandshakeOutcome ReadHandshake(RawSocket& socket, FrameType type, std::string* meta) {
  FrameHeader header;
  std::vector<uint8_t> bytes, payload;
  if (!ReadFrame(socket, &header, &bytes, &payload, Seconds(10))) {
    return socket.WaitClosed(Seconds(1)) ? HandshakeOutcome::kClosed : HandshakeOutcome::kBroken;
  }
  if (header.type != type || !payload.empty()) return HandshakeOutcome::kBroken;
  meta->assign(bytes.begin(), bytes.end());
  return HandshakeOutcome::kAccepted;
}

}  // namespace

HandshakeOutcome ConnectorHandshake(RawSocket& socket, const auth::Credentials& self,
                                    int target_rank, proto::PeerHelloAck* ack,
                                    RecordedHandshake* record) {
  auth::Connector connector(auth::Channel::kPeer, &self, target_rank);
  std::vector<uint8_t> hello = EncodeControlFrame(FrameType::kHello, *connector.Hello());
  if (!socket.SendAll(hello)) return HandshakeOutcome::kClosed;
  std::string challenge;
  HandshakeOutcome got = ReadHandshake(socket, FrameType::kChallenge, &challenge);
  if (got != HandshakeOutcome::kAccepted) return got;
  StatusOr<std::string> proof = connector.Proof(challenge);
  if (!proof.ok()) return HandshakeOutcome::kBroken;
  std::vector<uint8_t> proof_frame = EncodeControlFrame(FrameType::kProof, *proof);
  if (record != nullptr) *record = RecordedHandshake{hello, proof_frame};
  if (!socket.SendAll(proof_frame)) return HandshakeOutcome::kClosed;
  std::string answer;
  got = ReadHandshake(socket, FrameType::kHelloAck, &answer);
  if (got != HandshakeOutcome::kAccepted) return got;
  if (ack != nullptr) ack->ParseFromString(answer);
  Status checked = connector.CheckAck(answer);
  if (checked.ok()) return HandshakeOutcome::kAccepted;
  return checked.code() == StatusCode::kUnavailable ? HandshakeOutcome::kRefused
                                                    : HandshakeOutcome::kBroken;
}

HandshakeOutcome ReplayHandshake(RawSocket& socket, const RecordedHandshake& record) {
  if (!socket.SendAll(record.hello)) return HandshakeOutcome::kClosed;
  std::string challenge;
  HandshakeOutcome got = ReadHandshake(socket, FrameType::kChallenge, &challenge);
  if (got != HandshakeOutcome::kAccepted) return got;
  if (!socket.SendAll(record.proof)) return HandshakeOutcome::kClosed;
  std::string answer;
  got = ReadHandshake(socket, FrameType::kHelloAck, &answer);
  if (got != HandshakeOutcome::kAccepted) return got;
  proto::PeerHelloAck ack;
  return ack.ParseFromString(answer) && ack.accepted() ? HandshakeOutcome::kAccepted
                                                       : HandshakeOutcome::kRefused;
}

bool AcceptorHandshake(RawSocket& socket, const auth::Credentials& self, proto::PeerHello* hello,
                       bool replies_here, Duration ack_delay) {
  auth::Acceptor acceptor(auth::Channel::kPeer, &self, nullptr);
  std::string meta;
  if (ReadHandshake(socket, FrameType::kHello, &meta) != HandshakeOutcome::kAccepted ||
      !hello->ParseFromString(meta)) {
    return false;
  }
  StatusOr<std::string> challenge = acceptor.Challenge(meta);
  if (!challenge.ok() || !socket.SendAll(EncodeControlFrame(FrameType::kChallenge, *challenge))) {
    return false;
  }
  if (ReadHandshake(socket, FrameType::kProof, &meta) != HandshakeOutcome::kAccepted ||
      !acceptor.CheckProof(meta).ok()) {
    return false;
  }
  std::this_thread::sleep_for(ack_delay);
  return socket.SendAll(EncodeControlFrame(FrameType::kHelloAck, acceptor.Accept(replies_here)));
}

}  // namespace gyre
