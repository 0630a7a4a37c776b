// The daemon's client endpoint: a Unix socket (owner-only) on which local programs call
// collectives. Each connection gets a thread (and one heartbeat thread for its lifetime);
// requests are protobufs (proto/client.proto), length-prefixed on the socket until the client
// attaches a doorbell (core/ipc/doorbell.h) and in its shared slots from then on; payloads
// live in shared memory the client creates and passes as descriptors (memfds sealed against
// shrinking, so the client cannot truncate what the daemon has mapped).
// A rank has one program with one communicator at a time, as an embedded rank has: while a
// connection that said hello lasts, another hello is refused (AlreadyExists, naming the
// program served), since its calls would be matched with the other ranks' calls of the
// first. A gyred that outlives its program may serve the next one. Every connection first proves
// the job's secret (core/auth/handshake.h) before a single request is read.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/auth/handshake.h"
#include "core/base/log_budget.h"
#include "core/comm/communicator.h"
#include "core/ipc/doorbell.h"
#include "core/ipc/ipc.h"
#include "proto/client.pb.h"

namespace gyre::daemon {

class ClientServer {
 public:
  // `comm` must outlive the server.
  ClientServer(Communicator* comm, std::string job_id, std::string log_prefix);
  ~ClientServer();

  // Clients must prove `secret` (empty: the job has none) within `handshake_timeout`.
  // Call before Serve.
  void SetSecret(auth::Secret secret, Duration handshake_timeout = Seconds(5));

  // Told the pid of each program that says hello, and 0 once its connection ends (the
  // control endpoint reports it and whether it is stopped). Call before Serve.
  void OnProgram(std::function<void(int64_t pid)> f) { on_program_ = std::move(f); }

  Status Listen(const std::string& socket_path);
  // Serves until Stop(), or, if `until_first_client_leaves`, until a client that said
  // hello disconnects. Returns the number of requests that failed.
  void Serve(bool until_first_client_leaves);
  // Stops serving and wakes the connection threads. Not for a signal handler: it locks.
  void Stop();
  // Async-signal-safe: Serve() notices within 100 ms and does what Stop() does.
  void RequestStop();

  int64_t calls_served() const { return calls_.load(); }
  // A program that said hello and then went away without its Goodbye (killed, crashed, or
  // exited without closing its communicator), or whose goodbye came without a Close that met
  // every rank (its Comm destroyed: on purpose). Empty when none did.
  struct Departure {
    int64_t program_pid = 0;
    std::string how;
    bool on_purpose = false;
  };
  std::optional<Departure> departure() const;
  // Whether a program said goodbye after a Close that met every rank.
  bool program_closed() const { return program_closed_.load(); }
  const auth::RefusalCounters& refusals() const { return refusals_; }

 private:
  // At most this many connections may be in the handshake, and this many open at all; more
  // are closed at once, so idle strangers cost neither threads nor descriptors.
  static constexpr int kMaxUnauthenticated = 16;
  static constexpr size_t kMaxConnections = 64;

  void HandleConnection(int fd);
  // The next request through a connection's doorbell (after request `*seq`, which it
  // advances); Unavailable once the client has closed the socket or Stop() was called.
  // Descriptors (memfds for MapBuffer) come ahead on the socket, each on an empty request,
  // and are held by `reader`; anything else written there drops the client.
  Status NextRequest(ipc::Doorbell& bell, int fd, ipc::MessageReader& reader, bool spin,
                     uint32_t* seq, proto::ClientRequest* req);
  // The descriptor that a request which needs one came with (the caller owns it). Through
  // the doorbell it was sent ahead on the socket and may still be on its way.
  StatusOr<int> RequestFd(ipc::MessageReader& reader, bool via_doorbell);
  Status Authenticate(int fd);
  // Joins the connection threads that have finished. Requires threads_mu_.
  void ReapFinishedThreads();

  Communicator* comm_;
  std::string job_id_;
  std::string prefix_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> client_left_{false};
  std::atomic<bool> program_closed_{false};
  std::function<void(int64_t)> on_program_;
  // A client that said hello is connected: the rank's program. Another hello meanwhile is
  // refused.
  std::atomic<bool> serving_{false};
  // Serve(until_first_client_leaves = true): one program's communicator, then exit; a hello
  // after the first program's is refused.
  std::atomic<bool> one_program_{false};
  std::atomic<bool> ever_served_{false};
  // Takes the rank for a hello from `pid`: AlreadyExists while another program is served
  // (after waiting up to 2 s for one that is leaving), Unavailable once the one program of
  // Serve(until_first_client_leaves) has been served.
  Status AdmitProgram(int64_t pid);
  std::atomic<int64_t> served_pid_{0};
  std::atomic<int64_t> calls_{0};
  mutable std::mutex departure_mu_;
  std::optional<Departure> departure_;  // guarded by departure_mu_
  std::mutex call_mu_;
  std::mutex write_mu_;  // heartbeats and answers share a client's socket
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
  std::vector<int> live_fds_;              // guarded by threads_mu_
  std::vector<std::thread::id> finished_;  // guarded by threads_mu_
  auth::Credentials credentials_;  // any job id: the socket is this rank's, the secret the job's
  Duration handshake_timeout_ = Seconds(5);
  auth::ReplayGuard replay_guard_;
  auth::RefusalCounters refusals_;
  // Refusals are logged at most this often: anyone who can reach the socket can cause one.
  LogBudget refusal_log_{20, Seconds(60)};
  // Connections still in the handshake, oldest first (guarded by threads_mu_): each is open
  // until its thread, having left this list, closes it.
  std::deque<int> handshaking_;
};

}  // namespace gyre::daemon
