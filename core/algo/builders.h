// Schedule builders: pure functions from a collective call to the steps of one rank (or of
// every rank). Every builder handles p = 1, non-powers of two, count 0, uneven chunks and
// any root. The input and output buffers may be the same memory (an in-place call):
// builders never write an output region while the matching input region is still to be
// read, and a Copy from input to the same output region is skipped by the executor.
#pragma once

#include "core/algo/collective.h"
#include "core/algo/schedule.h"

namespace gyre::algo {

// `spec` is validated first; spec.algorithm must be concrete (see select.h for kAuto).
StatusOr<RankSchedule> BuildRankSchedule(const CollectiveSpec& spec, int rank);

// Every rank's schedule, for verification, costing, printing and simulation.
StatusOr<Schedule> BuildSchedule(const CollectiveSpec& spec);

}  // namespace gyre::algo
