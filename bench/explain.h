// gyre-bench --explain and --calibrate: the cost model's estimate of every algorithm beside
// the measured medians and the automatic choice, and the measurement of the model's machine
// parameters on a running job (core/algo/model_select.h: latency per round and CPU overhead
// per message from a barrier and a direct allreduce of 4 B, bandwidth from two ring
// allgathers, reduction and copy rates with every rank working at once).
#pragma once

#include <map>
#include <string>

#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/algo/cost.h"
#include "core/algo/model_select.h"

namespace gyre::bench {

// Measures this job's MachinePoint (world_size = comm.size()): each parameter's median
// over `runs` measurements. Every rank must call it (collectives) and gets the same numbers
// (each timing is the slowest rank's).
StatusOr<algo::MachinePoint> Calibrate(Comm& comm, int runs = 3);
std::string DescribeParams(const algo::CostParams& params);

// '#' lines for one cell size: each algorithm's estimate (with its terms) and, where
// measured, its median; the model's pick and why, against the measured best and against
// what auto ran.
std::string Explain(const algo::CollectiveSpec& spec, const algo::MachineModel& model,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran);
// The same under plain alpha-beta-gamma parameters (no per-message overhead).
std::string Explain(const algo::CollectiveSpec& spec, const algo::CostParams& params,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran);

}  // namespace gyre::bench
