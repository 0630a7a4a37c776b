// The core shared by gyre's Python module and its torch.distributed backend: a Comm whose
// calls all run, in the order they were made, on one worker thread, so that a Python
// caller can wait in short slices (checking for Ctrl-C between them) with the GIL released.
// Built as one shared library so both extension modules use a single copy of gyre.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client/include/gyre/gyre.h"
#include "core/store/store.h"

namespace gyre::python {

// The completion of one submitted call. Thread-safe.
class PendingCall {
 public:
  // True once the call finished; false when `deadline` passed first (the call goes on).
  bool WaitUntil(Deadline deadline);
  bool Done() const;
  // The call's Status. REQUIRES: Done().
  Status status() const;
  // Runs `fn` once the call completes: at once on this thread when it already has, else
  // on the runner's worker thread (or its message watcher). `fn` must not block for long:
  // user code (a future's callbacks) belongs on a Completions thread, posted from `fn`.
  void OnDone(std::function<void(const Status&)> fn);

  // Called by the runner.
  void Complete(Status status);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::vector<std::function<void(const Status&)>> callbacks_;
};

class CallRunner {
 public:
  explicit CallRunner(std::unique_ptr<Comm> comm);
  // Finishes the calls already submitted (each is bounded by gyre's deadlines), then stops.
  ~CallRunner();
  // For an owner going away without waiting (Ctrl-C, interpreter exit): when a call is still
  // running, the calls queued behind it fail as Aborted, and the runner is left to finish
  // the running one by its own deadline on a detached thread (its memory is then not
  // reclaimed: the process is usually exiting). An idle runner is simply destroyed.
  static void Release(std::unique_ptr<CallRunner> runner);
  CallRunner(const CallRunner&) = delete;
  CallRunner& operator=(const CallRunner&) = delete;

  Comm& comm() { return *comm_; }

  // In a child forked from the process that made this runner, nothing of it may be used: its
  // threads did not come along, its locks may be held for good, and its connections are the
  // parent's (shutting them down would cut the parent off). Calls then fail at once, saying
  // so, and Release leaves the runner alone.
  bool InForkedChild() const;

  // Queues `call`; it runs after every call submitted before it.
  std::shared_ptr<PendingCall> Submit(std::function<Status(Comm&)> call);
  // Starts a send or receive now, on the caller's thread (`start` only posts it: Comm's
  // SendAsync / RecvAsync), beside the queued calls, so a receive posted before the send it
  // matches does not hold up this rank's sends. The result completes with the message.
  std::shared_ptr<PendingCall> StartMessage(
      const std::function<std::shared_ptr<Work>(Comm&)>& start);

 private:
  struct Item {
    std::function<Status(Comm&)> call;
    std::shared_ptr<PendingCall> pending;
  };
  struct Message {
    std::shared_ptr<Work> work;
    std::shared_ptr<PendingCall> pending;
  };
  void Loop();
  // Completes started messages as they finish; each is bounded by its progress timeout.
  void WatchMessages();

  const int owner_pid_;  // the process that made this runner
  std::unique_ptr<Comm> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool running_ = false;  // a call is executing on the worker
  bool stopping_ = false;
  std::thread worker_;
  std::deque<Message> messages_;  // started, not yet completed (under mu_)
  std::condition_variable messages_cv_;
  std::thread watcher_;  // started with the first message
};

// True on a CallRunner's worker thread or its message watcher: a wait there for a call of
// that runner could never end (the call would run, or complete, on that very thread).
bool OnCallRunnerThread();

// Runs completions that may run user code (marking a torch Work and its Future done runs the
// future's `then` callbacks) off the CallRunner's threads, so a callback may make calls and
// wait for them. Completions start one at a time, in the order posted, on a thread started
// when first needed. A completion that makes a call or waits for one (HandOffCurrent) lets
// the next completion start on another thread, since what it waits for completes behind it.
// Thread-safe; owned through a shared_ptr, which its threads also hold.
class Completions : public std::enable_shared_from_this<Completions> {
 public:
  Completions();
  // Threads still listed (one started by a hand-off after Shutdown, or the one dropping the
  // last reference) are detached: each holds a reference, so none outlives its state.
  ~Completions();
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  void Post(std::function<void()> fn);
  // On a thread running a completion (of any Completions), lets that Completions start its
  // next completion on another thread; elsewhere, does nothing.
  static void HandOffCurrent();
  // Runs what was posted, then joins the threads (a thread calling this from its own
  // completion is left to finish on its own). Posts after this run at once on the poster.
  void Shutdown();

 private:
  void Run();
  void HandOff();
  // False when a thread was needed and could not be started. REQUIRES: mu_ held.
  bool StartThreadIfNeeded();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool turn_taken_ = false;  // a thread runs a completion that has not handed off
  int idle_ = 0;             // threads waiting for the turn (or starting)
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  // The process that made it: in a child forked from it the threads are the parent's (and
  // mu_ may be held by one of them), so completions run at once on the poster there.
  const pid_t owner_;
};

// How to join a job in-process.
struct EmbeddedSpec {
  int rank = -1;
  int world_size = 0;
  std::string store_url;  // used when store_factory is empty
  std::string job_id = "gyre";
  std::string secret_file;
  std::string flight_dir;
  Duration timeout = Seconds(30);  // progress timeout
  Duration rendezvous_timeout = Seconds(60);
  bool deterministic = false;
  std::function<StatusOr<std::unique_ptr<store::Store>>()> store_factory;
};

// The ways to make a Comm, gathered here so the extension modules link only this library.
StatusOr<std::unique_ptr<Comm>> JoinEmbedded(const EmbeddedSpec& spec);
StatusOr<std::unique_ptr<Comm>> JoinFromEnvironment();
StatusOr<std::unique_ptr<Comm>> JoinDaemon(const std::string& socket_path, Duration timeout);

// "Aborted: rank 3 stalled ..." with the code's name, as shown to Python.
std::string StatusText(const Status& status);
const char* CodeName(StatusCode code);
Deadline DeadlineAfter(Duration d);
bool Expired(Deadline deadline);
Duration Remaining(Deadline deadline);
std::string FormatTime(Duration d);

// A failed gyre Status carried as a C++ exception (torch's Work and futures hold
// exceptions); gyre's Python module turns it into gyre.GyreError.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& status, const std::string& context = "");
  ~StatusError() override;
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace gyre::python
