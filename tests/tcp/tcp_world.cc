#include "tests/tcp/tcp_world.h"

#include <utility>

namespace gyre {

StatusOr<std::vector<std::unique_ptr<TcpTransport>>> MakeTcpTransports(
    int n, const TcpTransportOptions& base) {
  if (n < 1)
    return InvalidArgumentError("a TCP world needs at least one rank, got " + std::to_string(n));
  std::vector<std::unique_ptr<TcpTransport>> world;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    TcpTransportOptions options = base;
    options.rank = r;
    options.world_size = n;
    options.listen_port = 0;
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> t, TcpTransport::Create(options));
    addresses.push_back(t->address());
    world.push_back(std::move(t));
  }
  for (const std::unique_ptr<TcpTransport>& t : world) {
    GYRE_RETURN_IF_ERROR(t->SetPeers(addresses));
  }
  return world;
}

StatusOr<std::vector<std::unique_ptr<Transport>>> MakeTcpWorld(int n, const std::string& job_id) {
  TcpTransportOptions options;
  options.job_id = job_id;
  options.connect_timeout = Seconds(10);
  // Worlds authenticate like real jobs do.
  GYRE_ASSIGN_OR_RETURN(options.secret, auth::Secret::Generate());
  GYRE_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<TcpTransport>> tcp,
                        MakeTcpTransports(n, options));
  std::vector<std::unique_ptr<Transport>> world;
  for (std::unique_ptr<TcpTransport>& t : tcp) world.push_back(std::move(t));
  return world;
}

}  // namespace gyre
