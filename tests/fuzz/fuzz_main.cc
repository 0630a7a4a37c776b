// One libFuzzer target; GYRE_FUZZ_FUNCTION names which (see CMakeLists.txt).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gyre::fuzz::GYRE_FUZZ_FUNCTION(data, size);
  return 0;
}
