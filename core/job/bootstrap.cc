#include "core/job/bootstrap.h"

#include <unistd.h>

#include "core/transport/tcp/tcp_transport.h"

namespace gyre::job {

StatusOr<Joined> JoinJob(const JoinOptions& o) {
  const Identity& id = o.identity;
  const std::string who = "rank " + std::to_string(id.rank) + " of job " + id.job_id;
  if (id.store_url.empty()) {
    return InvalidArgumentError(who +
                                ": no store given (--store file:///dir or tcp://host:port, "
                                "or GYRE_STORE, or MASTER_ADDR/MASTER_PORT)");
  }
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), o.rendezvous_timeout);
  Joined joined;
  auto store = store::OpenStore(id.store_url, deadline);
  if (!store.ok()) return store.status().WithContext(who + ": cannot open store " + id.store_url);
  joined.store = std::move(*store);

  TcpTransportOptions topts;
  topts.rank = id.rank;
  topts.world_size = id.world_size;
  topts.job_id = id.job_id;
  topts.listen_host = o.listen_host;
  topts.listen_port = o.listen_port;
  topts.connect_timeout = std::max<Duration>(o.comm.timeout, Seconds(5));
  auto transport = TcpTransport::Create(topts);
  if (!transport.ok()) return transport.status().WithContext(who);
  joined.address = (*transport)->address();

  store::PeerRecord me;
  me.rank = id.rank;
  me.world_size = id.world_size;
  me.address = joined.address;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  me.host = host;
  me.pid = getpid();
  auto peers = store::Rendezvous(joined.store.get(), id.job_id, me, deadline);
  if (!peers.ok()) return peers.status();
  joined.peers = *peers;
  std::vector<std::string> addresses;
  for (const auto& p : joined.peers) addresses.push_back(p.address);
  GYRE_RETURN_IF_ERROR((*transport)->SetPeers(addresses).WithContext(who));
  joined.comm = std::make_unique<Communicator>(std::move(*transport), o.comm);
  return joined;
}

}  // namespace gyre::job
