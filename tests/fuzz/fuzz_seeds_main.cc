// gyre-fuzz-seeds DIR: writes every target's seeds to DIR/<target>/seed-<n>, the starting
// corpus for libFuzzer (tests/fuzz/corpus holds the committed copy).
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/fuzz/fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gyre-fuzz-seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  ::mkdir(dir.c_str(), 0755);
  for (const gyre::fuzz::Target& target : gyre::fuzz::Targets()) {
    const std::string sub = dir + "/" + target.name;
    ::mkdir(sub.c_str(), 0755);
    int n = 0;
    for (const std::string& seed : target.seeds()) {
      std::ofstream(sub + "/seed-" + std::to_string(n++), std::ios::binary) << seed;
    }
  }
  return 0;
}
