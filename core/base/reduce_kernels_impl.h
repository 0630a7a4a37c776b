// The reduction kernels, compiled once per instruction set: reduce_kernels.cc builds them
// for the baseline x86-64 (SSE2) and reduce_kernels_avx2.cc for AVX2 and F16C, and GetReduceFn
// picks the widest the CPU has. Each including file gets its own copies (everything here has
// internal linkage), so code built for AVX2 can never be linked in where the baseline's
// was meant. Include this header from those two files only.
//
// The files are compiled with -O3 so that every loop below is vectorised; each kernel is
// one pass over restrict pointers with no branches that the compiler cannot turn into
// blends.
//
// The kernels are commutative bit for bit: op(a, b) and op(b, a) have the same bits. An
// allreduce may combine (own, peer) on one rank and (peer, own) on another, and every rank
// must end with identical bits. For floating types this takes rules beyond IEEE arithmetic:
// min/max give NaN when either operand is NaN, min(+0, -0) = -0 and max(+0, -0) = +0, and
// a NaN they return is the one canonical quiet NaN (positive, no payload), as is every NaN
// of the 16-bit kernels. The one exception is below, at Sum. Every kernel works element by
// element with IEEE operations, so the AVX2 and baseline builds give the same bits, and
// ranks on CPUs of either kind agree.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/base/dtype.h"
#include "core/base/half.h"
#include "core/base/reduce_kernels.h"

namespace gyre {
namespace {

// The unsigned integer holding a floating type's bits.
template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// The bits of `a` and `b` combined with or (kOr) or and.
template <typename T, bool kOr>
T CombineBits(T a, T b) {
  BitsOf<T> x, y;
  std::memcpy(&x, &a, sizeof(T));
  std::memcpy(&y, &b, sizeof(T));
  const BitsOf<T> z = kOr ? (x | y) : (x & y);
  T r;
  std::memcpy(&r, &z, sizeof(T));
  return r;
}

template <typename T>
constexpr T kCanonicalNaN = std::numeric_limits<T>::quiet_NaN();

// float32 and float64 sums and products keep the hardware's NaN: when both operands are
// NaN, which payload survives depends on their order, so ranks that add in different
// orders may end with different NaN bits (deterministic mode gives one order). Making it
// canonical would cost 20-60% on buffers in cache, for every sum of every job.
struct Sum {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a + b);
  }
};
struct Prod {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a * b);
  }
};

// Floating min/max take the lesser (greater) value either way round, which settles all but
// equal operands; equal values have equal bits except +0 and -0, where or of the bits gives
// -0 (min) and and gives +0 (max). A NaN in either operand gives the canonical NaN. All of
// it vectorises to compares, minps/maxps, bit operations and blends.
template <bool kIsMin>
struct MinMax {
  // Whether x comes first: is the lesser (min) or the greater (max).
  template <typename T>
  static bool First(T x, T y) {
    return kIsMin ? x < y : y < x;
  }
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      const T r = CombineBits<T, kIsMin>(First(a, b) ? a : b, First(b, a) ? b : a);
      return __builtin_isunordered(a, b) ? kCanonicalNaN<T> : r;
    } else {
      return First(b, a) ? b : a;
    }
  }
};
using Min = MinMax<true>;
using Max = MinMax<false>;
struct Band {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct Bor {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct Bxor {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

template <typename T, typename Op>
void Kernel(void* dst_v, const void* src_v, size_t n) {
  T* __restrict dst = static_cast<T*>(dst_v);
  const T* __restrict src = static_cast<const T*>(src_v);
  // Unsigned arithmetic for integer sum/prod: wrap-around is defined, the bits are the same.
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T> &&
                (std::is_same_v<Op, Sum> || std::is_same_v<Op, Prod>)) {
    using U = std::make_unsigned_t<T>;
    U* __restrict d = reinterpret_cast<U*>(dst);
    const U* __restrict s = reinterpret_cast<const U*>(src);
    for (size_t i = 0; i < n; ++i) d[i] = Op::Apply(d[i], s[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Op::Apply(dst[i], src[i]);
  }
}

// The two 16-bit floating formats: their conversions (half.h), +infinity and canonical NaN.
// A 16-bit value whose magnitude bits exceed infinity's is a NaN.
struct Binary16Format {
  static float Load(uint16_t h) { return half::HalfBitsToFloat(h); }
  static uint16_t Store(float f) { return half::FloatToHalfBits(f); }
  static constexpr uint16_t kInf = 0x7c00, kNaN = 0x7e00;
};
struct Bfloat16Format {
  static float Load(uint16_t h) { return half::Bfloat16BitsToFloat(h); }
  static uint16_t Store(float f) { return half::FloatToBfloat16Bits(f); }
  static constexpr uint16_t kInf = 0x7f80, kNaN = 0x7fc0;
};

template <typename Format>
bool IsNaN16(uint16_t h) {
  return (h & 0x7fffu) > Format::kInf;
}

// `r`, or the format's canonical NaN if `r` is a NaN.
template <typename Format>
uint16_t Canonical16(uint16_t r) {
  return IsNaN16<Format>(r) ? Format::kNaN : r;
}

// 16-bit floats: widen to float, apply, round back (one rounding per operation, as a
// native half unit would do). Here every NaN result is made canonical, sums too: the
// conversions cost far more than the one compare. Load and Store are half.h's branch-free
// conversions, inlined, so this loop vectorises like the others; the NaN test is on the
// 16-bit result (a NaN stays NaN through Store), which keeps the loop free of branches.
template <typename Format, typename Op>
void HalfKernel(void* dst_v, const void* src_v, size_t n) {
  uint16_t* __restrict dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* __restrict src = static_cast<const uint16_t*>(src_v);
  for (size_t i = 0; i < n; ++i) {
    dst[i] =
        Canonical16<Format>(Format::Store(Op::Apply(Format::Load(dst[i]), Format::Load(src[i]))));
  }
}

// Min and max of 16-bit floats need no conversion: the result is one of the operands, so
// they compare the bits as integers. Flipping the magnitude bits of a negative value turns
// sign-magnitude into an ordinary 16-bit integer order in which -0 is just below +0, so the
// lesser (greater) operand is also what Min (Max) gives for a pair of zeros. A NaN operand
// gives the canonical NaN. All of it stays in 16-bit lanes.
inline int16_t OrderKey(uint16_t h) {
  const auto s = static_cast<int16_t>(h);
  return static_cast<int16_t>(s ^ ((s >> 15) & 0x7fff));
}

template <typename Format, bool kIsMin>
void HalfMinMaxKernel(void* dst_v, const void* src_v, size_t n) {
  uint16_t* __restrict dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* __restrict src = static_cast<const uint16_t*>(src_v);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t a = dst[i], b = src[i];
    const int16_t ka = OrderKey(a), kb = OrderKey(b);
    const uint16_t r = (kIsMin ? kb < ka : ka < kb) ? b : a;
    dst[i] = IsNaN16<Format>(a) || IsNaN16<Format>(b) ? Format::kNaN : r;
  }
}

// The kernel of an integer type, float32 or float64: avg sums (floating types only), and
// the bitwise ops are the integer types' alone.
template <typename T>
ReduceFn TypedKernel(ReduceOp op) {
  constexpr bool kFloating = std::is_floating_point_v<T>;
  switch (op) {
    case ReduceOp::kSum:
      return &Kernel<T, Sum>;
    case ReduceOp::kAvg:
      return kFloating ? &Kernel<T, Sum> : nullptr;
    case ReduceOp::kProd:
      return &Kernel<T, Prod>;
    case ReduceOp::kMin:
      return &Kernel<T, Min>;
    case ReduceOp::kMax:
      return &Kernel<T, Max>;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (kFloating) {
        return nullptr;
      } else {
        return op == ReduceOp::kBand  ? &Kernel<T, Band>
               : op == ReduceOp::kBor ? &Kernel<T, Bor>
                                      : &Kernel<T, Bxor>;
      }
  }
  return nullptr;
}

template <typename Format>
ReduceFn HalfKernelFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &HalfKernel<Format, Sum>;
    case ReduceOp::kProd:
      return &HalfKernel<Format, Prod>;
    case ReduceOp::kMin:
      return &HalfMinMaxKernel<Format, true>;
    case ReduceOp::kMax:
      return &HalfMinMaxKernel<Format, false>;
    default:
      return nullptr;
  }
}

// The average's last step, data[i] /= divisor, for the floating types (avg reduces as sum,
// then divides once). The 16-bit types round once, and a NaN result is the canonical NaN,
// as in their reduce kernels.
template <typename T>
void ScaleKernel(void* data_v, size_t n, int divisor) {
  T* __restrict data = static_cast<T*>(data_v);
  const auto d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) data[i] = data[i] / d;
}

template <typename Format>
void HalfScaleKernel(void* data_v, size_t n, int divisor) {
  uint16_t* __restrict data = static_cast<uint16_t*>(data_v);
  const auto d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) {
    data[i] = Canonical16<Format>(Format::Store(Format::Load(data[i]) / d));
  }
}

// This file's scale kernel for `t`; null for an integer type.
ScaleFn ScaleKernelFor(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return &ScaleKernel<float>;
    case DataType::kFloat64:
      return &ScaleKernel<double>;
    case DataType::kFloat16:
      return &HalfScaleKernel<Binary16Format>;
    case DataType::kBfloat16:
      return &HalfScaleKernel<Bfloat16Format>;
    default:
      return nullptr;
  }
}

// This file's kernel for (t, op); null for a pair CheckReduceSupported refuses.
ReduceFn KernelFor(DataType t, ReduceOp op) {
  switch (t) {
    case DataType::kInt8:
      return TypedKernel<int8_t>(op);
    case DataType::kUint8:
      return TypedKernel<uint8_t>(op);
    case DataType::kInt32:
      return TypedKernel<int32_t>(op);
    case DataType::kUint32:
      return TypedKernel<uint32_t>(op);
    case DataType::kInt64:
      return TypedKernel<int64_t>(op);
    case DataType::kUint64:
      return TypedKernel<uint64_t>(op);
    case DataType::kFloat16:
      return HalfKernelFor<Binary16Format>(op);
    case DataType::kBfloat16:
      return HalfKernelFor<Bfloat16Format>(op);
    case DataType::kFloat32:
      return TypedKernel<float>(op);
    case DataType::kFloat64:
      return TypedKernel<double>(op);
  }
  return nullptr;
}

}  // namespace
}  // namespace gyre
