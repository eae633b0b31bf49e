// CUDA random numbers: the Philox streams of core/philox.h (EMBER_HD, the very code the CPU
// runs), one thread per Philox group, so element i depends only on (seed, i) and uniform and
// randint outputs equal the CPU's bit for bit. Normal numbers go through the device's double
// log/sqrt/sin/cos, which may differ from glibc's in the last bit of the double before the
// final rounding.
#include "core/philox.h"
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

template <class T> constexpr int format_digits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  else if constexpr (std::is_same_v<T, BFloat16>) return 8;
  else if constexpr (std::is_same_v<T, Float8_e4m3fn>) return 4;
  else return 3;
}

/// The 32-bit stream: n elements of T (float or a 16/8-bit float), groups of 4.
template <class T> __global__ void __launch_bounds__(kBlock) fill_32bit_kernel(bool normal, uint64_t seed, T* p, int64_t n) {
  const int64_t groups = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const philox::Words w = philox::group_words(seed, static_cast<uint64_t>(g));
    const int64_t first = g * 4, count = n - first < 4 ? n - first : 4;
    T* out = p + first;
    if (!normal) {
      for (int64_t k = 0; k < count; ++k) {
        if constexpr (std::is_same_v<T, float>) out[k] = philox::uniform_f32(w.w[k]);
        else out[k] = T(philox::uniform_digits(w.w[k], format_digits<T>()));
      }
    } else {
      for (int64_t k = 0; k < count; k += 2) {
        double z0, z1;
        philox::box_muller(philox::uniform_f32(w.w[k]), philox::uniform_f32(w.w[k + 1]), z0, z1);
        out[k] = T(static_cast<float>(z0));
        if (k + 1 < count) out[k + 1] = T(static_cast<float>(z1));
      }
    }
  }
}

/// The 64-bit stream: n doubles, groups of 2.
__global__ void __launch_bounds__(kBlock) fill_64bit_kernel(bool normal, uint64_t seed, double* p, int64_t n) {
  const int64_t groups = (n + 1) / 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const philox::Words w = philox::group_words(seed, static_cast<uint64_t>(g));
    double u0 = philox::uniform_f64(philox::word64(w, 0)), u1 = philox::uniform_f64(philox::word64(w, 1));
    if (normal) philox::box_muller(u0, u1, u0, u1);
    p[2 * g] = u0;
    if (2 * g + 1 < n) p[2 * g + 1] = u1;
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) randint_kernel(int64_t low, int64_t high, uint64_t seed, T* p, int64_t n) {
  const int64_t groups = (n + 1) / 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const philox::Words w = philox::group_words(seed, static_cast<uint64_t>(g));
    for (int k = 0; k < 2 && 2 * g + k < n; ++k) p[2 * g + k] = convert<T>(philox::randint_value(philox::word64(w, k), low, high));
  }
}

/// Runs body(contiguous) on out itself when contiguous, else on a contiguous buffer copied back.
template <class Body> void with_contiguous(const Tensor& out, Body&& body) {
  if (out.is_contiguous()) {
    body(out);
    return;
  }
  const Tensor tmp = empty(out.sizes(), out.dtype(), out.device());
  body(tmp);
  copy(tmp, out);
}

}  // namespace

void random(RandomKind kind, uint64_t seed, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  const int device = out.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  const bool normal = kind == RandomKind::Normal;
  with_contiguous(out, [&](const Tensor& c) {
    const int64_t n = c.numel();
    dispatch(c.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, double> || std::is_same_v<T, complex128>) {
        const int64_t count = std::is_same_v<T, double> ? n : 2 * n;
        fill_64bit_kernel<<<grid_for((count + 1) / 2, kBlock, device), kBlock, 0, stream>>>(normal, seed, static_cast<double*>(c.raw_data()), count);
      } else if constexpr (std::is_same_v<T, complex64>) {
        fill_32bit_kernel<float><<<grid_for((2 * n + 3) / 4, kBlock, device), kBlock, 0, stream>>>(normal, seed, static_cast<float*>(c.raw_data()), 2 * n);
      } else if constexpr (is_float_v<T>) {
        fill_32bit_kernel<T><<<grid_for((n + 3) / 4, kBlock, device), kBlock, 0, stream>>>(normal, seed, static_cast<T*>(c.raw_data()), n);
      } else {
        fail("random", "dtype: expected a floating or complex type, got {}", name(c.dtype()));
      }
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void randint(int64_t low, int64_t high, uint64_t seed, const Tensor& out) {
  EMBER_CHECK(low < high, "randint", "range [low, high): expected low < high, got [{}, {})", low, high);
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  const int device = out.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  with_contiguous(out, [&](const Tensor& c) {
    const int64_t n = c.numel();
    dispatch(c.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_complex_v<T>) {
        fail("randint", "dtype: expected a real type, got {}", name(c.dtype()));
      } else {
        randint_kernel<T><<<grid_for((n + 1) / 2, kBlock, device), kBlock, 0, stream>>>(low, high, seed, static_cast<T*>(c.raw_data()), n);
        EMBER_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace ember::cuda
