#include "tests/world/world.h"

#include <cstring>
#include <sstream>
#include <thread>

#include "core/transport/loopback.h"

namespace gyre::testing {

using algo::Collective;
using algo::CollectiveSpec;

TransportFactory LoopbackFactory() {
  return [](int n) -> StatusOr<std::vector<std::unique_ptr<Transport>>> {
    return LoopbackHub::CreateWorld(n);
  };
}

std::vector<Status> RunOnRanks(int world_size, const std::function<Status(int)>& body) {
  std::vector<Status> results(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { results[r] = body(r); });
  }
  for (auto& t : threads) t.join();
  return results;
}

StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeWorld(const TransportFactory& factory,
                                                               int world_size,
                                                               const CommOptions& options) {
  GYRE_ASSIGN_OR_RETURN(auto transports, factory(world_size));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) comms.push_back(std::make_unique<Communicator>(std::move(t), options));
  return comms;
}

}  // namespace gyre::testing
