// The cost model's opinion of every algorithm for one call: each candidate's whole schedule
// is built and walked (cost.h) under given machine parameters. gyre-bench --explain prints it
// beside the measured times and the automatic choice, so a user sees why an algorithm wins
// and how far the model is from the machine.
#pragma once

#include <vector>

#include "core/algo/collective.h"
#include "core/algo/cost.h"

namespace gyre::algo {

struct Estimate {
  Algorithm algorithm = Algorithm::kAuto;
  double seconds = 0;
};

// Every algorithm of spec.collective that can run `spec` (spec.algorithm is ignored),
// fastest first. Candidates whose schedule cannot be built for this spec are left out.
std::vector<Estimate> EstimateAlgorithms(const CollectiveSpec& spec, const CostParams& params);

}  // namespace gyre::algo
