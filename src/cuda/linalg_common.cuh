// Shared by the CUDA linear algebra files (linalg*.cu): element arithmetic for the four LAPACK
// types (float, double and a two-word complex with the layout of cuComplex and std::complex), the
// dtype dispatch, column-major batch descriptors and the device guard.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend.h"
#include "core/shape.h"
#include "cuda/runtime.h"

namespace ember::cuda::linalg_detail {

/// A complex number laid out like cuComplex / cuDoubleComplex / std::complex.
template <class R> struct alignas(2 * sizeof(R)) Cx {
  R re, im;
};

template <class T> struct RealOf { using type = T; };
template <class R> struct RealOf<Cx<R>> { using type = R; };
template <class T> using real_t = typename RealOf<T>::type;
template <class T> inline constexpr bool is_cx = false;
template <class R> inline constexpr bool is_cx<Cx<R>> = true;

template <class R> __host__ __device__ __forceinline__ Cx<R> operator+(Cx<R> a, Cx<R> b) { return {a.re + b.re, a.im + b.im}; }
template <class R> __host__ __device__ __forceinline__ Cx<R> operator-(Cx<R> a, Cx<R> b) { return {a.re - b.re, a.im - b.im}; }
template <class R> __host__ __device__ __forceinline__ Cx<R> operator-(Cx<R> a) { return {-a.re, -a.im}; }
template <class R> __host__ __device__ __forceinline__ Cx<R> operator*(Cx<R> a, Cx<R> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <class R> __host__ __device__ __forceinline__ Cx<R> operator*(Cx<R> a, R s) { return {a.re * s, a.im * s}; }

__host__ __device__ __forceinline__ float conj_of(float x) { return x; }
__host__ __device__ __forceinline__ double conj_of(double x) { return x; }
template <class R> __host__ __device__ __forceinline__ Cx<R> conj_of(Cx<R> z) { return {z.re, -z.im}; }
/// conj(z) when `conjugate`, else z.
template <class T> __host__ __device__ __forceinline__ T conj_if(T z, bool conjugate) { return conjugate ? conj_of(z) : z; }

/// LAPACK's pivot score: |x| for reals, |re| + |im| for complex (icamax / izamax).
__device__ __forceinline__ float cabs1(float x) { return fabsf(x); }
__device__ __forceinline__ double cabs1(double x) { return fabs(x); }
template <class R> __device__ __forceinline__ R cabs1(Cx<R> z) { return abs(z.re) + abs(z.im); }

__device__ __forceinline__ float abs_of(float x) { return fabsf(x); }
__device__ __forceinline__ double abs_of(double x) { return fabs(x); }
template <class R> __device__ __forceinline__ R abs_of(Cx<R> z) { return hypot(z.re, z.im); }

__device__ __forceinline__ float abs2(float x) { return x * x; }
__device__ __forceinline__ double abs2(double x) { return x * x; }
template <class R> __device__ __forceinline__ R abs2(Cx<R> z) { return z.re * z.re + z.im * z.im; }

template <class T> __host__ __device__ __forceinline__ bool is_zero(T x) {
  if constexpr (is_cx<T>) {
    return x.re == 0 && x.im == 0;
  } else {
    return x == 0;
  }
}

template <class T> __host__ __device__ __forceinline__ T from_real(real_t<T> r) {
  if constexpr (is_cx<T>) {
    return T{r, 0};
  } else {
    return r;
  }
}

/// a / b (Smith's algorithm for complex, which avoids overflow in |b|^2).
__device__ __forceinline__ float div_of(float a, float b) { return a / b; }
__device__ __forceinline__ double div_of(double a, double b) { return a / b; }
template <class R> __device__ __forceinline__ Cx<R> div_of(Cx<R> a, Cx<R> b) {
  if (abs(b.re) >= abs(b.im)) {
    const R r = b.im / b.re, d = b.re + b.im * r;
    return {(a.re + a.im * r) / d, (a.im - a.re * r) / d};
  }
  const R r = b.re / b.im, d = b.re * r + b.im;
  return {(a.re * r + a.im) / d, (a.im * r - a.re) / d};
}
template <class T> __device__ __forceinline__ T recip(T x) { return div_of(from_real<T>(1), x); }

/// x / pivot as LAPACK's getf2 scales a column: times the reciprocal when |pivot| >= the safe
/// minimum, divided otherwise.
template <class T> __device__ __forceinline__ T scale_by_pivot(T x, T pivot, T pivot_recip) {
  using R = real_t<T>;
  constexpr R kSafeMin = std::is_same_v<R, float> ? 1.17549435e-38f : 2.2250738585072014e-308;
  return abs_of(pivot) >= kSafeMin ? x * pivot_recip : div_of(x, pivot);
}

template <class T> struct Tag { using type = T; };

/// Calls f(Tag<T>) for the element type of a LAPACK dtype (f32, f64, complex64, complex128).
template <class F> void dispatch_lapack(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat32: return f(Tag<float>{});
    case kFloat64: return f(Tag<double>{});
    case kComplex64: return f(Tag<Cx<float>>{});
    case kComplex128: return f(Tag<Cx<double>>{});
    default: fail(op, "dtype: expected float32, float64, complex64 or complex128, got {}", name(dtype));
  }
}

/// A batch of matrices: element (b, r, c) at base[b * batch + r * row + c * col].
template <class T> struct Mat {
  T* base;
  int64_t batch, row, col;
  __host__ __device__ __forceinline__ T& at(int64_t b, int64_t r, int64_t c) const {
    return base[b * batch + r * row + c * col];
  }
};
template <class T> Mat<T> mat_of(const Tensor& x) {
  return {static_cast<T*>(x.raw_data()), x.stride(0), x.stride(1), x.stride(2)};
}

/// Checks that x is a column-major batch [B, rows, cols] (strides (.., 1, ld >= rows)) and returns
/// its leading dimension.
inline int64_t column_major_ld(const Tensor& x, const char* op) {
  EMBER_CHECK(x.dim() == 3 && (x.stride(1) == 1 || x.size(1) <= 1) && x.stride(2) >= std::max<int64_t>(1, x.size(1)),
              op, "backend operand layout: expected a column-major batch [B, rows, cols], got strides {}",
              shape_str(x.strides()));
  return std::max<int64_t>(1, x.stride(2));
}

/// Makes `device` current for a scope (kernels and library calls go to the current device).
class DeviceScope {
 public:
  explicit DeviceScope(Device device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device.index) EMBER_CUDA_CHECK(cudaSetDevice(device.index));
    device_ = device.index;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0, device_ = 0;
};

/// Records an out-of-range pivot in the device error word (the first error wins).
__device__ __forceinline__ void report_bad_pivot(DeviceError* error, int pivot, int n) {
  if (atomicCAS(&error->code, 0, static_cast<int>(kIndexOutOfRange)) == 0) {
    error->value = pivot;
    error->bound = n;
  }
}

inline unsigned blocks_for(int64_t work, int threads) {
  return static_cast<unsigned>((work + threads - 1) / threads);
}

// ---- small-matrix kernels (linalg_small*.cu): square n <= kSmallN, any batch ------------------
inline constexpr int64_t kSmallN = 16;
/// LU with partial pivoting of each n x n LU[b] (column-major, n <= kSmallN) in place.
void small_lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info);
/// lu_solve for n <= kSmallN (pivots validated on the device).
void small_lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate);
/// X = inverse of A (any strides, n <= kSmallN) by Gauss-Jordan with LAPACK's partial pivoting.
void small_inv(const Tensor& A, const Tensor& X, const Tensor& info);
/// LU of column-major m x n matrices with m, n <= kMediumN, one thread block per matrix in
/// shared memory.
inline constexpr int64_t kMediumN = 64;
void medium_lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info);
/// triangular_solve for n <= kMediumN (linalg_triangular.cu): A [B, n, n] and X [B, n, k] (left)
/// or [B, k, n] (right), any strides; X is overwritten with the solution.
void small_triangular_solve(const Tensor& A, const Tensor& X, bool upper, bool left, bool unitriangular);

}  // namespace ember::cuda::linalg_detail
