#include "core/transport/faulty.h"

#include <algorithm>

namespace gyre {

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {
  if (plan_.delay > Duration::zero()) delay_thread_ = std::thread([this] { DelayLoop(); });
}

FaultyTransport::~FaultyTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (delay_thread_.joinable()) delay_thread_.join();
}

int64_t FaultyTransport::messages_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_;
}

void FaultyTransport::Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
                           DoneCallback done) {
  int64_t index;
  {
    std::lock_guard<std::mutex> lock(mu_);
    index = sent_++;
  }
  if (plan_.close_after >= 0 && index >= plan_.close_after) {
    inner_->Shutdown();
    done(UnavailableError("fault injection: rank " + std::to_string(rank()) +
                          " closed its connections after " + std::to_string(plan_.close_after) +
                          " messages"));
    return;
  }
  if (plan_.stall_after >= 0 && index >= plan_.stall_after) {
    // Stuck: the message never leaves and the send never completes on its own; only a
    // cancellation or shutdown releases the caller. The payload is not kept.
    done(Status::Ok());
    return;
  }
  if (std::find(plan_.drop.begin(), plan_.drop.end(), index) != plan_.drop.end()) {
    done(Status::Ok());
    return;
  }
  if (plan_.delay > Duration::zero()) {
    // Copy now so the caller's buffer is free; deliver later from the copy.
    auto payload = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      delayed_.push(Held{clock().Now() + plan_.delay, peer, header, std::move(payload)});
    }
    cv_.notify_all();
    done(Status::Ok());
    return;
  }
  inner_->Send(peer, header, data, bytes, std::move(done));
}

void FaultyTransport::DelayLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (delayed_.empty()) {
      cv_.wait_for(lock, Millis(100));
      continue;
    }
    TimePoint now = clock().Now();
    if (delayed_.top().when > now) {
      cv_.wait_for(lock, std::min<Duration>(delayed_.top().when - now, Millis(100)));
      continue;
    }
    Held h = delayed_.top();
    delayed_.pop();
    lock.unlock();
    auto payload = h.payload;
    inner_->Send(h.peer, h.header, payload->data(), payload->size(), [payload](Status) {});
    lock.lock();
  }
}

void FaultyTransport::Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
                           DoneCallback done) {
  inner_->Recv(peer, header, data, bytes, std::move(done));
}

void FaultyTransport::CancelOperation(uint64_t seq, const Status& reason) {
  inner_->CancelOperation(seq, reason);
}

void FaultyTransport::Shutdown() { inner_->Shutdown(); }

}  // namespace gyre
