// The fuzz targets as a deterministic, time-bounded test in every build: each target runs
// its seeds, every file of its committed corpus (which holds the regression inputs of any
// crash ever found), then mutations of those and plain random inputs from a fixed seed, so
// a failure reproduces exactly.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.h"

namespace gyre::fuzz {
namespace {

constexpr auto kBudget = std::chrono::seconds(4);
constexpr int kMaxInputs = 30000;

std::vector<std::string> CorpusFiles(const std::string& target) {
  std::vector<std::string> inputs;
  const std::string dir = std::string(GYRE_FUZZ_CORPUS_DIR) + "/" + target;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return inputs;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    inputs.push_back(s.str());
  }
  closedir(d);
  return inputs;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string Mutate(std::string in, const std::vector<std::string>& pool) {
    const int steps = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < steps; ++i) in = Step(std::move(in), pool);
    return in;
  }

  std::string Random() {
    std::string out(rng_() % 300, '\0');
    for (char& c : out) c = static_cast<char>(rng_());
    return out;
  }

 private:
  size_t Pos(const std::string& s) { return s.empty() ? 0 : rng_() % s.size(); }

  std::string Step(std::string s, const std::vector<std::string>& pool) {
    switch (rng_() % 8) {
      case 0:  // flip a bit
        if (!s.empty()) s[Pos(s)] ^= static_cast<char>(1 << (rng_() % 8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[Pos(s)] = static_cast<char>(rng_());
        break;
      case 2: {  // an interesting value: lengths at and around the caps
        static const uint32_t kValues[] = {
            0,      1,        0x7f,           0x80,     0xff,        0x400,       0x401,
            0xffff, 1u << 20, (1u << 20) + 1, 1u << 31, 0x7fffffffu, 0xfffffffeu, 0xffffffffu};
        uint32_t v = kValues[rng_() % (sizeof(kValues) / sizeof(kValues[0]))];
        size_t at = Pos(s);
        for (int b = 0; b < 4 && at + b < s.size(); ++b)
          s[at + b] = static_cast<char>(v >> (8 * b));
        break;
      }
      case 3: {  // insert random bytes
        std::string extra(1 + rng_() % 16, '\0');
        for (char& c : extra) c = static_cast<char>(rng_());
        s.insert(Pos(s), extra);
        break;
      }
      case 4:  // delete a range
        if (!s.empty()) {
          size_t at = Pos(s);
          s.erase(at, 1 + rng_() % std::min<size_t>(16, s.size() - at));
        }
        break;
      case 5:  // truncate
        s.resize(s.empty() ? 0 : rng_() % s.size());
        break;
      case 6:  // duplicate a chunk
        if (!s.empty()) {
          size_t at = Pos(s);
          s.insert(Pos(s), s.substr(at, 1 + rng_() % 32));
        }
        break;
      default:  // splice with another input
        if (!pool.empty()) {
          const std::string& other = pool[rng_() % pool.size()];
          s = s.substr(0, Pos(s)) + other.substr(other.empty() ? 0 : rng_() % other.size());
        }
        break;
    }
    return s;
  }

  std::mt19937_64 rng_;
};

class DeterministicFuzzTest : public ::testing::TestWithParam<Target> {};

TEST_P(DeterministicFuzzTest, SeedsCorpusAndMutationsKeepEveryInvariant) {
  const Target& target = GetParam();
  std::vector<std::string> pool = target.seeds();
  ASSERT_FALSE(pool.empty());
  for (std::string& input : CorpusFiles(target.name)) pool.push_back(std::move(input));
  for (const std::string& input : pool) {
    target.run(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  Mutator mutator(0x9e3779b97f4a7c15ULL ^ std::hash<std::string>()(target.name));
  const auto start = std::chrono::steady_clock::now();
  int ran = 0;
  while (ran < kMaxInputs && std::chrono::steady_clock::now() - start < kBudget) {
    std::string input =
        ran % 10 == 9 ? mutator.Random() : mutator.Mutate(pool[ran % pool.size()], pool);
    target.run(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ++ran;
  }
  RecordProperty("inputs", ran);
  EXPECT_GT(ran, 100) << "the target is too slow to be fuzzed meaningfully";
}

INSTANTIATE_TEST_SUITE_P(Targets, DeterministicFuzzTest, ::testing::ValuesIn(Targets()),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace gyre::fuzz
