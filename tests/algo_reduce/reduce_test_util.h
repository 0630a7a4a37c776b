// Helpers shared by the reducing-collective schedule tests: the algorithm list, spec
// construction, a structural in-place check and a symbolic run that records the order in
// which each output element was reduced.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/algo/collective.h"
#include "core/algo/schedule.h"

namespace gyre::algo::testing {

struct AlgoCase {
  Collective collective;
  Algorithm algorithm;
};

// Every reducing (collective, algorithm) pair, canonical included.
std::vector<AlgoCase> ReducingCases();

CollectiveSpec MakeSpec(Collective c, Algorithm a, int p, int64_t count, int root = 0,
                        int64_t segment = 0);

// Treats rank `rank`'s input and output as one memory (an in-place call) and checks that
// whenever two steps touch overlapping elements, one of them writing, the earlier one (in
// program order) finishes before the later one touches the memory. Strict: only the rank's
// own dependencies count. Causal: messages count too (a receive is done only after its send
// has read everything, and a receive writes only once its send has started), which is how
// the ring allgather may overwrite an input chunk it sent earlier. A copy whose source and
// destination become the same memory is a no-op for the executor and touches nothing (it
// still orders what depends on it). Returns "" or a description of the first bad pair.
std::string AliasedRace(const Schedule& s, int rank, bool causal);

// Runs the schedule sequentially (each rank in program order, a receive waiting for its
// message) on symbolic data: input element of rank q is "rq", a reduce writes "(a+b)" with
// the destination's value on the left. Returns each rank's output; an unwritten element is
// "". Empty result if the run cannot finish.
std::vector<std::vector<std::string>> SymbolicOutputs(const Schedule& s);

// "(((r0+r1)+(r2+r3))+r4)" for ranks lo..hi-1 mapped through rank_of (the canonical tree).
std::string CanonicalOrder(int lo, int hi, int root, int p);

// The expression with both operands of every "+" put in lexicographic order: two values
// are equal after this iff they differ only by swapped operands, which IEEE sum, product,
// min and max (and every integer op) compute to the same bits.
std::string UpToCommutation(const std::string& expr);

}  // namespace gyre::algo::testing
