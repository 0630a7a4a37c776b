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
#include "core/comm/selfcheck.h"
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

}  // namespace gyre::testing
