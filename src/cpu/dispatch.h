// CPU dtype dispatch and element conversions.
//
//   dispatch(x.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
//
// calls the lambda with the element type of each of the 17 dtypes; ops that support only some
// types reject the rest with `if constexpr` (or check in the front end, which is preferred).
#pragma once
#include <complex>
#include <type_traits>

#include "ember/dtype.h"
#include "ember/error.h"

namespace ember::cpu {

template <class T> struct type_tag { using type = T; };

template <class F> decltype(auto) dispatch(DType d, F&& f) {
  switch (d) {
    case DType::Bool: return f(type_tag<bool>{});
    case DType::UInt8: return f(type_tag<uint8_t>{});
    case DType::Int8: return f(type_tag<int8_t>{});
    case DType::UInt16: return f(type_tag<uint16_t>{});
    case DType::Int16: return f(type_tag<int16_t>{});
    case DType::UInt32: return f(type_tag<uint32_t>{});
    case DType::Int32: return f(type_tag<int32_t>{});
    case DType::UInt64: return f(type_tag<uint64_t>{});
    case DType::Int64: return f(type_tag<int64_t>{});
    case DType::Float16: return f(type_tag<Half>{});
    case DType::BFloat16: return f(type_tag<BFloat16>{});
    case DType::Float32: return f(type_tag<float>{});
    case DType::Float64: return f(type_tag<double>{});
    case DType::Complex64: return f(type_tag<std::complex<float>>{});
    case DType::Complex128: return f(type_tag<std::complex<double>>{});
    case DType::Float8_e4m3fn: return f(type_tag<Float8_e4m3fn>{});
    case DType::Float8_e5m2: return f(type_tag<Float8_e5m2>{});
  }
  fail("dispatch", "dtype: expected one of the 17 ember dtypes, got code {}", static_cast<int>(d));
}

template <class T> inline constexpr bool is_complex_v = false;
template <class T> inline constexpr bool is_complex_v<std::complex<T>> = true;
/// The 16- and 8-bit float types, which compute in float.
template <class T> inline constexpr bool is_low_float_v =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8_e4m3fn> ||
    std::is_same_v<T, Float8_e5m2>;
template <class T> inline constexpr bool is_float_v = is_low_float_v<T> || std::is_floating_point_v<T>;

/// The type arithmetic on T is done in: float for the 16/8-bit floats, T otherwise.
template <class T> using compute_t = std::conditional_t<is_low_float_v<T>, float, T>;

/// torch's element conversion (c10::convert): complex -> real takes the real part, anything ->
/// bool is "!= 0" (complex: either part), the 16/8-bit floats go through float.
template <class To, class From> To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<From> && std::is_same_v<To, bool>) {
    return v.real() != 0 || v.imag() != 0;
  } else if constexpr (is_complex_v<From> && !is_complex_v<To>) {
    return convert<To>(v.real());
  } else if constexpr (is_low_float_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_low_float_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (is_complex_v<To> && is_complex_v<From>) {
    return To(static_cast<typename To::value_type>(v.real()), static_cast<typename To::value_type>(v.imag()));
  } else if constexpr (is_complex_v<To>) {
    return To(static_cast<typename To::value_type>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace ember::cpu
