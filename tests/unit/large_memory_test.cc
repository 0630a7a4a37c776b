// AllocateLarge: which buffers become huge-page mappings, their alignment and length, the
// advice the kernel was given, and that freeing unmaps them.
#include "core/base/large_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace gyre {
namespace {

// The VmFlags line of the mapping that starts at `p` in /proc/self/smaps; empty if no
// mapping starts there.
std::string VmFlagsOfMappingAt(const void* p) {
  char start[32];
  std::snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(p));  // NOLINT
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_it = false;
  while (std::getline(smaps, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos && first.back() != ':') {
      in_it = line.rfind(start, 0) == 0;  // a mapping's first line: "start-end perms ..."
    } else if (in_it && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool MappingStartsAt(const void* p) {
  char start[32];
  std::snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(p));  // NOLINT
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.rfind(start, 0) == 0) return true;
  }
  return false;
}

bool TransparentHugePagesBuiltIn() {
  return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
}

TEST(LargeMemoryTest, SmallBuffersComeFromTheHeap) {
  LargeBytes b = AllocateLarge(kMappedFromBytes - 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b.get_deleter().mapped, 0u);
  std::memset(b.get(), 0x11, kMappedFromBytes - 1);
  EXPECT_FALSE(MappingStartsAt(b.get()) &&
               reinterpret_cast<uintptr_t>(b.get()) % kHugePageBytes == 0)
      << "a heap block does not start a 2 MiB aligned mapping of its own";
  LargeBytes zero = AllocateLarge(0);  // asked for nothing: still a valid block
  EXPECT_NE(zero, nullptr);
}

TEST(LargeMemoryTest, LargeBuffersAreWholeAlignedHugePages) {
  for (size_t bytes : {kMappedFromBytes, kHugePageBytes, 3 * kHugePageBytes + 1}) {
    SCOPED_TRACE(bytes);
    LargeBytes b = AllocateLarge(bytes);
    ASSERT_NE(b, nullptr);
    const size_t mapped = b.get_deleter().mapped;
    EXPECT_EQ(mapped % kHugePageBytes, 0u);
    EXPECT_GE(mapped, bytes);
    EXPECT_LT(mapped, bytes + kHugePageBytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % kHugePageBytes, 0u);
    std::memset(b.get(), 0x22, mapped);  // the whole length is usable
    EXPECT_EQ(b[mapped - 1], 0x22);
    ASSERT_TRUE(MappingStartsAt(b.get()));
    if (TransparentHugePagesBuiltIn()) {
      // "hg": the mapping carries MADV_HUGEPAGE, whatever huge pages the kernel then finds.
      std::istringstream flags(VmFlagsOfMappingAt(b.get()));
      std::string flag;
      bool hg = false;
      while (flags >> flag) hg = hg || flag == "hg";
      EXPECT_TRUE(hg) << VmFlagsOfMappingAt(b.get());
    }
  }
}

TEST(LargeMemoryTest, FreeingUnmapsTheWholeLength) {
  LargeBytes b = AllocateLarge(5 * kHugePageBytes);
  ASSERT_NE(b, nullptr);
  const void* at = b.get();
  ASSERT_TRUE(MappingStartsAt(at));
  b.reset();
  EXPECT_FALSE(MappingStartsAt(at));
}

TEST(LargeMemoryTest, ARefusedMappingIsNullNotACrash) {
  // More than any address space holds: mmap refuses, and the caller gets null to report.
  LargeBytes b = AllocateLarge(size_t{1} << 62);
  EXPECT_EQ(b, nullptr);
}

}  // namespace
}  // namespace gyre
