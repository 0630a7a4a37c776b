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
bool RunMainJob(Communicator& comm, std::ostream& report, const WorkloadOptions& options = {});

}  // namespace gyre::daemon
