// dtype.h — element types a Tensor can hold. f64 exists so that every CPU kernel can run
// in double (--precision fp64) and parallel layouts can be compared exactly
// (docs/architecture.md §7).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace sm {

enum class DType : uint8_t { F32, F64, BF16, F16, U8, I32, I64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "f32"/"fp32"/"float32", ...; throws Input

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };

}  // namespace sm
