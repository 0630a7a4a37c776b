#include "tests/world/world_factories.h"

#include <atomic>

#include "tests/tcp/tcp_world.h"

namespace gyre::testing {

std::vector<std::string> TransportNames() { return {"loopback", "tcp"}; }

TransportFactory FactoryByName(const std::string& name) {
  if (name == "tcp") {
    return [](int n) -> StatusOr<std::vector<std::unique_ptr<Transport>>> {
      static std::atomic<int> job{0};
      return MakeTcpWorld(n, "world-test-" + std::to_string(job++));
    };
  }
  return LoopbackFactory();
}

}  // namespace gyre::testing
