#include "tests/world/world_factories.h"

namespace gyre::testing {

std::vector<std::string> TransportNames() { return {"loopback"}; }

TransportFactory FactoryByName(const std::string& name) { return LoopbackFactory(); }

}  // namespace gyre::testing
