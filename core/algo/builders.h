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

// Whether algorithm `a` of `c` cuts its messages into the call's segments
// (CollectiveSpec::segment_elems), as found from a small schedule of it; false for one that
// sends a block (or a subtree's blocks) as one message whatever the segment.
bool CutsMessagesIntoSegments(Collective c, Algorithm a);

// What a caller can do when a message of `c` run as `a` is over the largest message the
// transport carries, said after "...exceeds max_frame_bytes (N): ". True to the collective:
// another algorithm is named only when one of `c` cuts its messages, and when none does (as
// for gather and scatter) the advice is smaller calls alone.
std::string OversizeMessageRemedy(Collective c, Algorithm a);

}  // namespace gyre::algo
