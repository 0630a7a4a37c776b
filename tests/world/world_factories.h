// The transports the world tests run over, by name: "loopback" always, "tcp" where the TCP
// transport is built.
#pragma once

#include <string>
#include <vector>

#include "tests/world/world.h"

namespace gyre::testing {

std::vector<std::string> TransportNames();
TransportFactory FactoryByName(const std::string& name);

}  // namespace gyre::testing
