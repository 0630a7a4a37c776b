// Element types and reduction operators, and the kernels that apply `dst[i] = op(dst[i],
// src[i])`. Kernels are plain loops over restrict pointers so the compiler vectorises them;
// (dtype, op) pairs that make no sense (avg on integers, bitwise ops on floats) are
// InvalidArgument, never undefined behaviour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace gyre {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kBfloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,   // the mean over the ranks; floating types only (see AverageScalesInputs)
  kBand = 5,  // integers only
  kBor = 6,
  kBxor = 7,
};
inline constexpr int kNumReduceOps = 8;

size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);  // "float32"
bool IsFloating(DataType t);
bool IsValidDataType(int v);
StatusOr<DataType> ParseDataType(const std::string& name);

const char* ReduceOpName(ReduceOp op);  // "sum"
bool IsValidReduceOp(int v);
StatusOr<ReduceOp> ParseReduceOp(const std::string& name);

// OK if `op` is defined on `t`; InvalidArgument naming both and the rule otherwise.
Status CheckReduceSupported(DataType t, ReduceOp op);

// dst[i] = op(dst[i], src[i]) for i < n. `dst` and `src` must not overlap.
// kAvg reduces as kSum (the division by p happens once, in ScaleForAverage: after the sum,
// or before it on every input where AverageScalesInputs says so).
using ReduceFn = void (*)(void* dst, const void* src, size_t n);
StatusOr<ReduceFn> GetReduceFn(DataType t, ReduceOp op);

// data[i] /= divisor, for floating types (the last step of kAvg).
Status ScaleForAverage(DataType t, void* data, size_t n, int divisor);

// Whether an average of type `t` divides each rank's input by p before the sum, rather than
// the sum once after it. True for float16 only: its largest value is 65504, so a sum of p
// inputs leaves its range (and comes out as inf) long before their mean does, as 20000 on
// each of 4 ranks shows. The other floating types keep one division after an exact-as-can-be
// sum, whose range (3.4e38 and up) their means never approach.
inline bool AverageScalesInputs(DataType t) { return t == DataType::kFloat16; }

// IEEE binary16 and bfloat16 conversions (round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bfloat16ToFloat(uint16_t b);
uint16_t FloatToBfloat16(float f);

// Element `i` of a typed buffer as a double, and storing a double into it (test helpers
// and the self-test; conversions follow the type's rounding).
double LoadAsDouble(DataType t, const void* data, size_t i);
void StoreFromDouble(DataType t, void* data, size_t i, double v);

}  // namespace gyre
