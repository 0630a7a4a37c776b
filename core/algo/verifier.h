// The schedule verifier: checks a whole schedule before anything runs. It proves, for the
// schedule as built (not for a test input):
//  - structure: peers in range, regions inside their buffers, nothing writes the input,
//    dependencies point to earlier steps (so they form a DAG);
//  - matching: every send has exactly one receive with the same (src, dst, tag) and the
//    same element count, and vice versa;
//  - no races: two steps of one rank touching overlapping elements, one of them writing,
//    are ordered by the dependencies;
//  - progress: the schedule runs to the end (no receive waits for a send that waits on it);
//  - the postcondition, symbolically: each output element holds exactly the contributions
//    the collective promises (every rank's element once for a reduction, the root's element
//    for a broadcast, ...), never one twice, never an unwritten value; for a barrier, every
//    rank's completion depends on every rank's start.
#pragma once

#include "core/algo/schedule.h"

namespace gyre::algo {

struct VerifyOptions {
  // Also run with the input and output of each rank as the same memory (an in-place call)
  // where the collective allows it (allreduce; broadcast), and check the postcondition.
  bool check_in_place = true;
  // The pairwise race check is quadratic in the accesses of one element range; schedules
  // with more steps per rank than this skip it (the other checks always run).
  int max_steps_for_race_check = 20000;
};

// OK, or Internal describing the first violation with the rank,
// step index, step text and what was expected (a bad schedule is a gyre bug).
Status VerifySchedule(const Schedule& schedule, const VerifyOptions& options = {});

}  // namespace gyre::algo
