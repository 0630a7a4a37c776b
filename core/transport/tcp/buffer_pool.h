// Payload buffers for messages that arrive before their receive is posted, kept for reuse.
//
// Such early messages are the rule, not the exception: a rank still in the timing barrier or
// in the previous step reads the next step's data as it comes, so a large collective lands
// one early message per peer and step. A fresh buffer for each is a fresh mapping (glibc
// maps allocations of this size, or gives them back when the heap's top shrinks), and the
// first write to every page of it faults: at 8 ranks on 2 cores a 4 MiB ring allreduce took
// 110 page faults per rank and iteration, all of them in the receive that filled an early
// buffer, and unmapping costs every CPU that ran the process a TLB flush. The pool keeps
// the buffers of consumed messages, up to a byte cap, and hands out the smallest one that
// fits. Not thread-safe: the transport calls it holding its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/base/large_memory.h"

namespace gyre {

// From kMappedFromBytes (1 MiB) up the memory is a huge-page mapping (core/base/large_memory.h)
// and the capacity its whole length: the first use of a fresh buffer is where a pool cannot help.
struct PooledBuffer {
  LargeBytes data;
  size_t capacity = 0;
};

struct BufferPoolStats {
  uint64_t allocated = 0;  // buffers of at least kMinPooledBytes that Take allocated
  uint64_t reused = 0;     // buffers Take found in the pool
  size_t pooled_bytes = 0;
  size_t pooled_buffers = 0;
};

class BufferPool {
 public:
  // Smaller buffers are left to malloc, which serves them from its bins without faults.
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;

  // Keeps at most `max_bytes` of idle buffers (0: keeps none).
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  // A buffer of at least `bytes` (at least 1): from kMinPooledBytes up, the smallest pooled
  // one that fits; else a new one (exactly that size below kMappedFromBytes). Null data if the
  // system refuses the memory.
  PooledBuffer Take(size_t bytes);
  // Takes `buffer` back for reuse. Over the cap, the smallest idle buffers are freed first,
  // since a large buffer saves the most faults; one larger than the cap is freed at once.
  void Give(PooledBuffer buffer);

  BufferPoolStats stats() const;

 private:
  size_t max_bytes_;
  std::vector<PooledBuffer> idle_;  // by capacity, smallest first
  size_t idle_bytes_ = 0;
  uint64_t allocated_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace gyre
