// The daemon's client endpoint: a Unix socket (owner-only) on which local programs call
// collectives. Each connection gets a thread; requests are length-prefixed protobufs
// (proto/client.proto) and payloads live in a shared-memory file the client maps and names.
// Calls from all connections run one at a time on the rank's Communicator.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"

namespace gyre::daemon {

class ClientServer {
 public:
  // `comm` must outlive the server.
  ClientServer(Communicator* comm, std::string job_id, std::string log_prefix);
  ~ClientServer();

  Status Listen(const std::string& socket_path);
  // Serves until Stop(), or, if `until_first_client_leaves`, until a client that said
  // hello disconnects. Returns the number of requests that failed.
  void Serve(bool until_first_client_leaves);
  void Stop();

  int64_t calls_served() const { return calls_.load(); }

 private:
  void HandleConnection(int fd);

  Communicator* comm_;
  std::string job_id_;
  std::string prefix_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> client_left_{false};
  std::atomic<int64_t> calls_{0};
  std::mutex call_mu_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
  std::vector<int> live_fds_;  // guarded by threads_mu_
};

}  // namespace gyre::daemon
