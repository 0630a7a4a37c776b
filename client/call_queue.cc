#include "client/call_queue.h"

#include "core/base/thread.h"

namespace gyre::client {

struct CallQueue::Item : public Work {
  std::function<Status()> call;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;

  Status Wait(Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      if (deadline.infinite()) {
        // bounded: the caller asked for no deadline; the call itself is bounded by the daemon's
        // deadlines and heartbeat (or the communicator's), so it completes.
        cv.wait(lock);
      } else if (cv.wait_until(lock, deadline.when()) == std::cv_status::timeout && !done) {
        return DeadlineExceededError("asynchronous call not finished by its wait deadline");
      }
    }
    return status;
  }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
};

CallQueue::CallQueue() = default;

CallQueue::~CallQueue() { Shutdown(); }

void CallQueue::Shutdown() {
  std::deque<std::shared_ptr<Item>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& item : dropped) {
    {
      std::lock_guard<std::mutex> il(item->mu);
      item->status =
          AbortedError("not run: its Comm was destroyed while this call was still queued");
      item->done = true;
    }
    item->cv.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

StatusOr<std::shared_ptr<Work>> CallQueue::Submit(std::function<Status()> call, int rank) {
  auto item = std::make_shared<Item>();
  item->call = std::move(call);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The worker starts with the first asynchronous call: a program that makes none has no
    // thread for it, and one that cannot have a thread gets this call refused, not an abort.
    if (!worker_.joinable() && !stopping_) {
      GYRE_RETURN_IF_ERROR(StartThread(&worker_, "rank " + std::to_string(rank),
                                       "its asynchronous calls", [this] { Loop(); }));
    }
    queue_.push_back(item);
  }
  cv_.notify_all();
  return std::shared_ptr<Work>(item);
}

void CallQueue::WaitForSubmitted() {
  std::unique_lock<std::mutex> lock(mu_);
  // bounded: every queued call is itself bounded (see Work::Wait above).
  cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

void CallQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // bounded: the idle worker thread; Submit() or the destructor wakes it.
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    auto item = queue_.front();
    queue_.pop_front();
    ++running_;
    lock.unlock();
    Status s;
    {
      std::lock_guard<std::mutex> call_lock(call_mu_);
      s = item->call();
    }
    {
      std::lock_guard<std::mutex> il(item->mu);
      item->status = s;
      item->done = true;
    }
    item->cv.notify_all();
    lock.lock();
    --running_;
    cv_.notify_all();
  }
}

}  // namespace gyre::client
