// The early-message buffer pool on its own: which buffer Take hands out, what Give keeps, and
// that idle memory stays under the cap.
#include "core/transport/tcp/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace gyre {
namespace {

constexpr size_t kMin = BufferPool::kMinPooledBytes;

TEST(BufferPoolTest, AGivenBufferIsHandedOutAgain) {
  BufferPool pool(size_t{8} << 20);
  PooledBuffer a = pool.Take(kMin * 4);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.capacity, kMin * 4);
  std::memset(a.data.get(), 0x5A, a.capacity);  // the whole capacity is writable
  const uint8_t* first = a.data.get();
  pool.Give(std::move(a));
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, kMin * 4);

  PooledBuffer b = pool.Take(kMin * 3);  // smaller than the pooled one: it fits
  EXPECT_EQ(b.data.get(), first);
  EXPECT_EQ(b.capacity, kMin * 4);
  EXPECT_EQ(pool.stats().allocated, 1u);
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, 0u);

  PooledBuffer c = pool.Take(kMin * 5);  // nothing pooled fits: a new one
  EXPECT_NE(c.data.get(), first);
  EXPECT_EQ(c.capacity, kMin * 5);
  EXPECT_EQ(pool.stats().allocated, 2u);
}

TEST(BufferPoolTest, TheSmallestBufferThatFitsIsTaken) {
  BufferPool pool(size_t{64} << 20);
  PooledBuffer small = pool.Take(kMin * 2);
  PooledBuffer mid = pool.Take(kMin * 8);
  PooledBuffer big = pool.Take(kMin * 10);
  const uint8_t* mid_data = mid.data.get();
  const uint8_t* big_data = big.data.get();
  pool.Give(std::move(big));
  pool.Give(std::move(small));
  pool.Give(std::move(mid));
  PooledBuffer got = pool.Take(kMin * 5);
  EXPECT_EQ(got.data.get(), mid_data);
  PooledBuffer next = pool.Take(kMin * 5);
  EXPECT_EQ(next.data.get(), big_data);
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);  // the small one, too small for either
}

TEST(BufferPoolTest, ABufferOverTwiceTheSizeIsLeftForALargerMessage) {
  BufferPool pool(size_t{64} << 20);
  PooledBuffer big = pool.Take(kMin * 12);
  const uint8_t* big_data = big.data.get();
  pool.Give(std::move(big));
  PooledBuffer small = pool.Take(kMin * 5);  // 12 > 2 x 5: a buffer of its own
  EXPECT_NE(small.data.get(), big_data);
  EXPECT_EQ(small.capacity, kMin * 5);
  EXPECT_EQ(pool.Take(kMin * 6).data.get(), big_data);  // 12 = 2 x 6: fits
  EXPECT_EQ(pool.stats().allocated, 2u);
  EXPECT_EQ(pool.stats().reused, 1u);
}

TEST(BufferPoolTest, SmallBuffersAreLeftToMalloc) {
  BufferPool pool(size_t{8} << 20);
  PooledBuffer a = pool.Take(kMin - 1);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.capacity, kMin - 1);
  pool.Give(std::move(a));
  EXPECT_EQ(pool.stats().pooled_buffers, 0u);
  PooledBuffer zero = pool.Take(0);  // a zero-byte message still gets a valid pointer
  EXPECT_NE(zero.data, nullptr);
  EXPECT_EQ(zero.capacity, 1u);
  // A small request never takes a large pooled buffer.
  PooledBuffer large = pool.Take(kMin);
  pool.Give(std::move(large));
  PooledBuffer tiny = pool.Take(100);
  EXPECT_EQ(tiny.capacity, 100u);
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);
  EXPECT_EQ(pool.stats().allocated, 1u);
}

TEST(BufferPoolTest, IdleBytesStayUnderTheCapAndTheLargestAreKept) {
  const size_t cap = kMin * 10;
  BufferPool pool(cap);
  PooledBuffer a = pool.Take(kMin * 3);
  PooledBuffer b = pool.Take(kMin * 4);
  PooledBuffer c = pool.Take(kMin * 5);
  const uint8_t* b_data = b.data.get();
  const uint8_t* c_data = c.data.get();
  pool.Give(std::move(a));
  pool.Give(std::move(b));
  EXPECT_EQ(pool.stats().pooled_bytes, kMin * 7);
  pool.Give(std::move(c));  // 12 > 10: the smallest (3) goes
  EXPECT_EQ(pool.stats().pooled_bytes, kMin * 9);
  EXPECT_EQ(pool.stats().pooled_buffers, 2u);
  EXPECT_EQ(pool.Take(kMin * 4).data.get(), b_data);
  EXPECT_EQ(pool.Take(kMin * 5).data.get(), c_data);

  PooledBuffer huge = pool.Take(cap + 1);
  pool.Give(std::move(huge));  // larger than the cap: freed
  EXPECT_EQ(pool.stats().pooled_bytes, 0u);
}

TEST(BufferPoolTest, LargeBuffersAreWholeHugePagesAndServeUpToTheirLength) {
  BufferPool pool(size_t{64} << 20);
  PooledBuffer a = pool.Take(kHugePageBytes + kHugePageBytes / 2);  // 3 MiB
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.capacity, 2 * kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data.get()) % kHugePageBytes, 0u);
  std::memset(a.data.get(), 0x3C, a.capacity);
  const uint8_t* first = a.data.get();
  pool.Give(std::move(a));
  // 4 MiB: more than was asked for first, within the mapping's length.
  PooledBuffer b = pool.Take(2 * kHugePageBytes);
  EXPECT_EQ(b.data.get(), first);
  EXPECT_EQ(pool.stats().allocated, 1u);
  EXPECT_EQ(pool.stats().reused, 1u);
}

TEST(BufferPoolTest, AZeroCapKeepsNothing) {
  BufferPool pool(0);
  PooledBuffer a = pool.Take(kMin * 2);
  pool.Give(std::move(a));
  EXPECT_EQ(pool.stats().pooled_buffers, 0u);
  pool.Take(kMin * 2);
  EXPECT_EQ(pool.stats().allocated, 2u);
  EXPECT_EQ(pool.stats().reused, 0u);
}

}  // namespace
}  // namespace gyre
