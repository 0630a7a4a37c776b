#include "core/base/dtype.h"

#include <cmath>
#include <cstring>

namespace gyre {
namespace {

const char* const kTypeNames[kNumDataTypes] = {"int8",    "uint8",  "int32",   "uint32",
                                               "int64",   "uint64", "float16", "bfloat16",
                                               "float32", "float64"};
const size_t kTypeSizes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
const char* const kOpNames[kNumReduceOps] = {"sum", "prod", "min", "max",
                                             "avg", "band", "bor", "bxor"};

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

}  // namespace

size_t DataTypeSize(DataType t) { return kTypeSizes[static_cast<int>(t)]; }
const char* DataTypeName(DataType t) { return kTypeNames[static_cast<int>(t)]; }
bool IsValidDataType(int v) { return v >= 0 && v < kNumDataTypes; }
bool IsFloating(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBfloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

StatusOr<DataType> ParseDataType(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (name == kTypeNames[i]) return static_cast<DataType>(i);
  }
  if (name == "float" || name == "f32") return DataType::kFloat32;
  if (name == "double" || name == "f64") return DataType::kFloat64;
  if (name == "half" || name == "f16") return DataType::kFloat16;
  if (name == "bf16") return DataType::kBfloat16;
  if (name == "int") return DataType::kInt32;
  return InvalidArgumentError("unknown dtype '" + name +
                              "' (known: int8 uint8 int32 uint32 int64 uint64 float16 "
                              "bfloat16 float32 float64)");
}

const char* ReduceOpName(ReduceOp op) { return kOpNames[static_cast<int>(op)]; }
bool IsValidReduceOp(int v) { return v >= 0 && v < kNumReduceOps; }

StatusOr<ReduceOp> ParseReduceOp(const std::string& name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  }
  return InvalidArgumentError("unknown reduce op '" + name +
                              "' (known: sum prod min max avg band bor bxor)");
}

Status CheckReduceSupported(DataType t, ReduceOp op) {
  if (!IsValidDataType(static_cast<int>(t))) {
    return InvalidArgumentError("dtype value " + std::to_string(static_cast<int>(t)) +
                                " is not a gyre dtype");
  }
  if (!IsValidReduceOp(static_cast<int>(op))) {
    return InvalidArgumentError("reduce op value " + std::to_string(static_cast<int>(op)) +
                                " is not a gyre reduce op");
  }
  bool floating = IsFloating(t);
  if (op == ReduceOp::kAvg && !floating) {
    return InvalidArgumentError(std::string("reduce op avg is not defined on ") + DataTypeName(t) +
                                ": avg needs a floating dtype");
  }
  if ((op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) && floating) {
    return InvalidArgumentError(std::string("reduce op ") + ReduceOpName(op) +
                                " is not defined on " + DataTypeName(t) +
                                ": bitwise ops need an integer dtype");
  }
  return Status::Ok();
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return BitsFloat(bits);
}

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return sign | 0x7c00u | (mant ? 0x200u : 0u);  // inf / NaN
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;  // overflow to inf
  if (e <= 0) {
    if (e < -10) return sign;  // underflow to zero
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return sign | static_cast<uint16_t>(half_mant);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exp: ok
  return sign | static_cast<uint16_t>(half);
}

float Bfloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBfloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

double LoadAsDouble(DataType t, const void* data, size_t i) {
  switch (t) {
    case DataType::kInt8:
      return static_cast<const int8_t*>(data)[i];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case DataType::kUint32:
      return static_cast<const uint32_t*>(data)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DataType::kUint64:
      return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBfloat16:
      return Bfloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(data)[i];
  }
  return 0;
}

void StoreFromDouble(DataType t, void* data, size_t i, double v) {
  switch (t) {
    case DataType::kInt8:
      static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kUint8:
      static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kUint32:
      static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUint64:
      static_cast<uint64_t*>(data)[i] = static_cast<uint64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBfloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(data)[i] = v;
      break;
  }
}

}  // namespace gyre
