// Self-check data: deterministic per-rank inputs whose reductions are exact in every dtype,
// the sequential reference result of any collective, and a first-difference report. The
// daemon's self-test and main job use it, and so do the world tests.
#pragma once

#include <string>
#include <vector>

#include "core/algo/collective.h"

namespace gyre {

// Rank r's input for `spec`: integers small enough that every reduction is exact in the
// dtype (so any reduction order gives the same bits).
std::vector<unsigned char> MakeInput(const algo::CollectiveSpec& spec, int rank);

// The expected output of `rank`, computed sequentially from all ranks' inputs (reductions
// fold ranks 0, 1, ..., p-1 in order; avg divides once at the end).
std::vector<unsigned char> Reference(const algo::CollectiveSpec& spec,
                                     const std::vector<std::vector<unsigned char>>& inputs,
                                     int rank);

// -1 when equal, else the index of the first differing element (or 0 on a size mismatch).
int64_t FirstDifferentElement(const algo::CollectiveSpec& spec,
                              const std::vector<unsigned char>& got,
                              const std::vector<unsigned char>& want);

// "" when equal, else the first differing element described.
std::string FirstDifference(const algo::CollectiveSpec& spec, const std::vector<unsigned char>& got,
                            const std::vector<unsigned char>& want);

}  // namespace gyre
