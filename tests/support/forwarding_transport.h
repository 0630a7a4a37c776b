// A test Transport that forwards the calls every transport must implement to an inner one
// (loopback, say); a test overrides what it observes or fakes. The optional hooks
// (ExpectSend, TakeStale, LastExhaustion, DescribePeer) keep Transport's defaults unless the
// test overrides them.
#pragma once

#include <memory>
#include <utility>

#include "core/transport/transport.h"

namespace gyre::testing {

class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const Clock& clock() const override { return inner_->clock(); }
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done) override {
    inner_->Send(peer, header, data, bytes, std::move(done));
  }
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
            DoneCallback done) override {
    inner_->Recv(peer, header, data, bytes, std::move(done));
  }
  void CancelOperation(uint64_t seq, const Status& reason) override {
    inner_->CancelOperation(seq, reason);
  }
  uint64_t BytesReceivedFrom(int peer) const override { return inner_->BytesReceivedFrom(peer); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  std::unique_ptr<Transport> inner_;
};

}  // namespace gyre::testing
