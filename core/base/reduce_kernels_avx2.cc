// The reduction kernels built for AVX2 and F16C (this file alone is compiled with -mavx2
// -mf16c; see core/base/CMakeLists.txt). Reached only through GetReduceFn on a CPU that has
// both (every CPU with AVX2 has F16C).
#include <immintrin.h>

#include "core/base/reduce_kernels.h"
#include "core/base/reduce_kernels_impl.h"

namespace gyre::internal {
namespace {

// binary16 sum, product and average: F16C's conversions in place of half.h's, eight
// values per instruction. They give the same bits: widening is exact both ways, narrowing
// here rounds to nearest even whatever MXCSR says (imm8 0) and ignores flush-to-zero, and a
// NaN result becomes the canonical 0x7e00 below whatever its payload. The last n % 16
// values take the portable kernel.
template <typename Op>
void F16cKernel(void* dst_v, const void* src_v, size_t n) {
  auto* dst = static_cast<uint16_t*>(dst_v);
  const auto* src = static_cast<const uint16_t*>(src_v);
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i infinity = _mm256_set1_epi16(0x7c00);
  const __m256i nan = _mm256_set1_epi16(0x7e00);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256 lo = Op::Apply(_mm256_cvtph_ps(_mm256_castsi256_si128(a)),
                                _mm256_cvtph_ps(_mm256_castsi256_si128(b)));
    const __m256 hi = Op::Apply(_mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)),
                                _mm256_cvtph_ps(_mm256_extracti128_si256(b, 1)));
    const __m256i r = _mm256_set_m128i(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT),
                                       _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    // Magnitudes above infinity's are NaN (a signed compare: both sides are below 0x8000).
    const __m256i is_nan = _mm256_cmpgt_epi16(_mm256_and_si256(r, magnitude), infinity);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_blendv_epi8(r, nan, is_nan));
  }
  ReduceFn tail = KernelFor(DataType::kFloat16, Op::kPortable);
  tail(dst + i, src + i, n - i);
}

// bfloat16 sum, product and average: a bfloat16 is the top half of a float, so interleaving
// zeros below each value widens 16 of them into two vectors of floats, and packing the
// rounded top halves back undoes the interleave. Rounding is half.h's (add 0x7fff plus the
// lowest kept bit, keep the top half); a NaN result becomes the canonical 0x7fc0.
template <typename Op>
void Bf16Kernel(void* dst_v, const void* src_v, size_t n) {
  auto* dst = static_cast<uint16_t*>(dst_v);
  const auto* src = static_cast<const uint16_t*>(src_v);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i round = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i nan = _mm256_set1_epi32(0x7fc0);
  auto narrow = [&](__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, round), odd), 16);
    return _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256 lo = Op::Apply(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, a)),
                                _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, b)));
    const __m256 hi = Op::Apply(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, a)),
                                _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, b)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_packus_epi32(narrow(lo), narrow(hi)));
  }
  ReduceFn tail = KernelFor(DataType::kBfloat16, Op::kPortable);
  tail(dst + i, src + i, n - i);
}

struct VecSum {
  static constexpr ReduceOp kPortable = ReduceOp::kSum;
  static __m256 Apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
};
struct VecProd {
  static constexpr ReduceOp kPortable = ReduceOp::kProd;
  static __m256 Apply(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
};

}  // namespace

ReduceFn Avx2ReduceKernel(DataType t, ReduceOp op) {
  const bool sum = op == ReduceOp::kSum || op == ReduceOp::kAvg;
  if (t == DataType::kFloat16 && sum) return &F16cKernel<VecSum>;
  if (t == DataType::kFloat16 && op == ReduceOp::kProd) return &F16cKernel<VecProd>;
  if (t == DataType::kBfloat16 && sum) return &Bf16Kernel<VecSum>;
  if (t == DataType::kBfloat16 && op == ReduceOp::kProd) return &Bf16Kernel<VecProd>;
  return KernelFor(t, op);
}

}  // namespace gyre::internal
