// Peak memory of a large allreduce with real ranks (docs/memory.md). gyre-bench
// --report_memory resets each process's peak RSS (VmHWM) after filling its buffer and prints,
// per rank, how far the peak rose during the calls; these tests hold that rise to the
// scratch the schedules are documented to use, plus an allowance for messages that arrive
// before their receive is posted and for the allocator.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

constexpr double kBufferMiB = 256;
// Messages that arrive before their receive is posted (the ranks do not start at the same
// instant), heap and page tables: well below the buffer-sized terms the bounds tell apart.
constexpr double kAllowanceMiB = 64;

struct Growth {
  double self_mib = -1;
  double gyred_mib = -1;
};

// rank -> growth, from the "# memory rank=R ... growth_MiB=G [... gyred_growth_MiB=D]" lines.
std::map<int, Growth> ParseMemory(const std::string& out) {
  std::map<int, Growth> by_rank;
  const std::regex self(R"(# memory rank=(\d+) .* growth_MiB=(-?[0-9.]+))");
  const std::regex gyred(R"(gyred_growth_MiB=(-?[0-9.]+))");
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m, d;
    if (!std::regex_search(line, m, self)) continue;
    Growth g;
    g.self_mib = std::stod(m[2].str());
    if (std::regex_search(line, d, gyred)) g.gyred_mib = std::stod(d[1].str());
    by_rank[std::stoi(m[1].str())] = g;
  }
  return by_rank;
}

CommandResult RunBench(const std::vector<std::string>& gyrerun_flags,
                       const std::vector<std::string>& bench_flags = {}) {
  std::vector<std::string> argv = {BinDir() + "/gyrerun", "-n", "2"};
  argv.insert(argv.end(), gyrerun_flags.begin(), gyrerun_flags.end());
  argv.push_back("--");
  argv.push_back(BinDir() + "/gyre-bench");
  for (const char* a : {"--op=allreduce", "--sizes=256M", "--inplace", "-n=1", "-w=1",
                        "--algo=auto", "--report_memory"}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), bench_flags.begin(), bench_flags.end());
  return RunCommand(argv, {}, 60);
}

// Embedded, auto picks ring at this size: one landing slot of half the buffer at p = 2.
// Before scratch was mapped lazily and sized by the slots actually used, two slots were
// zero-filled (the whole buffer again).
TEST(MemoryTest, EmbeddedInPlaceAllreduceHoldsHalfTheBuffer) {
  CommandResult r = RunBench({"--mode", "embedded"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::map<int, Growth> growth = ParseMemory(r.out);
  ASSERT_EQ(growth.size(), 2u) << r.out;
  for (const auto& [rank, g] : growth) {
    EXPECT_GE(g.self_mib, 0) << "rank " << rank << "\n" << r.out;
    EXPECT_LE(g.self_mib, kBufferMiB / 2 + kAllowanceMiB) << "rank " << rank << "\n" << r.out;
  }
}

// Through the daemon with 4 MiB segments: the program and its gyred share the payload mapping
// (the buffer from AllocBuffer, resident in both; the bounds below also held for a staged
// heap buffer, 2 x buffer); gyred's scratch is two segments, and
// what arrives before its receive is posted (through the daemon the ranks start a call up to
// the copy of the buffer apart) stays under one chunk, half the buffer. Before the slot pool
// and the lazily mapped scratch, gyred grew by 3 x buffer: two zero-filled chunk slots.
TEST(MemoryTest, DaemonSegmentedAllreduceScratchIsSegmentSized) {
  CommandResult r = RunBench({"--mode", "daemon", "--segment_bytes", "4194304"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::map<int, Growth> growth = ParseMemory(r.out);
  ASSERT_EQ(growth.size(), 2u) << r.out;
  for (const auto& [rank, g] : growth) {
    ASSERT_GE(g.gyred_mib, 0) << "rank " << rank << " printed no gyred line\n" << r.out;
    EXPECT_LE(g.self_mib, 2 * kBufferMiB + kAllowanceMiB) << "rank " << rank << "\n" << r.out;
    EXPECT_LE(g.gyred_mib, 2.5 * kBufferMiB + kAllowanceMiB) << "rank " << rank << "\n" << r.out;
  }
}

// Through the daemon with the buffer from AllocBuffer (gyre-bench's default) the program's
// tensor is the shared mapping itself: the program grows by nothing during the call, where a
// heap buffer (--alloc_buffers=false) costs it a staging copy of the whole buffer.
TEST(MemoryTest, DaemonCallOnAnAllocatedBufferHoldsTheTensorOnce) {
  CommandResult shared = RunBench({"--mode", "daemon"});
  ASSERT_EQ(shared.exit_code, 0) << shared.out << shared.err;
  CommandResult heap = RunBench({"--mode", "daemon"}, {"--alloc_buffers=false"});
  ASSERT_EQ(heap.exit_code, 0) << heap.out << heap.err;
  const std::map<int, Growth> in_place = ParseMemory(shared.out);
  const std::map<int, Growth> staged = ParseMemory(heap.out);
  ASSERT_EQ(in_place.size(), 2u) << shared.out;
  ASSERT_EQ(staged.size(), 2u) << heap.out;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_LE(in_place.at(rank).self_mib, kAllowanceMiB) << "rank " << rank << "\n" << shared.out;
    EXPECT_GE(staged.at(rank).self_mib, kBufferMiB - kAllowanceMiB) << "rank " << rank << "\n"
                                                                    << heap.out;
  }
}

}  // namespace
}  // namespace gyre::testing
