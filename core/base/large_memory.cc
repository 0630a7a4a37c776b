#include "core/base/large_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

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

}  // namespace gyre
