// World test support: p communicators in one process, one thread per rank, over any
// transport factory (loopback, TCP on 127.0.0.1, faulty wrappers), plus the sequential
// reference results every collective is checked against.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/algo/collective.h"
#include "core/comm/communicator.h"
#include "core/transport/transport.h"

namespace gyre::testing {

using TransportFactory =
    std::function<StatusOr<std::vector<std::unique_ptr<Transport>>>(int world_size)>;

TransportFactory LoopbackFactory();

// Wraps `comms` so body(rank) runs on one thread per rank; returns each rank's Status.
// Threads are joined before returning.
std::vector<Status> RunOnRanks(int world_size, const std::function<Status(int rank)>& body);

StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeWorld(const TransportFactory& factory,
                                                               int world_size,
                                                               const CommOptions& options = {});

// Deterministic test input of rank r for `spec`: integer values small enough that every
// reduction is exact in the dtype (so all orders give the same bits).
std::vector<unsigned char> MakeInput(const algo::CollectiveSpec& spec, int rank);

// The expected output of `rank`, computed sequentially from all ranks' inputs (reductions
// fold ranks 0, 1, ..., p-1 in order; avg divides once at the end).
std::vector<unsigned char> Reference(const algo::CollectiveSpec& spec,
                                     const std::vector<std::vector<unsigned char>>& inputs,
                                     int rank);

// "" when equal, else the first differing element described.
std::string FirstDifference(const algo::CollectiveSpec& spec, const std::vector<unsigned char>& got,
                            const std::vector<unsigned char>& want);

}  // namespace gyre::testing
