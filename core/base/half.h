// IEEE binary16 and bfloat16 conversions to and from float, written without branches so that
// a loop over them vectorises: each result is computed for every case and picked with
// selects, which the compiler turns into compares and blends. The reduction kernels inline
// them; dtype.h's HalfToFloat and friends are these same functions out of line.
//
// Rounding is to nearest, ties to even, as the default floating-point environment does; NaN
// stays NaN (quiet, and binary16 drops the payload), infinities stay infinite and values
// beyond the 16-bit range become infinite. Neither direction depends on how the CPU treats
// denormal operands (flush-to-zero or denormals-are-zero): no subnormal float is ever an
// operand of the float arithmetic below, except in FloatToHalfBits, where such a value is
// far below binary16's smallest subnormal and gives +-0 either way. One thing does depend on
// the environment: FloatToHalfBits rounds subnormal results with a float addition, which
// follows the rounding mode, so a program that leaves round-to-nearest gets its own rounding
// there (and in all float arithmetic, which is why gyre's kernels, like any float sum shared
// by several ranks, assume every rank keeps the default environment).
//
// The functions have internal linkage (an unnamed namespace): reduce_kernels_avx2.cc compiles
// them with AVX2, and an inline function with external linkage would let the linker keep
// that copy for every file, where a CPU without AVX2 would run it.
#pragma once

#include <cstdint>
#include <cstring>

namespace gyre::half {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  // Normal: rebias the exponent from 15 to 127. Infinity and NaN: the all-ones exponent,
  // the payload kept. Zero and subnormal: the mantissa counts units of 2^-24, and
  // mantissa * 2^-24 is exact in float and never itself subnormal.
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  const uint32_t special = (em << 13) | 0x7f800000u;
  const uint32_t small = Bits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  uint32_t mag = em >= 0x7c00u ? special : normal;
  mag = em < 0x0400u ? small : mag;
  return FromBits(sign | mag);
}

inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal results (|f| >= 2^-14): rebias and drop 13 mantissa bits, rounding half to even;
  // a carry out of the mantissa moves to the next exponent, up to infinity, as it should.
  const uint32_t normal = (ax - ((127u - 15u) << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  // Smaller ones: 0.5f's last mantissa bit weighs 2^-24, binary16's subnormal unit, so the
  // float addition rounds |f| to that unit (half to even) and the bits above 0.5f's count
  // the units; 0x400 units is the smallest normal, 0x0400, exactly as encoded.
  const uint32_t small = Bits(FromBits(ax) + 0.5f) - Bits(0.5f);
  uint32_t mag = ax < (113u << 23) ? small : normal;
  mag = ax >= (143u << 23) ? 0x7c00u : mag;  // 2^16 and beyond (and infinity): infinity
  mag = ax > 0x7f800000u ? 0x7e00u : mag;    // NaN: the quiet NaN without payload
  return static_cast<uint16_t>(sign | mag);
}

inline float Bfloat16BitsToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBfloat16Bits(float f) {
  const uint32_t x = Bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // half to even
  const uint32_t quiet = (x >> 16) | 0x40u;                         // NaN: keep it NaN
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

}  // namespace
}  // namespace gyre::half
