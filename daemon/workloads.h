// Built-in workloads of gyred, so a user needs no program of their own:
//  - selftest: every collective and algorithm against the sequential reference;
//  - main: the main job (README): verification table, per-rank counters against theory,
//    the float-associativity case, and timings.
// Every rank runs the same workload; rank 0 writes the report. Both return true only if
// every check passed on every rank, and every rank notes the first call or check that failed
// on it, for it to print: a rank other than 0 writes no report.
#pragma once

#include <atomic>
#include <ostream>
#include <string>

#include "core/comm/communicator.h"

namespace gyre::daemon {

struct WorkloadOptions {
  int timing_runs = 7;  // per timed cell; at least 5
  // Set (by a signal handler) to stop: the workload makes no further call, returns false, and
  // rank 0's report keeps the sections it finished and says where it stopped. A call already
  // in flight is not interrupted. Null: run to the end. Must outlive the workload.
  const std::atomic<bool>* stop = nullptr;
};

// The first call or check that failed on this rank, and why. Later failures are usually its
// consequences (a peer that gave up, a gather that cannot collect), so only the first is kept.
class FirstFailure {
 public:
  // `what` names the call or check ("allreduce ring, count 4003"); `why` says what happened.
  void Note(const std::string& what, const std::string& why);
  void Note(const std::string& what, const Status& status) {
    if (!status.ok()) Note(what, status.ToString());
  }
  bool empty() const { return text_.empty(); }
  // "<what>: <why>"; empty when nothing failed here.
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

bool RunSelftest(Communicator& comm, std::ostream& report, const WorkloadOptions& options,
                 FirstFailure* failure);
// Allreduce float32 sum from 4 B to `max_bytes` by powers of 4 with automatic algorithm
// choice, timed by BENCH.md's method (bench/bench_common.h); rank 0 writes the table.
bool RunBench(Communicator& comm, std::ostream& report, int64_t max_bytes,
              const WorkloadOptions& options, FirstFailure* failure);
bool RunMainJob(Communicator& comm, std::ostream& report, const WorkloadOptions& options,
                FirstFailure* failure);

}  // namespace gyre::daemon
