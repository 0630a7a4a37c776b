#include "core/sim/mapping.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gyre::sim {
namespace {

// splitmix64: a fixed generator, so a seed means the same permutation everywhere.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A mapping names one device per rank in a few bytes each. A file with a line this long, or
// this large in all, is not a mapping (/dev/zero, a log, an endless pipe): it is refused as
// soon as a bound is passed, having held at most one line, so reading it cannot exhaust
// memory or go on forever.
constexpr size_t kMaxMappingLineBytes = 4096;
constexpr int64_t kMaxMappingFileBytes = int64_t{16} << 20;

// Appends the devices on one line of a mapping file (after '#' is a comment).
Status ParseMappingLine(const std::string& path, int line_no, std::string line, int n,
                        std::vector<int>* mapping) {
  const size_t hash = line.find('#');
  if (hash != std::string::npos) line.resize(hash);
  if (line.find_first_not_of(" \t\r\f\v") == std::string::npos) return Status::Ok();
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= n) {
      return InvalidArgumentError("mapping file '" + path + "' line " + std::to_string(line_no) +
                                  ": '" + Printable(word) + "' is not a device in [0, " +
                                  std::to_string(n) + ")");
    }
    if (static_cast<int>(mapping->size()) == n) {
      return InvalidArgumentError("mapping file '" + path + "' line " + std::to_string(line_no) +
                                  " lists more than the topology's " + std::to_string(n) +
                                  " devices: a mapping names one device per rank");
    }
    mapping->push_back(static_cast<int>(v));
  }
  return Status::Ok();
}

StatusOr<std::vector<int>> FromFile(const std::string& path, int n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("mapping file '" + path + "' cannot be read");
  std::vector<int> mapping;
  std::string line;
  int line_no = 0;
  int64_t bytes = 0;
  std::vector<char> chunk(64 << 10);
  for (bool more = true; more;) {
    // istream::read reports a failed read (a directory) as badbit rather than throwing.
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (in.bad()) return InvalidArgumentError("mapping file '" + path + "' cannot be read");
    more = !in.eof();
    const size_t got = static_cast<size_t>(in.gcount());
    bytes += static_cast<int64_t>(got);
    if (bytes > kMaxMappingFileBytes) {
      return InvalidArgumentError("mapping file '" + path + "' is larger than " +
                                  std::to_string(kMaxMappingFileBytes >> 20) +
                                  " MiB: not a mapping (one device number per rank, '#' "
                                  "comments)");
    }
    for (size_t i = 0; i < got; ++i) {
      if (chunk[i] == '\n') {
        GYRE_RETURN_IF_ERROR(ParseMappingLine(path, ++line_no, line, n, &mapping));
        line.clear();
        continue;
      }
      line.push_back(chunk[i]);
      if (line.size() > kMaxMappingLineBytes) {
        return InvalidArgumentError("mapping file '" + path + "' line " +
                                    std::to_string(line_no + 1) + " is longer than " +
                                    std::to_string(kMaxMappingLineBytes) +
                                    " bytes: not a mapping (one device number per rank, '#' "
                                    "comments)");
      }
    }
  }
  if (!line.empty()) GYRE_RETURN_IF_ERROR(ParseMappingLine(path, ++line_no, line, n, &mapping));
  if (static_cast<int>(mapping.size()) != n) {
    return InvalidArgumentError("mapping file '" + path + "' lists " +
                                std::to_string(mapping.size()) + " devices but the topology has " +
                                std::to_string(n));
  }
  std::vector<int> rank_of(n, -1);
  for (int r = 0; r < n; ++r) {
    if (rank_of[mapping[r]] >= 0) {
      return InvalidArgumentError("mapping file '" + path + "' puts ranks " +
                                  std::to_string(rank_of[mapping[r]]) + " and " +
                                  std::to_string(r) + " on device " + std::to_string(mapping[r]));
    }
    rank_of[mapping[r]] = r;
  }
  return mapping;
}

}  // namespace

StatusOr<std::vector<int>> MakeMapping(const std::string& spec, const Topology& topology) {
  const int n = topology.num_devices();
  std::vector<int> mapping(n);
  for (int r = 0; r < n; ++r) mapping[r] = r;
  if (spec == "identity" || spec == "row_major") return mapping;
  if (spec == "snake") {
    int rows = 1;
    int cols = n;
    topology.Layout(&rows, &cols);
    for (int r = 0; r < n; ++r) {
      const int row = r / cols;
      const int c = r % cols;
      mapping[r] = row * cols + (row % 2 == 0 ? c : cols - 1 - c);
    }
    return mapping;
  }
  if (spec == "random" || spec.rfind("random:", 0) == 0) {
    uint64_t seed = 1;
    if (spec.size() > 7) {
      char* end = nullptr;
      seed = std::strtoull(spec.c_str() + 7, &end, 10);
      if (*end != '\0') return InvalidArgumentError("mapping '" + spec + "': bad seed");
    }
    uint64_t state = seed;
    for (int i = n - 1; i > 0; --i) {
      const int j = static_cast<int>(NextRandom(&state) % static_cast<uint64_t>(i + 1));
      std::swap(mapping[i], mapping[j]);
    }
    return mapping;
  }
  if (spec.rfind("file:", 0) == 0) return FromFile(spec.substr(5), n);
  return InvalidArgumentError("unknown mapping '" + spec +
                              "' (known: identity, snake, random[:SEED], file:PATH)");
}

HopStats PairHops(const Topology& topology, const std::vector<int>& mapping,
                  const std::vector<std::pair<int, int>>& pairs) {
  HopStats h;
  int64_t total = 0;
  for (const auto& [from, to] : pairs) {
    const int hops = topology.Hops(mapping[from], mapping[to]);
    total += hops;
    h.max = std::max(h.max, hops);
  }
  h.pairs = static_cast<int64_t>(pairs.size());
  h.mean = pairs.empty() ? 0 : static_cast<double>(total) / static_cast<double>(pairs.size());
  return h;
}

HopStats RingHops(const Topology& topology, const std::vector<int>& mapping) {
  const int p = static_cast<int>(mapping.size());
  std::vector<std::pair<int, int>> pairs;
  if (p > 1) {
    for (int r = 0; r < p; ++r) pairs.emplace_back(r, (r + 1) % p);
  }
  return PairHops(topology, mapping, pairs);
}

}  // namespace gyre::sim
