// N connected TcpTransports inside one process on 127.0.0.1 (port 0), so collective tests can
// run the same bodies over real sockets that they run over the loopback transport.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/transport/tcp/tcp_transport.h"
#include "core/transport/transport.h"

namespace gyre {

// Rank i of the result is element i. Each rank connects to the higher ranks at SetPeers
// (one connection per pair, both ways; see TcpTransportOptions::one_connection_per_pair).
StatusOr<std::vector<std::unique_ptr<Transport>>> MakeTcpWorld(int n, const std::string& job_id);

// Like MakeTcpWorld, with `base` for every option except rank and world_size.
StatusOr<std::vector<std::unique_ptr<TcpTransport>>> MakeTcpTransports(
    int n, const TcpTransportOptions& base);

}  // namespace gyre
