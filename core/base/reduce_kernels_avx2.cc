// The reduction kernels built for AVX2 and F16C (this file alone is compiled with -mavx2
// -mf16c; see core/base/CMakeLists.txt). Reached only through GetReduceFn on a CPU that has
// both (every CPU with AVX2 has F16C).
//
// The 16-bit floating types get hand-written loops here: 16 values at a time are widened to
// two vectors of floats, combined, and narrowed back, and the last n % 16 values take the
// portable kernel. They give the portable kernels' bits: widening is exact in both, both
// narrow once to nearest even (F16C with imm8 0, whatever MXCSR says, and ignoring
// flush-to-zero), and a NaN result becomes the format's canonical NaN in both.
#include <immintrin.h>

#include "core/base/reduce_kernels.h"
#include "core/base/reduce_kernels_impl.h"

namespace gyre::internal {
namespace {

// Canonical16 on 16 values: magnitudes above infinity's are NaN (a signed compare: both
// sides are below 0x8000).
template <typename Format>
__m256i CanonicalNaNs(__m256i r) {
  const __m256i is_nan = _mm256_cmpgt_epi16(_mm256_and_si256(r, _mm256_set1_epi16(0x7fff)),
                                            _mm256_set1_epi16(static_cast<int16_t>(Format::kInf)));
  return _mm256_blendv_epi8(r, _mm256_set1_epi16(static_cast<int16_t>(Format::kNaN)), is_nan);
}

// binary16 through F16C's conversions, eight values per instruction.
struct Binary16 {
  static constexpr DataType kType = DataType::kFloat16;
  static __m256 Low(__m256i v) { return _mm256_cvtph_ps(_mm256_castsi256_si128(v)); }
  static __m256 High(__m256i v) { return _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)); }
  static __m256i Narrow(__m256 low, __m256 high) {
    const __m256i r = _mm256_set_m128i(_mm256_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT),
                                       _mm256_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT));
    return CanonicalNaNs<Binary16Format>(r);
  }
};

// bfloat16 is the top half of a float: interleaving zeros below the values widens them (in
// an order within each 128-bit lane that packing undoes), and narrowing rounds as half.h
// does (add 0x7fff plus the lowest kept bit, keep the top half).
struct Bfloat16 {
  static constexpr DataType kType = DataType::kBfloat16;
  static __m256 Low(__m256i v) {
    return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
  }
  static __m256 High(__m256i v) {
    return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
  }
  static __m256i Round(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(_mm256_srli_epi32(up, 16), _mm256_set1_epi32(Bfloat16Format::kNaN),
                              nan);
  }
  static __m256i Narrow(__m256 low, __m256 high) {
    return _mm256_packus_epi32(Round(low), Round(high));
  }
};

__m256i Load16(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
void Store16(uint16_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// dst[i] = op(dst[i], src[i]) for sum (and avg) and prod.
template <typename Format, ReduceOp kOp>
void VectorKernel(void* dst_v, const void* src_v, size_t n) {
  auto* dst = static_cast<uint16_t*>(dst_v);
  const auto* src = static_cast<const uint16_t*>(src_v);
  auto apply = [](__m256 a, __m256 b) {
    return kOp == ReduceOp::kProd ? _mm256_mul_ps(a, b) : _mm256_add_ps(a, b);
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Load16(dst + i), b = Load16(src + i);
    Store16(dst + i, Format::Narrow(apply(Format::Low(a), Format::Low(b)),
                                    apply(Format::High(a), Format::High(b))));
  }
  KernelFor(Format::kType, kOp)(dst + i, src + i, n - i);
}

// data[i] /= divisor.
template <typename Format>
void VectorScale(void* data_v, size_t n, int divisor) {
  auto* data = static_cast<uint16_t*>(data_v);
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = Load16(data + i);
    Store16(data + i,
            Format::Narrow(_mm256_div_ps(Format::Low(v), d), _mm256_div_ps(Format::High(v), d)));
  }
  ScaleKernelFor(Format::kType)(data + i, n - i, divisor);
}

template <typename Format>
ReduceFn VectorKernelFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &VectorKernel<Format, ReduceOp::kSum>;
    case ReduceOp::kProd:
      return &VectorKernel<Format, ReduceOp::kProd>;
    default:
      return KernelFor(Format::kType, op);  // min and max: integer compares, no conversion
  }
}

}  // namespace

ReduceFn Avx2ReduceKernel(DataType t, ReduceOp op) {
  if (t == DataType::kFloat16) return VectorKernelFor<Binary16>(op);
  if (t == DataType::kBfloat16) return VectorKernelFor<Bfloat16>(op);
  return KernelFor(t, op);
}

ScaleFn Avx2ScaleKernel(DataType t) {
  if (t == DataType::kFloat16) return &VectorScale<Binary16>;
  if (t == DataType::kBfloat16) return &VectorScale<Bfloat16>;
  return ScaleKernelFor(t);
}

}  // namespace gyre::internal
