// Fuzz targets for every parser that reads bytes from the network: the TCP transport's frame
// header, the store protocol (length prefix, request, the server's request rules), the
// handshake (both sides), and the daemon's client framing and request. Each takes any bytes
// and must neither crash nor break an invariant (which aborts). They run under libFuzzer
// (fuzz_main.cc, with ASan and UBSan) and, in every build, as a bounded deterministic test
// (fuzz_test.cc) over seeds and their mutations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gyre::fuzz {

void FuzzFrameHeader(const uint8_t* data, size_t size);
void FuzzStoreRequest(const uint8_t* data, size_t size);
void FuzzHandshake(const uint8_t* data, size_t size);
void FuzzClientRequest(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);
  // Well-formed inputs to start from (also written out as the seed corpus).
  std::vector<std::string> (*seeds)();
};

// Every target, by name: "frame", "store", "handshake", "client".
const std::vector<Target>& Targets();

}  // namespace gyre::fuzz
