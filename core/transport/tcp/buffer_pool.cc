#include "core/transport/tcp/buffer_pool.h"

#include <algorithm>

namespace gyre {

PooledBuffer BufferPool::Take(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes >= kMinPooledBytes) {
    auto fits =
        std::lower_bound(idle_.begin(), idle_.end(), bytes,
                         [](const PooledBuffer& b, size_t want) { return b.capacity < want; });
    // Not one more than twice the size: a small message that took a large buffer would leave
    // the next large one to a fresh allocation, whose first use is what the pool saves.
    if (fits != idle_.end() && fits->capacity / 2 <= bytes) {
      PooledBuffer out = std::move(*fits);
      idle_.erase(fits);
      idle_bytes_ -= out.capacity;
      ++reused_;
      return out;
    }
    ++allocated_;
  }
  PooledBuffer out;
  out.data = AllocateLarge(bytes);
  if (out.data == nullptr) return out;
  out.capacity = out.data.get_deleter().mapped > 0 ? out.data.get_deleter().mapped : bytes;
  return out;
}

void BufferPool::Give(PooledBuffer buffer) {
  if (!buffer.data || buffer.capacity < kMinPooledBytes || buffer.capacity > max_bytes_) return;
  auto at = std::upper_bound(idle_.begin(), idle_.end(), buffer.capacity,
                             [](size_t cap, const PooledBuffer& b) { return cap < b.capacity; });
  idle_bytes_ += buffer.capacity;
  idle_.insert(at, std::move(buffer));
  while (idle_bytes_ > max_bytes_) {
    idle_bytes_ -= idle_.front().capacity;
    idle_.erase(idle_.begin());
  }
}

BufferPoolStats BufferPool::stats() const {
  BufferPoolStats s;
  s.allocated = allocated_;
  s.reused = reused_;
  s.pooled_bytes = idle_bytes_;
  s.pooled_buffers = idle_.size();
  return s;
}

}  // namespace gyre
