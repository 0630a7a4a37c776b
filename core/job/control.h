// The control path: a small TCP endpoint per rank, separate from the data sockets and served
// by its own thread, so it answers while the rank is blocked inside a collective. Peers use it
// to learn each other's state when an operation fails and to deliver the verdict; gyrectl uses
// it to show a running or hung job. One request per connection, bounded by deadlines.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/auth/handshake.h"
#include "core/auth/handshake_queue.h"
#include "core/base/clock.h"
#include "core/base/log_budget.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "proto/control.pb.h"

namespace gyre::job {

struct RankInfo {
  int rank = 0;
  int64_t pid = 0;
  std::string host;
  std::string data_address;
};

proto::RankState StateOf(const OpSnapshot& snap, const RankInfo& info);

// How a process whose /proc/<pid>/stat line is `stat` is stopped: "stopped by a signal" (state
// T: SIGSTOP, SIGTSTP, Ctrl-Z), "stopped by a tracer" (t: a debugger), else "" (running,
// sleeping, or unreadable).
std::string StopStateOf(const std::string& stat);

class ControlServer {
 public:
  // Every connection must prove `credentials` (the job's secret) before it is read.
  ControlServer(Communicator* comm, RankInfo info, auth::Credentials credentials);
  ~ControlServer();

  Status Start(const std::string& host);
  std::string address() const { return address_; }
  void Stop();

  // A daemon's program (0: none connected now): answers carry its pid and whether it is
  // stopped. Safe from any thread.
  void SetProgramPid(int64_t pid) { program_pid_.store(pid); }

  // At most this many connections are served at once. At the cap the one that has waited
  // longest in the handshake is cut off for the newcomer: a real query proves itself within
  // milliseconds, so idle strangers holding every slot cannot make a live rank look dead.
  // Only when every slot holds a proven connection is the newcomer closed.
  static constexpr int kMaxActive = 32;

  // Connections refused: a failed handshake (stranger, other job, replay) or cut off at the
  // cap; over_cap() counts the latter. Safe from any thread.
  int64_t refused() const { return refused_.load(); }
  int64_t over_cap() const { return over_cap_.load(); }

  // The stall-probe rounds of other ranks, as heard by their questions: the operation
  // (seq + 1) the last one asked about, and how many were heard in all. Safe from any thread.
  struct HeardProbes {
    uint64_t seq_plus_one = 0;
    uint64_t count = 0;
  };
  HeardProbes heard_probes() const;

 private:
  void Loop();
  void Handle(int fd);
  // Takes `fd` off the handshake list; false if it was cut off (shut down) already.
  bool Proven(int fd);

  Communicator* comm_;
  RankInfo info_;
  std::string address_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_{0};
  auth::Credentials credentials_;
  auth::ReplayGuard replay_guard_;
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> over_cap_{0};
  // Refusals are logged at most this often: anyone who can reach the port can cause one.
  LogBudget refusal_log_{20, Seconds(60)};
  std::atomic<int64_t> program_pid_{0};
  mutable std::mutex heard_mu_;
  HeardProbes heard_;
  std::mutex handshaking_mu_;
  // Accepted and not yet proven, oldest first; each handler closes its own descriptor, and
  // takes it off this list (under the lock) before it does, so a cut-off never hits a reused one.
  auth::HandshakeQueue<int> handshaking_;
  std::thread thread_;
};

enum class Reach {
  kAnswered,
  kRefused,  // nothing listens: the process is gone
  kSilent,   // connected but no answer in time: the process is stopped or frozen
  // No connection at all within the deadline, or no route: the network between here and
  // there is cut (a partition) or the host is down. A stopped process on a reachable host
  // still completes the TCP handshake (the kernel answers), so this is not "stalled".
  kUnreachable,
  kError,  // anything else (reset mid-answer, garbage)
};

// How a failed connect to a control endpoint reads: refused (nothing listens), unreachable
// (no route, or no answer to the connect itself) or another error.
Reach ClassifyConnectFailure(const Status& connect_status);

struct QueryResult {
  Reach reach = Reach::kError;
  proto::ControlResponse response;
  std::string error;
};

// `credentials`: this side's proof (rank kNoRank for a tool such as gyrectl);
// `target_rank`: the rank behind `address`.
QueryResult QueryControl(const std::string& address, int target_rank,
                         const proto::ControlRequest& request, Duration timeout,
                         const auth::Credentials& credentials);

// Sends `request` to every address (index = rank) at once and waits for all, each bounded
// by `timeout`. Empty addresses are skipped.
std::vector<QueryResult> QueryAll(const std::vector<std::string>& addresses,
                                  const proto::ControlRequest& request, Duration timeout,
                                  const auth::Credentials& credentials);

}  // namespace gyre::job
