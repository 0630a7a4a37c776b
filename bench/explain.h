// gyre-bench --explain and --calibrate: the cost model's estimate of every algorithm beside
// the measured medians and the automatic choice, under machine parameters either given on
// the command line or measured in the same run (a barrier for alpha, a ring allgather for
// beta, the reduce kernel for gamma).
#pragma once

#include <map>
#include <string>

#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/algo/cost.h"

namespace gyre::bench {

// Measures alpha, beta and gamma on this job; every rank must call it (collectives).
StatusOr<algo::CostParams> Calibrate(Comm& comm);
std::string DescribeParams(const algo::CostParams& params);

// '#' lines for one cell size: each algorithm's estimate and, where measured, its median;
// the model's pick against the measured best and against what auto ran.
std::string Explain(const algo::CollectiveSpec& spec, const algo::CostParams& params,
                    const std::map<std::string, double>& measured_us, const std::string& auto_ran);

}  // namespace gyre::bench
