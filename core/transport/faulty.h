// A fault-injecting Transport that wraps a real one (loopback or TCP): it delays, drops,
// stalls or closes this rank's outgoing messages on a plan, so tests can cause the faults
// of RELIABILITY.md without a single #ifdef in production code.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "core/transport/transport.h"

namespace gyre {

struct FaultPlan {
  // Every outgoing message is held this long before it is handed to the wrapped transport.
  Duration delay = Duration::zero();
  // Outgoing messages with these indices (0-based count of messages sent by this rank) are
  // dropped: the send reports success, nothing arrives.
  std::vector<int64_t> drop;
  // After this many messages (if >= 0), every later message is held forever: this rank
  // looks alive but stuck.
  int64_t stall_after = -1;
  // After this many messages (if >= 0), the wrapped transport is shut down: peers see the
  // connection close.
  int64_t close_after = -1;
};

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, FaultPlan plan);
  ~FaultyTransport() override;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const Clock& clock() const override { return inner_->clock(); }
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done) override;
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
            DoneCallback done) override;
  void CancelOperation(uint64_t seq, const Status& reason) override;
  uint64_t BytesReceivedFrom(int peer) const override { return inner_->BytesReceivedFrom(peer); }
  uint64_t BytesSentTo(int peer) const override { return inner_->BytesSentTo(peer); }
  uint64_t BytesReceivedFrom(int peer, uint64_t seq) const override {
    return inner_->BytesReceivedFrom(peer, seq);
  }
  uint64_t BytesSentTo(int peer, uint64_t seq) const override {
    return inner_->BytesSentTo(peer, seq);
  }
  std::string DescribePeer(int peer) const override { return inner_->DescribePeer(peer); }
  void ExpectSend(size_t bytes) override { inner_->ExpectSend(bytes); }
  std::optional<StaleMessage> TakeStale(uint64_t seq) override { return inner_->TakeStale(seq); }
  void Shutdown() override;

  int64_t messages_seen() const;

 private:
  struct Held {
    TimePoint when;
    int peer;
    MessageHeader header;
    std::shared_ptr<std::vector<unsigned char>> payload;
    bool operator>(const Held& o) const { return when > o.when; }
  };
  void DelayLoop();

  std::unique_ptr<Transport> inner_;
  FaultPlan plan_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t sent_ = 0;
  bool stopping_ = false;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> delayed_;
  std::thread delay_thread_;
};

}  // namespace gyre
