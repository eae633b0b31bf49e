// The one switch from a DType to its element type, shared by the CPU and CUDA backends. Each
// backend names its complex types (std::complex on the CPU, cuda::std::complex on the device);
// everything else is the same C++ type on both.
#pragma once
#include "ember/dtype.h"
#include "ember/error.h"

namespace ember {

template <class T> struct type_tag { using type = T; };

template <class Complex64, class Complex128, class F> decltype(auto) dispatch_dtype(DType d, F&& f) {
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
    case DType::Complex64: return f(type_tag<Complex64>{});
    case DType::Complex128: return f(type_tag<Complex128>{});
    case DType::Float8_e4m3fn: return f(type_tag<Float8_e4m3fn>{});
    case DType::Float8_e5m2: return f(type_tag<Float8_e5m2>{});
  }
  fail("dispatch", "dtype: expected one of the 17 ember dtypes, got code {}", static_cast<int>(d));
}

}  // namespace ember
