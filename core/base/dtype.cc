#include "core/base/dtype.h"

#include <cmath>
#include <cstring>

#include "core/base/half.h"

namespace gyre {
namespace {

const char* const kTypeNames[kNumDataTypes] = {"int8",    "uint8",  "int32",   "uint32",
                                               "int64",   "uint64", "float16", "bfloat16",
                                               "float32", "float64"};
const size_t kTypeSizes[kNumDataTypes] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
const char* const kOpNames[kNumReduceOps] = {"sum", "prod", "min", "max",
                                             "avg", "band", "bor", "bxor"};

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

float HalfToFloat(uint16_t h) { return half::HalfBitsToFloat(h); }
uint16_t FloatToHalf(float f) { return half::FloatToHalfBits(f); }
float Bfloat16ToFloat(uint16_t b) { return half::Bfloat16BitsToFloat(b); }
uint16_t FloatToBfloat16(float f) { return half::FloatToBfloat16Bits(f); }

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
