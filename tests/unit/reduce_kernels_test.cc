// The floating reduction kernels on special values: an allreduce combines (own, peer) on one
// rank and (peer, own) on another, so op(a, b) and op(b, a) must have the same bits, for
// NaN of either sign and any payload, signed zeros, infinities and denormals. Each case runs
// at several lengths so that both the vectorised loop and its scalar tail see every pair.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/base/dtype.h"

namespace gyre {
namespace {

// 1 and 7: scalar only; 64: vector only; 67: vector and a tail of 3.
constexpr size_t kLengths[] = {1, 7, 64, 67};

struct FloatType {
  DataType dtype;
  std::vector<uint64_t> specials;  // bit patterns, each as wide as the dtype
  uint64_t canonical_nan;
};

std::vector<FloatType> FloatTypes() {
  return {
      {DataType::kFloat32,
       {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x3fc00000, 0x7f7fffff, 0xff7fffff,
        0x7f800000, 0xff800000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x7fc00000,
        0xffc00000, 0x7fc12345, 0xffd00001, 0x7f800001, 0xff800123},
       0x7fc00000},
      {DataType::kFloat64,
       {0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000, 0xbff0000000000000,
        0x7fefffffffffffff, 0x7ff0000000000000, 0xfff0000000000000, 0x0000000000000001,
        0x8000000000000001, 0x000fffffffffffff, 0x7ff8000000000000, 0xfff8000000000000,
        0x7ff8000000012345, 0xfffc000000000001, 0x7ff0000000000001, 0xfff0000000000123},
       0x7ff8000000000000},
      {DataType::kFloat16,
       {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7bff, 0x7c00, 0xfc00, 0x0001, 0x8001, 0x03ff, 0x7e00,
        0xfe00, 0x7e55, 0xff01, 0x7c01, 0xfc03},
       0x7e00},
      {DataType::kBfloat16,
       {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f7f, 0x7f80, 0xff80, 0x0001, 0x8001, 0x007f, 0x7fc0,
        0xffc0, 0x7fd5, 0xffe1, 0x7f81, 0xff83},
       0x7fc0},
  };
}

uint64_t BitsAt(DataType t, const std::vector<unsigned char>& buf, size_t i) {
  uint64_t v = 0;  // little-endian: the low bytes
  std::memcpy(&v, buf.data() + i * DataTypeSize(t), DataTypeSize(t));
  return v;
}

void SetBits(DataType t, std::vector<unsigned char>& buf, size_t i, uint64_t v) {
  std::memcpy(buf.data() + i * DataTypeSize(t), &v, DataTypeSize(t));
}

double ValueOf(DataType t, uint64_t bits) {
  std::vector<unsigned char> one(8);
  SetBits(t, one, 0, bits);
  return LoadAsDouble(t, one.data(), 0);
}

std::string Hex(uint64_t v) {
  char s[32];
  std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(v));
  return s;
}

// Every ordered pair of specials, run through `op` as (a, b) and as (b, a) in buffers of
// each length; `check(a, b, ab, ba)` sees the operands' bits and both results.
template <typename Check>
void ForEveryPair(const FloatType& ft, ReduceOp op, Check check) {
  const DataType t = ft.dtype;
  auto fn = GetReduceFn(t, op);
  ASSERT_TRUE(fn.ok()) << fn.status();
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (uint64_t a : ft.specials) {
    for (uint64_t b : ft.specials) pairs.emplace_back(a, b);
  }
  for (size_t len : kLengths) {
    // Shifting the start by one pair per round puts every pair in every lane of the vector.
    for (size_t start = 0; start < pairs.size(); start += (len > 1 ? len - 1 : 1)) {
      std::vector<unsigned char> a(len * DataTypeSize(t)), b(a.size());
      for (size_t i = 0; i < len; ++i) {
        const auto& p = pairs[(start + i) % pairs.size()];
        SetBits(t, a, i, p.first);
        SetBits(t, b, i, p.second);
      }
      std::vector<unsigned char> ab = a, ba = b;
      (*fn)(ab.data(), b.data(), len);
      (*fn)(ba.data(), a.data(), len);
      for (size_t i = 0; i < len; ++i) {
        check(BitsAt(t, a, i), BitsAt(t, b, i), BitsAt(t, ab, i), BitsAt(t, ba, i), len);
      }
    }
  }
}

// What min (or max) must give: the canonical NaN when either operand is NaN, -0 (+0) for a
// pair of zeros of different signs, otherwise the lesser (greater) operand's own bits.
uint64_t ExpectedMinMax(const FloatType& ft, uint64_t a, uint64_t b, bool is_min) {
  const double x = ValueOf(ft.dtype, a), y = ValueOf(ft.dtype, b);
  if (std::isnan(x) || std::isnan(y)) return ft.canonical_nan;
  if (x == y) {
    if (x != 0) return a;
    const bool negative =
        is_min ? (std::signbit(x) || std::signbit(y)) : (std::signbit(x) && std::signbit(y));
    return negative ? (std::signbit(x) ? a : b) : (std::signbit(x) ? b : a);
  }
  return (x < y) == is_min ? a : b;
}

TEST(ReduceKernelSpecialsTest, MinAndMaxAreCommutativeBitForBitOnEveryFloatType) {
  for (const FloatType& ft : FloatTypes()) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      const bool is_min = op == ReduceOp::kMin;
      std::map<size_t, int> failures;  // a few per length
      ForEveryPair(ft, op, [&](uint64_t a, uint64_t b, uint64_t ab, uint64_t ba, size_t len) {
        const uint64_t want = ExpectedMinMax(ft, a, b, is_min);
        if ((ab != want || ba != want) && ++failures[len] <= 3) {
          ADD_FAILURE() << DataTypeName(ft.dtype) << " " << ReduceOpName(op) << "(" << Hex(a)
                        << ", " << Hex(b) << ") at length " << len << ": " << Hex(ab)
                        << ", reversed " << Hex(ba) << ", want " << Hex(want);
        }
      });
    }
  }
}

TEST(ReduceKernelSpecialsTest, SignedZerosAndNaNGiveTheDocumentedBits) {
  float a[2] = {0.0f, -0.0f}, b[2] = {-0.0f, 0.0f};
  auto min = GetReduceFn(DataType::kFloat32, ReduceOp::kMin);
  auto max = GetReduceFn(DataType::kFloat32, ReduceOp::kMax);
  ASSERT_TRUE(min.ok() && max.ok());
  float lo[2] = {a[0], a[1]}, hi[2] = {a[0], a[1]};
  (*min)(lo, b, 2);
  (*max)(hi, b, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(lo[i] == 0 && std::signbit(lo[i])) << "min(" << a[i] << ", " << b[i] << ")";
    EXPECT_TRUE(hi[i] == 0 && !std::signbit(hi[i])) << "max(" << a[i] << ", " << b[i] << ")";
  }
  // A NaN on one rank only: both orders give the canonical NaN, not the other value.
  double d[2] = {std::nan(""), 1.0}, e[2] = {1.0, -std::nan("")};
  auto dmin = GetReduceFn(DataType::kFloat64, ReduceOp::kMin);
  ASSERT_TRUE(dmin.ok());
  (*dmin)(d, e, 2);
  for (double v : d) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    EXPECT_EQ(bits, 0x7ff8000000000000u);
  }
}

// Sum, prod and avg: commutative bit for bit except, for float32 and float64, when both
// operands are NaN (which payload survives is the hardware's, see reduce_kernels.cc). The
// 16-bit kernels give the canonical NaN for every NaN result.
TEST(ReduceKernelSpecialsTest, ArithmeticIsCommutativeAndHalfNaNsAreCanonical) {
  for (const FloatType& ft : FloatTypes()) {
    const bool half = DataTypeSize(ft.dtype) == 2;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kAvg}) {
      std::map<size_t, int> failures;  // a few per length
      ForEveryPair(ft, op, [&](uint64_t a, uint64_t b, uint64_t ab, uint64_t ba, size_t len) {
        const bool both_nan = std::isnan(ValueOf(ft.dtype, a)) && std::isnan(ValueOf(ft.dtype, b));
        const bool nan_result = std::isnan(ValueOf(ft.dtype, ab));
        bool ok =
            (ab == ba || (both_nan && !half)) && nan_result == std::isnan(ValueOf(ft.dtype, ba));
        if (half && nan_result) ok = ok && ab == ft.canonical_nan;
        if (!ok && ++failures[len] <= 3) {
          ADD_FAILURE() << DataTypeName(ft.dtype) << " " << ReduceOpName(op) << "(" << Hex(a)
                        << ", " << Hex(b) << ") at length " << len << ": " << Hex(ab)
                        << ", reversed " << Hex(ba);
        }
      });
    }
  }
}

}  // namespace
}  // namespace gyre
