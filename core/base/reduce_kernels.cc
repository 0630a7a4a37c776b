// The reduction kernels. This file is compiled with -O3 so that every loop below is
// vectorised; each kernel is one pass over restrict pointers with no branches that the
// compiler cannot turn into blends.
//
// The kernels are commutative bit for bit: op(a, b) and op(b, a) have the same bits. An
// allreduce may combine (own, peer) on one rank and (peer, own) on another, and every rank
// must end with identical bits. For floating types this takes rules beyond IEEE arithmetic:
// min/max give NaN when either operand is NaN, min(+0, -0) = -0 and max(+0, -0) = +0, and
// a NaN they return is the one canonical quiet NaN (positive, no payload), as is every NaN
// of the 16-bit kernels. The one exception is below, at Sum.
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/base/dtype.h"

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
struct Min {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      const T r = CombineBits<T, true>(a < b ? a : b, b < a ? b : a);
      return __builtin_isunordered(a, b) ? kCanonicalNaN<T> : r;
    } else {
      return b < a ? b : a;
    }
  }
};
struct Max {
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      const T r = CombineBits<T, false>(a > b ? a : b, b > a ? b : a);
      return __builtin_isunordered(a, b) ? kCanonicalNaN<T> : r;
    } else {
      return a < b ? b : a;
    }
  }
};
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

template <typename T>
T CanonicalNaN(T r) {
  return r != r ? kCanonicalNaN<T> : r;
}

// 16-bit floats: widen to float, apply, round back (one rounding per operation, as a
// native half unit would do). Here every NaN result is made canonical, sums too: the
// conversions cost far more than the one compare.
template <float (*Load)(uint16_t), uint16_t (*Store)(float), typename Op>
void HalfKernel(void* dst_v, const void* src_v, size_t n) {
  uint16_t* __restrict dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* __restrict src = static_cast<const uint16_t*>(src_v);
  for (size_t i = 0; i < n; ++i) {
    dst[i] = Store(CanonicalNaN(Op::Apply(Load(dst[i]), Load(src[i]))));
  }
}

template <typename T>
ReduceFn IntegerFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return &Kernel<T, Sum>;
    case ReduceOp::kProd:
      return &Kernel<T, Prod>;
    case ReduceOp::kMin:
      return &Kernel<T, Min>;
    case ReduceOp::kMax:
      return &Kernel<T, Max>;
    case ReduceOp::kBand:
      return &Kernel<T, Band>;
    case ReduceOp::kBor:
      return &Kernel<T, Bor>;
    case ReduceOp::kBxor:
      return &Kernel<T, Bxor>;
    case ReduceOp::kAvg:
      return nullptr;
  }
  return nullptr;
}

template <typename T>
ReduceFn FloatFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &Kernel<T, Sum>;
    case ReduceOp::kProd:
      return &Kernel<T, Prod>;
    case ReduceOp::kMin:
      return &Kernel<T, Min>;
    case ReduceOp::kMax:
      return &Kernel<T, Max>;
    default:
      return nullptr;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
ReduceFn HalfFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &HalfKernel<Load, Store, Sum>;
    case ReduceOp::kProd:
      return &HalfKernel<Load, Store, Prod>;
    case ReduceOp::kMin:
      return &HalfKernel<Load, Store, Min>;
    case ReduceOp::kMax:
      return &HalfKernel<Load, Store, Max>;
    default:
      return nullptr;
  }
}

template <typename T>
void ScaleLoop(void* data_v, size_t n, T divisor) {
  T* __restrict data = static_cast<T*>(data_v);
  for (size_t i = 0; i < n; ++i) data[i] = data[i] / divisor;
}

}  // namespace

StatusOr<ReduceFn> GetReduceFn(DataType t, ReduceOp op) {
  GYRE_RETURN_IF_ERROR(CheckReduceSupported(t, op));
  ReduceFn fn = nullptr;
  switch (t) {
    case DataType::kInt8:
      fn = IntegerFn<int8_t>(op);
      break;
    case DataType::kUint8:
      fn = IntegerFn<uint8_t>(op);
      break;
    case DataType::kInt32:
      fn = IntegerFn<int32_t>(op);
      break;
    case DataType::kUint32:
      fn = IntegerFn<uint32_t>(op);
      break;
    case DataType::kInt64:
      fn = IntegerFn<int64_t>(op);
      break;
    case DataType::kUint64:
      fn = IntegerFn<uint64_t>(op);
      break;
    case DataType::kFloat16:
      fn = HalfFn<HalfToFloat, FloatToHalf>(op);
      break;
    case DataType::kBfloat16:
      fn = HalfFn<Bfloat16ToFloat, FloatToBfloat16>(op);
      break;
    case DataType::kFloat32:
      fn = FloatFn<float>(op);
      break;
    case DataType::kFloat64:
      fn = FloatFn<double>(op);
      break;
  }
  if (fn == nullptr) return InternalError("no reduce kernel for a supported (dtype, op) pair");
  return fn;
}

Status ScaleForAverage(DataType t, void* data, size_t n, int divisor) {
  if (!IsFloating(t)) {
    return InvalidArgumentError(std::string("average of ") + DataTypeName(t) +
                                " is not defined: avg needs a floating dtype");
  }
  if (divisor <= 0) return InvalidArgumentError("average divisor must be positive");
  switch (t) {
    case DataType::kFloat32:
      ScaleLoop<float>(data, n, static_cast<float>(divisor));
      break;
    case DataType::kFloat64:
      ScaleLoop<double>(data, n, static_cast<double>(divisor));
      break;
    case DataType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = FloatToHalf(HalfToFloat(d[i]) / divisor);
      break;
    }
    case DataType::kBfloat16: {
      uint16_t* d = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = FloatToBfloat16(Bfloat16ToFloat(d[i]) / divisor);
      break;
    }
    default:
      break;
  }
  return Status::Ok();
}

}  // namespace gyre
