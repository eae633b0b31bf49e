// Device dtype dispatch, element types and conversions for the CUDA kernels.
//
//   dispatch(x.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; launch<T>(...); });
//
// mirrors cpu::dispatch, except that complex elements are cuda::std::complex (same layout as
// std::complex, usable in device code). Device code cannot define __device__ lambdas inside the
// generic dispatch lambdas, so kernels take functor structs.
#pragma once
#include <cuda/std/complex>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend.h"
#include "core/dtype_dispatch.h"
#include "cuda/allocator.h"
#include "cuda/runtime.h"
#include "ember/dtype.h"
#include "ember/error.h"

namespace ember::cuda {

using complex64 = ::cuda::std::complex<float>;
using complex128 = ::cuda::std::complex<double>;
static_assert(sizeof(complex64) == sizeof(std::complex<float>) && sizeof(complex128) == sizeof(std::complex<double>));

using ember::type_tag;

template <class F> decltype(auto) dispatch(DType d, F&& f) {
  return dispatch_dtype<complex64, complex128>(d, std::forward<F>(f));
}

/// The element type of a dtype as bits only: an unsigned integer (or a 16-byte struct) of its
/// size, for kernels that move elements without looking at them.
struct alignas(16) Bits128 { uint64_t lo, hi; };
template <class F> decltype(auto) dispatch_bits(DType d, F&& f) {
  switch (itemsize(d)) {
    case 1: return f(type_tag<uint8_t>{});
    case 2: return f(type_tag<uint16_t>{});
    case 4: return f(type_tag<uint32_t>{});
    case 8: return f(type_tag<uint64_t>{});
    default: return f(type_tag<Bits128>{});
  }
}

template <class T> inline constexpr bool is_complex_v = false;
template <class T> inline constexpr bool is_complex_v<::cuda::std::complex<T>> = true;
/// The 16- and 8-bit float types, which compute in float.
template <class T> inline constexpr bool is_low_float_v =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8_e4m3fn> ||
    std::is_same_v<T, Float8_e5m2>;
/// Real floating types (f16, bf16, f32, f64, fp8).
template <class T> inline constexpr bool is_float_v = is_low_float_v<T> || std::is_floating_point_v<T>;
/// Real floating or complex.
template <class T> inline constexpr bool is_inexact_v = is_float_v<T> || is_complex_v<T>;

/// The type arithmetic on T is done in: float for the 16/8-bit floats, T otherwise.
template <class T> using compute_t = std::conditional_t<is_low_float_v<T>, float, T>;

namespace detail {
// Float -> integer truncation as the CPU backend's x86-64 build performs it (c10 uses plain
// static_cast there): a 32-bit signed conversion for targets up to 32 bits wide whose values
// fit in int, a 64-bit one otherwise; NaN and out-of-range give the "integer indefinite" value
// (INT_MIN / INT64_MIN), and narrower targets keep the low bits. CUDA's own conversion
// saturates instead, so the device reproduces the host's wrap-around explicitly.
template <class F> __host__ __device__ inline int32_t x86_trunc_i32(F v) {
  if (!(v >= F(-2147483648.0)) || !(v < F(2147483648.0))) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}
template <class F> __host__ __device__ inline int64_t x86_trunc_i64(F v) {
  if (!(v >= F(-9223372036854775808.0)) || !(v < F(9223372036854775808.0))) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}
// gcc's uint64 conversion: values from 2^63 up convert after subtracting 2^63, with the top
// bit set back; everything else (NaN and negative values included) converts signed.
template <class F> __host__ __device__ inline uint64_t x86_trunc_u64(F v) {
  if (!(v >= F(9223372036854775808.0))) return static_cast<uint64_t>(x86_trunc_i64(v));
  return static_cast<uint64_t>(x86_trunc_i64(v - F(9223372036854775808.0))) ^ 0x8000000000000000ull;
}
template <class To, class F> __host__ __device__ inline To float_to_int(F v) {
  if constexpr (std::is_same_v<To, int64_t>) return x86_trunc_i64(v);
  else if constexpr (std::is_same_v<To, uint64_t>) return x86_trunc_u64(v);
  else if constexpr (std::is_same_v<To, uint32_t>) return static_cast<uint32_t>(x86_trunc_i64(v));
  else return static_cast<To>(x86_trunc_i32(v));
}
}  // namespace detail

/// torch's element conversion as cpu::convert performs it: complex -> real takes the real part,
/// anything -> bool is "!= 0", the 16/8-bit floats go through float.
template <class To, class From> __host__ __device__ inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
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
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return detail::float_to_int<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

/// Products and sums that nvcc may not contract into fused multiply-adds (it does by default;
/// the CPU build does not), for results that must match the CPU bit for bit.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }

/// v != 0 as the CPU backend tests it: both parts of a complex number count.
template <class T> __host__ __device__ inline bool nonzero(T v) {
  if constexpr (is_complex_v<T>) return v.real() != 0 || v.imag() != 0;
  else return convert<bool>(v);
}

/// Loads the element at p, whose dtype is only known at run time, converted to Out.
template <class Out> __device__ Out load_converted(const char* p, DType d) {
  switch (d) {
    case DType::Bool: return convert<Out>(*reinterpret_cast<const bool*>(p));
    case DType::UInt8: return convert<Out>(*reinterpret_cast<const uint8_t*>(p));
    case DType::Int8: return convert<Out>(*reinterpret_cast<const int8_t*>(p));
    case DType::UInt16: return convert<Out>(*reinterpret_cast<const uint16_t*>(p));
    case DType::Int16: return convert<Out>(*reinterpret_cast<const int16_t*>(p));
    case DType::UInt32: return convert<Out>(*reinterpret_cast<const uint32_t*>(p));
    case DType::Int32: return convert<Out>(*reinterpret_cast<const int32_t*>(p));
    case DType::UInt64: return convert<Out>(*reinterpret_cast<const uint64_t*>(p));
    case DType::Int64: return convert<Out>(*reinterpret_cast<const int64_t*>(p));
    case DType::Float16: return convert<Out>(*reinterpret_cast<const Half*>(p));
    case DType::BFloat16: return convert<Out>(*reinterpret_cast<const BFloat16*>(p));
    case DType::Float32: return convert<Out>(*reinterpret_cast<const float*>(p));
    case DType::Float64: return convert<Out>(*reinterpret_cast<const double*>(p));
    case DType::Complex64: return convert<Out>(*reinterpret_cast<const complex64*>(p));
    case DType::Complex128: return convert<Out>(*reinterpret_cast<const complex128*>(p));
    case DType::Float8_e4m3fn: return convert<Out>(*reinterpret_cast<const Float8_e4m3fn*>(p));
    case DType::Float8_e5m2: return convert<Out>(*reinterpret_cast<const Float8_e5m2*>(p));
  }
  return Out{};
}

/// Stores v converted to the run-time dtype d at p.
template <class V> __device__ void store_converted(char* p, DType d, V v) {
  switch (d) {
    case DType::Bool: *reinterpret_cast<bool*>(p) = convert<bool>(v); return;
    case DType::UInt8: *reinterpret_cast<uint8_t*>(p) = convert<uint8_t>(v); return;
    case DType::Int8: *reinterpret_cast<int8_t*>(p) = convert<int8_t>(v); return;
    case DType::UInt16: *reinterpret_cast<uint16_t*>(p) = convert<uint16_t>(v); return;
    case DType::Int16: *reinterpret_cast<int16_t*>(p) = convert<int16_t>(v); return;
    case DType::UInt32: *reinterpret_cast<uint32_t*>(p) = convert<uint32_t>(v); return;
    case DType::Int32: *reinterpret_cast<int32_t*>(p) = convert<int32_t>(v); return;
    case DType::UInt64: *reinterpret_cast<uint64_t*>(p) = convert<uint64_t>(v); return;
    case DType::Int64: *reinterpret_cast<int64_t*>(p) = convert<int64_t>(v); return;
    case DType::Float16: *reinterpret_cast<Half*>(p) = convert<Half>(v); return;
    case DType::BFloat16: *reinterpret_cast<BFloat16*>(p) = convert<BFloat16>(v); return;
    case DType::Float32: *reinterpret_cast<float*>(p) = convert<float>(v); return;
    case DType::Float64: *reinterpret_cast<double*>(p) = convert<double>(v); return;
    case DType::Complex64: *reinterpret_cast<complex64*>(p) = convert<complex64>(v); return;
    case DType::Complex128: *reinterpret_cast<complex128*>(p) = convert<complex128>(v); return;
    case DType::Float8_e4m3fn: *reinterpret_cast<Float8_e4m3fn*>(p) = convert<Float8_e4m3fn>(v); return;
    case DType::Float8_e5m2: *reinterpret_cast<Float8_e5m2*>(p) = convert<Float8_e5m2>(v); return;
  }
}

/// Warp shuffle of any trivially copyable value, word by word.
template <class T> __device__ T shfl_down(T v, int delta) {
  if constexpr (sizeof(T) < 4) {
    return static_cast<T>(__shfl_down_sync(0xFFFFFFFFu, static_cast<int>(v), delta));
  } else {
    static_assert(sizeof(T) % 4 == 0);
    uint32_t words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) words[i] = __shfl_down_sync(0xFFFFFFFFu, words[i], delta);
    memcpy(&v, words, sizeof(T));
    return v;
  }
}

/// Reduces one value per thread over the block with combine(a, b); the result is valid in
/// thread 0. blockDim.x must be a multiple of 32 (at most 1024). Fixed order: deterministic.
template <class T, class Combine> __device__ T block_reduce(T v, Combine combine) {
  __shared__ alignas(16) unsigned char storage[32 * sizeof(T)];
  T* partial = reinterpret_cast<T*>(storage);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = combine(v, shfl_down(v, d));
  __syncthreads();  // storage may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : partial[0];
    for (int d = 16; d > 0; d /= 2) {
      const T other = shfl_down(v, d);
      if (lane + d < warps) v = combine(v, other);
    }
  }
  return v;
}

/// NaN test for any element type (false for integers and bool).
template <class T> __host__ __device__ inline bool is_nan(T v) {
  if constexpr (is_complex_v<T>) return v.real() != v.real() || v.imag() != v.imag();
  else if constexpr (is_float_v<T>) { const compute_t<T> c = static_cast<compute_t<T>>(v); return c != c; }
  else return false;
}

/// Host value -> device element type (Scalar::to for the std::complex types, then the layout-
/// compatible cuda::std::complex).
template <class T> T scalar_to(const Scalar& s) {
  if constexpr (is_complex_v<T>) {
    using V = typename T::value_type;
    const auto c = s.to<std::complex<V>>();
    return T(c.real(), c.imag());
  } else {
    return s.to<T>();
  }
}

/// Records an out-of-range index in the device error word (first error wins) so the host
/// throws at its next synchronisation; the kernel skips the element.
__device__ inline void record_index_error(DeviceError* error, long long value, long long bound) {
  if (atomicCAS(&error->code, kNoDeviceError, kIndexOutOfRange) == kNoDeviceError) {
    error->value = value;
    error->bound = bound;
  }
}

/// Scratch device memory from the caching allocator, released (stream-ordered) at scope end.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t nbytes, Device device) : device_(device), ptr_(allocate(nbytes, device)) {}
  ~DeviceBuffer() { deallocate(ptr_, device_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = void> T* get() const { return static_cast<T*>(ptr_); }

 private:
  Device device_;
  void* ptr_;
};

/// Blocks for a grid-stride loop over n items: enough to fill every SM several times.
inline unsigned grid_for(int64_t n, int block, int device) {
  const int64_t wanted = (n + block - 1) / block;
  const int64_t cap = static_cast<int64_t>(device_properties(device).multiProcessorCount) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

}  // namespace ember::cuda
