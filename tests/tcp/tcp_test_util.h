// Test support for the TCP transport: bounded waits on `done` callbacks, and raw POSIX
// sockets that speak (or deliberately break) the wire format, to play a fake peer or a
// stranger against a real TcpTransport.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/auth/handshake.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/transport/tcp/frame.h"
#include "core/transport/transport.h"
#include "proto/peer.pb.h"

namespace gyre {

// Captures the Status of one `done`. Wait() never blocks past its deadline.
class DoneWaiter {
 public:
  DoneWaiter();
  DoneCallback Callback();
  // The status passed to `done`, or DeadlineExceeded if it did not run within `timeout`.
  Status Wait(Duration timeout = Seconds(10));
  bool Ready() const;

 private:
  std::shared_ptr<std::promise<Status>> promise_;
  std::shared_future<Status> future_;
};

// Polls `condition` until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& condition, Duration timeout = Seconds(10));

MessageHeader Header(uint64_t seq, uint64_t tag, int64_t count = 0);
std::vector<uint8_t> Pattern(size_t bytes, uint32_t seed);

class RawSocket {
 public:
  explicit RawSocket(int fd) : fd_(fd) {}
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  static std::unique_ptr<RawSocket> Connect(const std::string& address);
  bool SendAll(const void* data, size_t bytes);
  bool SendAll(const std::vector<uint8_t>& bytes) { return SendAll(bytes.data(), bytes.size()); }
  bool RecvAll(void* data, size_t bytes, Duration timeout = Seconds(10));
  // True once the other side closed (EOF or reset) within `timeout`; unread data is skipped.
  bool WaitClosed(Duration timeout = Seconds(10));
  void SetReceiveBuffer(int bytes);
  int fd() const { return fd_; }

 private:
  int fd_;
};

class RawListener {
 public:
  static std::unique_ptr<RawListener> Listen(int receive_buffer_bytes = 0);
  ~RawListener();
  std::string address() const;
  std::unique_ptr<RawSocket> Accept(Duration timeout = Seconds(10));

 private:
  explicit RawListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

// The secret the tests' worlds share, and credentials for a fake rank of such a world.
auth::Secret TestSecret();
auth::Credentials FakeRank(const std::string& job_id, int rank, int world_size,
                           auth::Secret secret = TestSecret());

// A well-formed hello (fresh nonce) of the peer channel.
std::vector<uint8_t> HelloFrame(const std::string& job_id, int rank, int world_size);
std::vector<uint8_t> DataFrame(uint64_t seq, uint64_t tag, const OpDesc& desc,
                               const std::vector<uint8_t>& payload);

// Reads one frame; false on timeout, close or a header that does not decode.
bool ReadFrame(RawSocket& socket, FrameHeader* header, std::vector<uint8_t>* meta,
               std::vector<uint8_t>* payload, Duration timeout = Seconds(10));

enum class HandshakeOutcome {
  kAccepted,
  kRefused,  // the acceptor authenticated us and said no, with a reason (in the ack)
  kClosed,   // the acceptor closed without a word: what a stranger gets
  kBroken,   // no answer in time, or bytes that are not the protocol
};
const char* OutcomeName(HandshakeOutcome outcome);

// The frames a connector sent during one handshake, for replaying them.
struct RecordedHandshake {
  std::vector<uint8_t> hello;
  std::vector<uint8_t> proof;
};

// Plays the connecting side of the handshake as `self`, meaning to reach `target_rank`.
HandshakeOutcome ConnectorHandshake(RawSocket& socket, const auth::Credentials& self,
                                    int target_rank, proto::PeerHelloAck* ack = nullptr,
                                    RecordedHandshake* record = nullptr);

// Sends a recorded hello, reads the (fresh) challenge and answers it with the recorded
// proof: what an eavesdropper replaying a handshake can do.
HandshakeOutcome ReplayHandshake(RawSocket& socket, const RecordedHandshake& record);

// Plays the accepting side as `self`: reads the hello into `hello` and accepts it, after
// `ack_delay` (a slow acceptor). `replies_here`: promise to send this side's messages on the
// same connection.
bool AcceptorHandshake(RawSocket& socket, const auth::Credentials& self, proto::PeerHello* hello,
                       bool replies_here = false, Duration ack_delay = Duration::zero());

}  // namespace gyre
