// Runs a Comm's calls in the order they were made: asynchronous calls on one worker
// thread, blocking calls inline once every earlier asynchronous call has finished.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "client/include/gyre/gyre.h"

namespace gyre::client {

class CallQueue {
 public:
  CallQueue();
  // Shutdown().
  ~CallQueue();

  // Lets the call that is running finish, completes every queued one with Aborted ("not
  // run"), and stops the worker. Call it before what the calls use goes away (a Comm's
  // destructor); idempotent.
  void Shutdown();

  // ResourceExhausted, naming `rank`, when the worker is not running and cannot be started;
  // `call` is then not run.
  StatusOr<std::shared_ptr<Work>> Submit(std::function<Status()> call, int rank);
  // Runs `call` (a callable returning Status) after all submitted calls finished. A
  // template, not a std::function: a blocking call allocates nothing to get here.
  template <typename Call>
  Status RunInline(Call&& call) {
    WaitForSubmitted();
    std::lock_guard<std::mutex> lock(call_mu_);
    return call();
  }

 private:
  struct Item;
  void Loop();
  void WaitForSubmitted();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Item>> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::mutex call_mu_;  // one call at a time
  std::thread worker_;
};

}  // namespace gyre::client
