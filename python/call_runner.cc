#include "python/call_runner.h"

#include <unistd.h>

#include <utility>

#include "client/comm_impl.h"
#include "core/base/thread.h"
#include "core/job/bootstrap.h"
#include "glog/logging.h"

namespace gyre::python {

namespace {

thread_local bool t_runner_thread = false;  // a CallRunner's worker or watcher
// The Completions whose completion this thread runs, and whether that completion has
// handed off its turn.
thread_local Completions* t_completing = nullptr;
thread_local bool t_handed_off = false;

}  // namespace

bool PendingCall::WaitUntil(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.infinite()) {
    cv_.wait(lock, [&] { return done_; });
    return true;
  }
  return cv_.wait_until(lock, deadline.when(), [&] { return done_; });
}

bool PendingCall::Done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status PendingCall::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void PendingCall::OnDone(std::function<void(const Status&)> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_) {
    callbacks_.push_back(std::move(fn));
    return;
  }
  Status s = status_;
  lock.unlock();
  fn(s);
}

void PendingCall::Complete(Status status) {
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    done_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : callbacks) fn(status);
}

CallRunner::CallRunner(std::unique_ptr<Comm> comm)
    : owner_pid_(static_cast<int>(::getpid())),
      comm_(std::move(comm)),
      worker_([this] { Loop(); }) {}

bool CallRunner::InForkedChild() const { return static_cast<int>(::getpid()) != owner_pid_; }

namespace {

std::shared_ptr<PendingCall> ForkedChildCall(int owner_pid) {
  auto pending = std::make_shared<PendingCall>();
  pending->Complete(InvalidArgumentError(
      "this Comm was made by process " + std::to_string(owner_pid) + ", and this process (pid " +
      std::to_string(::getpid()) +
      ") is a child forked from it: its threads and connections are the parent's, so the child "
      "cannot use it (make a Comm in the child, or fork before making one)"));
  return pending;
}

}  // namespace

CallRunner::~CallRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  messages_cv_.notify_all();
  worker_.join();
  if (watcher_.joinable()) watcher_.join();
}

std::shared_ptr<PendingCall> CallRunner::Submit(std::function<Status(Comm&)> call) {
  if (InForkedChild()) return ForkedChildCall(owner_pid_);
  auto pending = std::make_shared<PendingCall>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(call), pending});
  }
  cv_.notify_one();
  return pending;
}

std::shared_ptr<PendingCall> CallRunner::StartMessage(
    const std::function<std::shared_ptr<Work>(Comm&)>& start) {
  if (InForkedChild()) return ForkedChildCall(owner_pid_);
  auto pending = std::make_shared<PendingCall>();
  std::shared_ptr<Work> work = start(*comm_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(Message{std::move(work), pending});
    if (!watcher_.joinable()) watcher_ = std::thread([this] { WatchMessages(); });
  }
  messages_cv_.notify_one();
  return pending;
}

void CallRunner::WatchMessages() {
  t_runner_thread = true;
  const Clock& clock = *SteadyClock::Get();
  for (;;) {
    std::vector<Message> open;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // bounded: the destructor sets stopping_ and wakes this thread; StartMessage wakes it.
      messages_cv_.wait(lock, [&] { return stopping_ || !messages_.empty(); });
      if (messages_.empty()) return;
      open.assign(messages_.begin(), messages_.end());
    }
    // The oldest is waited on briefly, the others only polled; every wait also enforces
    // that message's progress timeout.
    // (Their Status is read again below, once they are done.)
    (void)open.front().work->Wait(Deadline::After(clock, Millis(2)));
    for (size_t i = 1; i < open.size(); ++i) {
      (void)open[i].work->Wait(Deadline::After(clock, Duration{}));
    }
    std::vector<Message> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = messages_.begin(); it != messages_.end();) {
        if (it->work->Done()) {
          finished.push_back(std::move(*it));
          it = messages_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Message& m : finished) m.pending->Complete(m.work->Wait());
  }
}

bool OnCallRunnerThread() { return t_runner_thread; }

Completions::Completions() : owner_(::getpid()) {}

Completions::~Completions() {
  for (std::thread& t : threads_) {
    if (t.joinable()) t.detach();
  }
}

void Completions::Post(std::function<void()> fn) {
  if (::getpid() == owner_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(fn));
      if (StartThreadIfNeeded()) {
        cv_.notify_all();
        return;
      }
      // No thread could be started: run it here, as before there were completion threads
      // (a callback that waits for a later call would then wait on this thread).
      fn = std::move(queue_.back());
      queue_.pop_back();
    }
  }
  fn();
}

bool Completions::StartThreadIfNeeded() {
  if (turn_taken_ || idle_ > 0 || queue_.empty()) return true;
  ++idle_;  // counted from now, so a second Post does not start another
  std::thread t;
  const Status started = StartThread(&t, "the torch backend", "completing calls",
                                     [self = shared_from_this()] { self->Run(); });
  if (!started.ok()) {
    --idle_;
    LOG(WARNING) << started.message();
    return false;
  }
  threads_.push_back(std::move(t));
  return true;
}

void Completions::HandOffCurrent() {
  if (t_completing != nullptr && !t_handed_off) t_completing->HandOff();
}

void Completions::HandOff() {
  std::lock_guard<std::mutex> lock(mu_);
  t_handed_off = true;
  turn_taken_ = false;
  StartThreadIfNeeded();
  cv_.notify_all();
}

void Completions::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // bounded: Shutdown sets stopping_ and wakes this thread.
    cv_.wait(lock,
             [&] { return (!turn_taken_ && !queue_.empty()) || (stopping_ && queue_.empty()); });
    --idle_;
    if (queue_.empty()) return;
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    turn_taken_ = true;
    lock.unlock();
    t_completing = this;
    t_handed_off = false;
    try {
      fn();
    } catch (const std::exception&) {
      // A completion reports through what it completes; this thread must go on regardless.
      // (Not catch (...): a thread Python ends at its exit unwinds through here.)
    }
    t_completing = nullptr;
    lock.lock();
    if (!t_handed_off) turn_taken_ = false;
    ++idle_;
    cv_.notify_all();
  }
}

void Completions::Shutdown() {
  // Until no thread is left: a completion running now may hand its turn on (a call it makes)
  // and so start another thread after the first swap.
  for (;;) {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      threads.swap(threads_);
    }
    if (threads.empty()) return;
    cv_.notify_all();
    for (std::thread& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();  // the completion that called this ends, then the thread (holding *this)
      } else {
        t.join();
      }
    }
  }
}

void CallRunner::Loop() {
  t_runner_thread = true;
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // bounded: the destructor sets stopping_ and wakes this thread.
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    Status status = item.call(*comm_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
    item.pending->Complete(std::move(status));
  }
}

void CallRunner::Release(std::unique_ptr<CallRunner> runner) {
  if (runner == nullptr) return;
  if (runner->InForkedChild()) {
    (void)runner.release();  // see InForkedChild: not one of its members may be touched
    return;
  }
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lock(runner->mu_);
    // Idle, or only queued calls: the destructor below runs them, each bounded by gyre's
    // deadlines.
    if (!runner->running_ && runner->messages_.empty()) return;
    runner->stopping_ = true;
    dropped.swap(runner->queue_);
  }
  for (Item& item : dropped) {
    item.pending->Complete(
        AbortedError("not run: its Comm was destroyed while an earlier call was still running"));
  }
  runner->cv_.notify_all();
  runner->messages_cv_.notify_all();
  runner->worker_.detach();
  if (runner->watcher_.joinable()) runner->watcher_.detach();
  (void)runner.release();  // the detached worker still uses it
}

StatusOr<std::unique_ptr<Comm>> JoinEmbedded(const EmbeddedSpec& spec) {
  job::JoinOptions o;
  o.identity.rank = spec.rank;
  o.identity.world_size = spec.world_size;
  o.identity.local_rank = spec.rank;
  o.identity.store_url = spec.store_url;
  o.identity.job_id = spec.job_id;
  o.identity.secret_file = spec.secret_file;
  o.identity.source = "python";
  o.flight_dir = spec.flight_dir;
  o.rendezvous_timeout = spec.rendezvous_timeout;
  o.comm.timeout = spec.timeout;
  o.comm.deterministic = spec.deterministic;
  o.store_factory = spec.store_factory;
  if (spec.rank < 0 || spec.rank >= spec.world_size) {
    return InvalidArgumentError("rank " + std::to_string(spec.rank) + " is outside world size " +
                                std::to_string(spec.world_size));
  }
  return client::MakeEmbedded(o);
}

StatusOr<std::unique_ptr<Comm>> JoinFromEnvironment() { return Comm::FromEnvironment(); }

StatusOr<std::unique_ptr<Comm>> JoinDaemon(const std::string& socket_path, Duration timeout) {
  return Comm::ConnectDaemon(socket_path, DeadlineAfter(timeout));
}

std::string StatusText(const Status& status) { return status.ToString(); }

const char* CodeName(StatusCode code) { return StatusCodeName(code); }

Deadline DeadlineAfter(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

bool Expired(Deadline deadline) { return deadline.Expired(*SteadyClock::Get()); }

Duration Remaining(Deadline deadline) { return deadline.Remaining(*SteadyClock::Get()); }

std::string FormatTime(Duration d) { return FormatDuration(d); }

StatusError::StatusError(const Status& status, const std::string& context)
    : std::runtime_error(context.empty() ? status.ToString() : context + ": " + status.ToString()),
      status_(status) {}

StatusError::~StatusError() = default;

}  // namespace gyre::python
