// dtype.cpp — sizes and names of element types.
#include "spikemesh/core/dtype.h"

#include "spikemesh/core/error.h"

namespace sm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::U8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "fp32" || n == "float32") return DType::F32;
  if (n == "f64" || n == "fp64" || n == "float64") return DType::F64;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  if (n == "f16" || n == "fp16" || n == "float16") return DType::F16;
  if (n == "u8" || n == "uint8") return DType::U8;
  if (n == "i32" || n == "int32") return DType::I32;
  if (n == "i64" || n == "int64") return DType::I64;
  SM_INPUT_ERROR("unknown dtype '" << n << "' (valid: fp32, fp64, bf16, fp16, u8, i32, i64)");
}

}  // namespace sm
