// The executor: runs one rank's schedule over any Transport. It issues every step whose
// dependencies are done, runs reductions on the calling thread while the transport moves
// the next messages, counts bytes and messages per peer, enforces the progress deadline
// and the operation deadline, and finishes each operation exactly once with a Status.
//
// Threading: Run() blocks its caller; transport callbacks only enqueue completions, so all
// schedule state is touched by the calling thread alone. OpRun exposes the same machine
// step by step for drivers that own the clock (the network simulator).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/algo/schedule.h"
#include "core/base/clock.h"
#include "core/transport/transport.h"

namespace gyre {

struct PeerCounters {
  int64_t bytes_sent = 0;
  int64_t msgs_sent = 0;
  int64_t bytes_recv = 0;
  int64_t msgs_recv = 0;
};

struct OpCounters {
  std::vector<PeerCounters> peers;  // indexed by rank
  int64_t bytes_reduced = 0;
  int64_t bytes_copied = 0;

  int64_t bytes_sent() const;
  int64_t msgs_sent() const;
  int64_t bytes_recv() const;
  int64_t msgs_recv() const;
  void Add(const OpCounters& other);
};

struct ExecOptions {
  // How long to wait for the next byte from the peer this rank depends on. A peer that
  // keeps sending never trips it, however large the message; a silent one trips it after
  // this long, whatever the size.
  Duration progress_timeout = Seconds(30);
  // A limit on the whole operation (Infinite by default).
  Deadline total_deadline = Deadline::Infinite();
};

struct OpContext {
  uint64_t seq = 0;
  OpDesc desc;
  std::string name;  // "allreduce seq=41 (ring, 4 MiB float32)", used in every error
};

struct OpBuffers {
  const void* input = nullptr;
  void* output = nullptr;
};

class OpRun;

class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs `schedule` (rank transport->rank()'s part of `spec`) to the end. On failure the
  // operation's pending messages are cancelled before returning, and the error names the
  // operation, sequence number, step, the peer and the bytes received from it so far.
  // `counters` (optional) receives this operation's counts, also on failure.
  Status Run(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
             const OpContext& context, OpBuffers buffers, Transport* transport,
             const ExecOptions& options, OpCounters* counters);

 private:
  std::vector<unsigned char> scratch_;  // reused across operations
};

}  // namespace gyre
