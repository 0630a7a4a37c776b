// The floating reduction kernels on special values: an allreduce combines (own, peer) on one
// rank and (peer, own) on another, so op(a, b) and op(b, a) must have the same bits, for
// NaN of either sign and any payload, signed zeros, infinities and denormals. Each case runs
// at several lengths so that both the vectorised loop and its scalar tail see every pair,
// and against every build of the kernels this CPU can run (baseline x86-64 and AVX2), which
// must also agree with each other bit for bit. The 16-bit conversions are checked against
// a plain reference written here, and the 16-bit kernels' values against it too.
#include "core/base/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/base/dtype.h"

namespace gyre {
namespace {

// 1 and 7: scalar only; 64: vector only; 67: vector and a tail of 3.
constexpr size_t kLengths[] = {1, 7, 64, 67};

// The kernel builds this binary has and this CPU runs; the baseline always.
std::vector<KernelIsa> Isas() {
  std::vector<KernelIsa> isas;
  for (KernelIsa isa : {KernelIsa::kBaseline, KernelIsa::kAvx2}) {
    if (KernelIsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

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
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (uint64_t a : ft.specials) {
    for (uint64_t b : ft.specials) pairs.emplace_back(a, b);
  }
  for (KernelIsa isa : Isas()) {
    SCOPED_TRACE(KernelIsaName(isa));
    auto fn = GetReduceFnFor(t, op, isa);
    ASSERT_TRUE(fn.ok()) << fn.status();
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

// Plain references for the 16-bit conversions, written for reading, not for speed (half.h's
// are written so that a loop over them vectorises).
uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float ReferenceHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  // Zero, subnormal (mant * 2^-24) and normal ((1024 + mant) * 2^(exp - 25)): exact.
  const float magnitude = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                                   : std::ldexp(static_cast<float>(1024 + mant), exp - 25);
  return BitsFloat(sign | FloatBits(magnitude));
}

// value / 2^shift rounded to a whole number, half to even.
uint32_t RoundHalfEven(uint64_t value, int shift) {
  const uint64_t whole = value >> shift, rest = value & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  return static_cast<uint32_t>(whole + (rest > half || (rest == half && (whole & 1)) ? 1 : 0));
}

uint16_t ReferenceFloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const int exp = (x >> 23) & 0xff;
  const uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return sign | (mant != 0 ? 0x7e00 : 0x7c00);
  if (exp == 0) return sign;  // float subnormals are far below binary16's range
  // |f| = (2^23 + mant) * 2^(exp - 150); binary16 counts units of 2^-24 below 2^-14 and
  // keeps 11 significant bits above.
  const uint64_t significand = (uint64_t{1} << 23) | mant;
  const int e = exp - 127;  // |f| in [2^e, 2^(e+1))
  if (e < -25) return sign;
  if (e < -14) return sign | static_cast<uint16_t>(RoundHalfEven(significand, -e - 1));
  if (e > 15) return sign | 0x7c00;
  const uint32_t rounded = RoundHalfEven(significand, 13);  // 11 bits, or 2^11 on a carry
  const uint32_t bits = (static_cast<uint32_t>(e + 15) << 10) + (rounded - 1024);
  return sign | static_cast<uint16_t>(bits >= 0x7c00 ? 0x7c00 : bits);
}

uint16_t ReferenceFloatToBfloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>(RoundHalfEven(x, 16));  // a carry reaches the exponent: right
}

TEST(HalfConversionTest, EveryBinary16AndBfloat16ValueWidensExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto v = static_cast<uint16_t>(h);
    ASSERT_EQ(FloatBits(HalfToFloat(v)), FloatBits(ReferenceHalfToFloat(v))) << Hex(h);
    ASSERT_EQ(FloatBits(Bfloat16ToFloat(v)), h << 16) << Hex(h);
  }
}

// Every float whose low 13 bits are one of a few patterns (zero, one, just below, at and
// above binary16's halfway point, all ones): all exponents and all upper mantissa bits, so
// every rounding boundary of both formats, normal and subnormal, meets both parities.
TEST(HalfConversionTest, FloatsNarrowToTheNearestEvenAsTheReferenceDoes) {
  int failures = 0;
  for (uint32_t high = 0; high < (1u << 19); ++high) {
    for (uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {
      const float f = BitsFloat((high << 13) | low);
      const uint16_t h = FloatToHalf(f), b = FloatToBfloat16(f);
      const uint16_t want_h = ReferenceFloatToHalf(f), want_b = ReferenceFloatToBfloat16(f);
      if ((h != want_h || b != want_b) && ++failures <= 5) {
        ADD_FAILURE() << Hex(FloatBits(f)) << ": binary16 " << Hex(h) << " want " << Hex(want_h)
                      << ", bfloat16 " << Hex(b) << " want " << Hex(want_b);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// Sum, prod and avg of 16-bit floats: widened exactly, one float operation, rounded once to
// the nearest even, and every NaN canonical; random bit patterns, NaNs and all.
TEST(ReduceKernelTest, SixteenBitArithmeticRoundsOnceAsTheReferenceDoes) {
  std::mt19937 rng(7);
  constexpr size_t kCount = 100003;  // a tail after the vector loop
  for (DataType t : {DataType::kFloat16, DataType::kBfloat16}) {
    const bool binary16 = t == DataType::kFloat16;
    auto widen = [&](uint16_t h) {
      return binary16 ? ReferenceHalfToFloat(h) : BitsFloat(static_cast<uint32_t>(h) << 16);
    };
    auto narrow = [&](float f) -> uint16_t {
      if (std::isnan(f)) return binary16 ? 0x7e00 : 0x7fc0;
      return binary16 ? ReferenceFloatToHalf(f) : ReferenceFloatToBfloat16(f);
    };
    std::vector<uint16_t> a(kCount), b(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      a[i] = static_cast<uint16_t>(rng());
      b[i] = static_cast<uint16_t>(rng());
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kAvg}) {
      for (KernelIsa isa : Isas()) {
        auto fn = GetReduceFnFor(t, op, isa);
        ASSERT_TRUE(fn.ok()) << fn.status();
        std::vector<uint16_t> out = a;
        (*fn)(out.data(), b.data(), kCount);
        int failures = 0;
        for (size_t i = 0; i < kCount; ++i) {
          const float x = widen(a[i]), y = widen(b[i]);
          const uint16_t want = narrow(op == ReduceOp::kProd ? x * y : x + y);
          if (out[i] != want && ++failures <= 3) {
            ADD_FAILURE() << DataTypeName(t) << " " << ReduceOpName(op) << " ("
                          << KernelIsaName(isa) << ") of " << Hex(a[i]) << " and " << Hex(b[i])
                          << ": " << Hex(out[i]) << ", want " << Hex(want);
          }
        }
        EXPECT_EQ(failures, 0) << DataTypeName(t) << " " << ReduceOpName(op);
      }
    }
  }
}

// Ranks on CPUs with and without AVX2 must agree: every (dtype, op) on random bit patterns
// gives the same bits from both builds. The one allowance is the documented one: a float32
// or float64 sum or product of two NaNs is NaN, with either operand's payload.
TEST(ReduceKernelTest, EveryBuildGivesTheSameBitsForEveryTypeAndOp) {
  if (!KernelIsaAvailable(KernelIsa::kAvx2)) {
    EXPECT_FALSE(GetReduceFnFor(DataType::kFloat32, ReduceOp::kSum, KernelIsa::kAvx2).ok());
    GTEST_SKIP() << "this build or CPU has no AVX2 kernels to compare with the baseline's";
  }
  std::mt19937_64 rng(11);
  constexpr size_t kBytes = 8 * 1003;
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    const auto t = static_cast<DataType>(ti);
    const size_t n = kBytes / DataTypeSize(t);
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      const auto op = static_cast<ReduceOp>(oi);
      if (!CheckReduceSupported(t, op).ok()) continue;
      auto base = GetReduceFnFor(t, op, KernelIsa::kBaseline);
      auto avx2 = GetReduceFnFor(t, op, KernelIsa::kAvx2);
      ASSERT_TRUE(base.ok() && avx2.ok());
      std::vector<unsigned char> a(kBytes), b(kBytes);
      for (auto& c : a) c = static_cast<unsigned char>(rng());
      for (auto& c : b) c = static_cast<unsigned char>(rng());
      std::vector<unsigned char> x = a, y = a;
      (*base)(x.data(), b.data(), n);
      (*avx2)(y.data(), b.data(), n);
      const bool payload_free = (t == DataType::kFloat32 || t == DataType::kFloat64) &&
                                op != ReduceOp::kMin && op != ReduceOp::kMax;
      int failures = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t xb = BitsAt(t, x, i), yb = BitsAt(t, y, i);
        bool same = xb == yb;
        if (!same && payload_free && std::isnan(ValueOf(t, BitsAt(t, a, i))) &&
            std::isnan(ValueOf(t, BitsAt(t, b, i)))) {
          same = std::isnan(ValueOf(t, xb)) && std::isnan(ValueOf(t, yb));
        }
        if (!same && ++failures <= 3) {
          ADD_FAILURE() << DataTypeName(t) << " " << ReduceOpName(op) << " element " << i
                        << ": baseline " << Hex(xb) << ", avx2 " << Hex(yb);
        }
      }
    }
  }
}

// avg's last step divides once: 16-bit values round once as the reference does (NaN canonical),
// and float32/float64 give the same bits from every build; integer types are refused.
TEST(ReduceKernelTest, AverageDivisionRoundsOnceAndAgreesAcrossBuilds) {
  std::mt19937 rng(13);
  constexpr size_t kCount = 50021;
  for (DataType t : {DataType::kFloat16, DataType::kBfloat16}) {
    const bool binary16 = t == DataType::kFloat16;
    std::vector<uint16_t> in(kCount);
    for (auto& v : in) v = static_cast<uint16_t>(rng());
    for (int divisor : {1, 3, 8}) {
      for (KernelIsa isa : Isas()) {
        auto fn = GetScaleFnFor(t, isa);
        ASSERT_TRUE(fn.ok()) << fn.status();
        std::vector<uint16_t> out = in;
        (*fn)(out.data(), kCount, divisor);
        int failures = 0;
        for (size_t i = 0; i < kCount; ++i) {
          const float x = binary16 ? ReferenceHalfToFloat(in[i])
                                   : BitsFloat(static_cast<uint32_t>(in[i]) << 16);
          const float q = x / static_cast<float>(divisor);
          const uint16_t want = std::isnan(q) ? (binary16 ? 0x7e00 : 0x7fc0)
                                : binary16    ? ReferenceFloatToHalf(q)
                                              : ReferenceFloatToBfloat16(q);
          if (out[i] != want && ++failures <= 3) {
            ADD_FAILURE() << DataTypeName(t) << " " << Hex(in[i]) << " / " << divisor << " ("
                          << KernelIsaName(isa) << "): " << Hex(out[i]) << ", want " << Hex(want);
          }
        }
      }
    }
  }
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    std::vector<unsigned char> in(8 * 1001);
    for (auto& c : in) c = static_cast<unsigned char>(rng());
    const size_t n = in.size() / DataTypeSize(t);
    std::vector<std::vector<unsigned char>> outs;
    for (KernelIsa isa : Isas()) {
      auto fn = GetScaleFnFor(t, isa);
      ASSERT_TRUE(fn.ok()) << fn.status();
      outs.push_back(in);
      (*fn)(outs.back().data(), n, 3);
    }
    for (size_t k = 1; k < outs.size(); ++k) EXPECT_EQ(outs[k], outs[0]) << DataTypeName(t);
    std::vector<unsigned char> once = in;
    ASSERT_TRUE(ScaleForAverage(t, once.data(), n, 3).ok());
    EXPECT_EQ(once, outs[0]) << DataTypeName(t);
  }
  for (KernelIsa isa : Isas()) {
    EXPECT_FALSE(GetScaleFnFor(DataType::kInt32, isa).ok());
  }
  EXPECT_FALSE(ScaleForAverage(DataType::kInt32, nullptr, 0, 2).ok());
  EXPECT_FALSE(ScaleForAverage(DataType::kFloat32, nullptr, 0, 0).ok());
}

// 16-bit min and max compare bits as integers; random pairs of every bit pattern (NaNs,
// zeros, subnormals, infinities) give what the value-level rule gives, from every build.
TEST(ReduceKernelTest, SixteenBitMinAndMaxFollowTheValueRuleOnRandomPairs) {
  std::mt19937 rng(17);
  constexpr size_t kCount = 100003;
  for (const FloatType& ft : FloatTypes()) {
    if (DataTypeSize(ft.dtype) != 2) continue;
    std::vector<uint16_t> a(kCount), b(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      a[i] = static_cast<uint16_t>(rng());
      b[i] = static_cast<uint16_t>(rng());
    }
    for (size_t i = 0; i < 64; ++i) b[i] = a[i] ^ 0x8000;  // +-x pairs, +-0 among them
    b[64] = a[64];
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      for (KernelIsa isa : Isas()) {
        auto fn = GetReduceFnFor(ft.dtype, op, isa);
        ASSERT_TRUE(fn.ok()) << fn.status();
        std::vector<uint16_t> out = a;
        (*fn)(out.data(), b.data(), kCount);
        int failures = 0;
        for (size_t i = 0; i < kCount; ++i) {
          const uint64_t want = ExpectedMinMax(ft, a[i], b[i], op == ReduceOp::kMin);
          if (out[i] != want && ++failures <= 3) {
            ADD_FAILURE() << DataTypeName(ft.dtype) << " " << ReduceOpName(op) << " ("
                          << KernelIsaName(isa) << ") of " << Hex(a[i]) << " and " << Hex(b[i])
                          << ": " << Hex(out[i]) << ", want " << Hex(want);
          }
        }
      }
    }
  }
}

// Every (dtype, op) and the avg division, for every length from 0 to 40 starting one element
// past an aligned address: the builds agree, and nothing outside [0, n) is written.
TEST(ReduceKernelTest, EveryLengthAndOffsetStaysInItsRangeAndAgreesAcrossBuilds) {
  std::mt19937_64 rng(19);
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    const auto t = static_cast<DataType>(ti);
    const size_t es = DataTypeSize(t);
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      const auto op = static_cast<ReduceOp>(oi);
      if (!CheckReduceSupported(t, op).ok()) continue;
      for (size_t n = 0; n <= 40; ++n) {
        std::vector<unsigned char> a((n + 2) * es), b(a.size());
        for (auto& c : a) c = static_cast<unsigned char>(rng());
        for (auto& c : b) c = static_cast<unsigned char>(rng());
        std::vector<std::vector<unsigned char>> outs;
        for (KernelIsa isa : Isas()) {
          auto fn = GetReduceFnFor(t, op, isa);
          ASSERT_TRUE(fn.ok()) << fn.status();
          std::vector<unsigned char> out = a;
          (*fn)(out.data() + es, b.data() + es, n);
          if (op == ReduceOp::kAvg) {
            auto scale = GetScaleFnFor(t, isa);
            ASSERT_TRUE(scale.ok()) << scale.status();
            (*scale)(out.data() + es, n, 3);
          }
          EXPECT_TRUE(std::equal(out.begin(), out.begin() + es, a.begin()) &&
                      std::equal(out.end() - es, out.end(), a.end() - es))
              << DataTypeName(t) << " " << ReduceOpName(op) << " n=" << n << " ("
              << KernelIsaName(isa) << ") wrote outside its range";
          outs.push_back(std::move(out));
        }
        const bool payload_free = (t == DataType::kFloat32 || t == DataType::kFloat64) &&
                                  op != ReduceOp::kMin && op != ReduceOp::kMax;
        for (size_t k = 1; k < outs.size() && !payload_free; ++k) {
          EXPECT_EQ(outs[k], outs[0]) << DataTypeName(t) << " " << ReduceOpName(op) << " n=" << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gyre
