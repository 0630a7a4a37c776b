#include "core/base/large_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <new>
#include <string>

namespace gyre {

void LargeFree::operator()(uint8_t* p) const {
  if (p == nullptr) return;
  if (mapped > 0) {
    ::munmap(p, mapped);
  } else {
    delete[] p;
  }
}

LargeBytes AllocateLarge(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes < kMappedFromBytes) {
    return LargeBytes(new (std::nothrow) uint8_t[bytes], LargeFree{});
  }
  // Whole huge pages, at a 2 MiB boundary: map one huge page more, then unmap the unaligned
  // head and the tail beyond it.
  const size_t length = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t span = length + kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return LargeBytes(nullptr, LargeFree{});
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + length)
    ::munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  uint8_t* p = reinterpret_cast<uint8_t*>(aligned);
  // Advice only: without transparent huge pages the mapping works in small pages.
  ::madvise(p, length, MADV_HUGEPAGE);
  return LargeBytes(p, LargeFree{length});
}

std::optional<uint64_t> AvailableMemory() {
  std::optional<uint64_t> best;
  auto take = [&](uint64_t v) { best = best ? std::min(*best, v) : v; };
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    uint64_t kib = 0;
    if (key == "MemAvailable:" && meminfo >> kib) {
      take(kib * 1024);
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    std::ifstream max_file(dir + "/memory.max"), current_file(dir + "/memory.current");
    uint64_t max = 0, current = 0;
    if (!(max_file >> max && current_file >> current)) continue;  // "max": no limit
    uint64_t file = 0, shmem = 0;
    std::ifstream stat(dir + "/memory.stat");
    for (std::string key; stat >> key;) {
      uint64_t v = 0;
      if (!(stat >> v)) break;
      if (key == "file") file = v;
      if (key == "shmem") shmem = v;
    }
    const uint64_t reclaimable = file > shmem ? file - shmem : 0;
    const uint64_t held = current > reclaimable ? current - reclaimable : 0;
    take(max > held ? max - held : 0);
  }
  return best;
}

Status CheckAvailableMemory(uint64_t bytes, const std::string& what) {
  const std::optional<uint64_t> available = AvailableMemory();
  if (!available || bytes <= *available) return Status::Ok();
  return ResourceExhaustedError(
      what + ": " + std::to_string(bytes) + " bytes is more than the " +
      std::to_string(*available) +
      " bytes available on this host (MemAvailable, or the memory cgroup's limit less what it "
      "holds and cannot reclaim)");
}

}  // namespace gyre
