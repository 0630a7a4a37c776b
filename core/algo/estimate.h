// The cost model's opinion of every algorithm for one call: each candidate's whole schedule
// is built and walked (cost.h) under given machine parameters; the walk is bounded below by
// the job's total work over the throughput of all ranks at once (ranks that time-share the
// cores cannot all run at the one-pair rates of the walk); and the busiest rank's CPU
// overhead per message is added, since no rank overlaps it with its own work. The automatic choice
// (model_select.h) takes the fastest; gyre-bench --explain prints them all beside the measured
// times, so a user sees why an algorithm wins and how far the model is from the machine.
#pragma once

#include <cstdint>
#include <vector>

#include "core/algo/collective.h"
#include "core/algo/cost.h"

namespace gyre::algo {

// The terms beyond the walk's (0: left out).
struct SharedCosts {
  // CPU per message sent or received, as measured with every rank equally busy (so with
  // ceil(p / cores) ranks sharing the busiest core). Charged per core: the busiest core's
  // messages (all its ranks') at overhead_s_per_msg / ceil(p / cores) each.
  double overhead_s_per_msg = 0;
  // Each rank's rates when every rank works at once. Rank r runs on core r mod `cores`
  // (0: a core per rank); a core's work is the sum over its ranks of (bytes sent + received)
  // / 2 * beta_all + bytes reduced * gamma_all + bytes copied * delta_all, and the estimate
  // is at least the busiest core's work * cores / p + rounds * alpha (the waits of the
  // critical path are not work another rank can fill). When every core carries the same
  // work that is the job's total work over p.
  int cores = 0;
  double beta_all_s_per_byte = 0;
  double gamma_all_s_per_byte = 0;
  double delta_all_s_per_byte = 0;
};

struct Estimate {
  Algorithm algorithm = Algorithm::kAuto;
  double seconds = 0;       // max(walk_s, throughput_s) + overhead_s: what the choice compares
  double walk_s = 0;        // the schedule walk under alpha, beta, gamma, delta (cost.h)
  double overhead_s = 0;    // the busiest core's messages x their cost (SharedCosts)
  double throughput_s = 0;  // the busiest core's work (see SharedCosts) + rounds x alpha
  int64_t rounds = 0;       // messages on the longest chain of receives
  int64_t max_msgs = 0;     // sends + receives of the busiest rank
  int64_t max_bytes = 0;    // bytes sent + received by the busiest rank
  int64_t max_reduced_bytes = 0;
};

// Every algorithm of spec.collective that can run `spec` (spec.algorithm is ignored),
// fastest first (ties keep AlgorithmsFor's order). Candidates whose spec is invalid (e.g.
// a local_size or grid_rows that does not divide p) or whose schedule cannot be built are
// left out. With `shared` left at zero this is the plain alpha-beta walk.
std::vector<Estimate> EstimateAlgorithms(const CollectiveSpec& spec, const CostParams& params,
                                         const SharedCosts& shared = {});

// One candidate (spec.algorithm must be concrete).
StatusOr<Estimate> EstimateAlgorithm(const CollectiveSpec& spec, const CostParams& params,
                                     const SharedCosts& shared = {});

}  // namespace gyre::algo
