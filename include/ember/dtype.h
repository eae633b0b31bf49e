// Element types, their sizes and names, and torch's type-promotion rules.
#pragma once
#include <complex>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/scalar_types.h"

namespace ember {

enum class DType : uint8_t { Bool, UInt8, Int8, UInt16, Int16, UInt32, Int32, UInt64, Int64,
                             Float16, BFloat16, Float32, Float64, Complex64, Complex128,
                             Float8_e4m3fn, Float8_e5m2 };
inline constexpr int kNumDTypes = 17;

inline constexpr DType kBool = DType::Bool, kUInt8 = DType::UInt8, kInt8 = DType::Int8,
    kUInt16 = DType::UInt16, kInt16 = DType::Int16, kUInt32 = DType::UInt32,
    kInt32 = DType::Int32, kUInt64 = DType::UInt64, kInt64 = DType::Int64,
    kFloat16 = DType::Float16, kHalf = DType::Float16, kBFloat16 = DType::BFloat16,
    kFloat32 = DType::Float32, kFloat = DType::Float32, kFloat64 = DType::Float64,
    kDouble = DType::Float64, kComplex64 = DType::Complex64, kComplex128 = DType::Complex128,
    kFloat8_e4m3fn = DType::Float8_e4m3fn, kFloat8_e5m2 = DType::Float8_e5m2;

/// Bytes per element.
size_t itemsize(DType);
/// torch's spelling: "float8_e4m3fn", "bfloat16", "uint16", ...
std::string_view name(DType);
/// Parses torch's spelling (and safetensors' "F32", "BF16", "F8_E4M3", ...); throws ember::Error.
DType dtype_from_name(std::string_view);

bool is_floating_point(DType);  // f16, bf16, f32, f64, fp8 (torch.is_floating_point)
bool is_complex(DType);
bool is_integral(DType, bool include_bool = false);
bool is_unsigned(DType);        // bool, uint8..uint64
bool is_fp8(DType);

/// torch.promote_types; throws ember::Error where torch refuses (fp8 with another type,
/// uint16/32/64 with a signed or narrower integer, ...).
DType promote_types(DType a, DType b);
/// The real type of a complex type (complex64 -> float32); other types map to themselves.
DType to_real(DType);
/// float32 -> complex64, float64 -> complex128, half types -> complex64.
DType to_complex(DType);

/// The C++ type that stores one element of each dtype.
template <DType D> struct dtype_cpp;
#define EMBER_DTYPE_CPP(D, T) template <> struct dtype_cpp<D> { using type = T; };
EMBER_DTYPE_CPP(DType::Bool, bool) EMBER_DTYPE_CPP(DType::UInt8, uint8_t)
EMBER_DTYPE_CPP(DType::Int8, int8_t) EMBER_DTYPE_CPP(DType::UInt16, uint16_t)
EMBER_DTYPE_CPP(DType::Int16, int16_t) EMBER_DTYPE_CPP(DType::UInt32, uint32_t)
EMBER_DTYPE_CPP(DType::Int32, int32_t) EMBER_DTYPE_CPP(DType::UInt64, uint64_t)
EMBER_DTYPE_CPP(DType::Int64, int64_t) EMBER_DTYPE_CPP(DType::Float16, Half)
EMBER_DTYPE_CPP(DType::BFloat16, BFloat16) EMBER_DTYPE_CPP(DType::Float32, float)
EMBER_DTYPE_CPP(DType::Float64, double) EMBER_DTYPE_CPP(DType::Complex64, std::complex<float>)
EMBER_DTYPE_CPP(DType::Complex128, std::complex<double>)
EMBER_DTYPE_CPP(DType::Float8_e4m3fn, Float8_e4m3fn) EMBER_DTYPE_CPP(DType::Float8_e5m2, Float8_e5m2)
#undef EMBER_DTYPE_CPP

/// The dtype of a C++ element type (the inverse of dtype_cpp).
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return kBool; }
template <> constexpr DType dtype_of<uint8_t>() { return kUInt8; }
template <> constexpr DType dtype_of<int8_t>() { return kInt8; }
template <> constexpr DType dtype_of<uint16_t>() { return kUInt16; }
template <> constexpr DType dtype_of<int16_t>() { return kInt16; }
template <> constexpr DType dtype_of<uint32_t>() { return kUInt32; }
template <> constexpr DType dtype_of<int32_t>() { return kInt32; }
template <> constexpr DType dtype_of<uint64_t>() { return kUInt64; }
template <> constexpr DType dtype_of<int64_t>() { return kInt64; }
template <> constexpr DType dtype_of<Half>() { return kFloat16; }
template <> constexpr DType dtype_of<BFloat16>() { return kBFloat16; }
template <> constexpr DType dtype_of<float>() { return kFloat32; }
template <> constexpr DType dtype_of<double>() { return kFloat64; }
template <> constexpr DType dtype_of<std::complex<float>>() { return kComplex64; }
template <> constexpr DType dtype_of<std::complex<double>>() { return kComplex128; }
template <> constexpr DType dtype_of<Float8_e4m3fn>() { return kFloat8_e4m3fn; }
template <> constexpr DType dtype_of<Float8_e5m2>() { return kFloat8_e5m2; }

}  // namespace ember
