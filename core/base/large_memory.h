// Memory for large working buffers: early-message payloads and executor scratch.
//
// From kMappedFromBytes up, a buffer is its own mapping of whole 2 MiB pages, aligned to 2 MiB
// and marked MADV_HUGEPAGE (so at most twice the size asked for). Where transparent huge pages
// are enabled ("always", or "madvise" as on Debian) the kernel backs it with 2 MiB pages;
// where they are off it is an ordinary mapping. A fresh 4 KiB page costs a fault on its first
// write, and on a virtual machine whose hypervisor shadows the page tables it costs again on
// the first access from user space after the kernel filled it (a recv into a fresh buffer,
// then a copy out of it). Measured on 1 vCPU of a PVM guest, 8 MiB filled by recv and then
// copied out: the copy took 9.5-10.4 ms in fresh 4 KiB pages, 0.4-0.5 ms in fresh huge pages
// and 0.3 ms once warm (docs/memory.md). Smaller buffers come from the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace gyre {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kMappedFromBytes = kHugePageBytes / 2;

// Frees what AllocateLarge returned: unmaps `mapped` bytes, or deletes a heap block.
struct LargeFree {
  size_t mapped = 0;
  void operator()(uint8_t* p) const;
};
using LargeBytes = std::unique_ptr<uint8_t[], LargeFree>;

// `bytes` (at least 1) of uninitialised memory, aligned as operator new[] aligns below
// kMappedFromBytes and to kHugePageBytes from there; null if the system refuses.
LargeBytes AllocateLarge(size_t bytes);

// The bytes of memory this process could still get: MemAvailable, and under a cgroup v2
// memory limit, that limit less what the cgroup uses and cannot give back (its use less its
// page cache, which the kernel reclaims, but not less its shared memory, which it cannot
// without swap); nullopt when neither can be read. A buffer larger than this, once written,
// ends in the OOM killer rather than in an error.
std::optional<uint64_t> AvailableMemory();

// ResourceExhausted "<what>: B bytes is more than the N bytes available on this host (...)"
// when `bytes` is more than AvailableMemory(); OK when it fits or nothing can be read.
Status CheckAvailableMemory(uint64_t bytes, const std::string& what);

}  // namespace gyre
