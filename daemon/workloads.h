// Built-in workloads of gyred, so a user needs no program of their own:
//  - selftest: every collective and algorithm against the sequential reference;
//  - main: the main job (README): verification table, per-rank counters against theory,
//    the float-associativity case, and timings.
// Every rank runs the same workload; rank 0 writes the report. Both return true only if
// every check passed on every rank.
#pragma once

#include <ostream>

#include "core/comm/communicator.h"

namespace gyre::daemon {

struct WorkloadOptions {
  int timing_runs = 7;  // per timed cell; at least 5
};

bool RunSelftest(Communicator& comm, std::ostream& report);
// Allreduce float32 sum from 4 B to `max_bytes` by powers of 4 with automatic algorithm
// choice, timed by BENCH.md's method (bench/bench_common.h); rank 0 writes the table.
bool RunBench(Communicator& comm, std::ostream& report, int64_t max_bytes);
bool RunMainJob(Communicator& comm, std::ostream& report, const WorkloadOptions& options = {});

}  // namespace gyre::daemon
