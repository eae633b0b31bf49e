// CUDA rms_norm over rows of a contiguous [R, N] matrix, the CPU backend's arithmetic: the sum of
// squares (float; double for f64), r = rsqrt(mean + eps) in the compute type, y = (x * r) * w
// rounded once. One warp per row for N <= 2048 (the per-head q/k norms: many short rows), one
// block per row above (the hidden-state norms of decode: a few rows of 2048-8192). The second
// pass re-reads the row from L1/L2.
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

constexpr int kNormBlock = 256;
constexpr int64_t kWarpRowMax = 2048;

template <class T> using norm_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__device__ void write_row(const T* x, const T* w, T* y, int64_t n, compute_t<T> scale, int first, int step) {
  using C = compute_t<T>;
  for (int64_t i = first; i < n; i += step) {
    const C v = static_cast<C>(x[i]) * scale;
    y[i] = convert<T>(w ? v * static_cast<C>(w[i]) : v);
  }
}

template <class T>
__device__ compute_t<T> row_scale(norm_acc_t<T> sum, int64_t n, double eps) {
  using C = compute_t<T>;
  return C(1) / sqrt(static_cast<C>(sum / static_cast<norm_acc_t<T>>(n)) + static_cast<C>(eps));
}

template <class T>
__global__ void __launch_bounds__(kNormBlock) rms_norm_warp_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                                                int64_t rows, int64_t n, double eps) {
  using A = norm_acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kNormBlock / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kNormBlock / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const T* xr = x + r * n;
    A sum = 0;
    for (int64_t i = lane; i < n; i += 32) {
      const A v = static_cast<A>(static_cast<compute_t<T>>(xr[i]));
      sum += v * v;
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    write_row(xr, w, y + r * n, n, row_scale<T>(sum, n, eps), lane, 32);
  }
}

template <class T>
__global__ void __launch_bounds__(kNormBlock) rms_norm_block_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                                                 int64_t rows, int64_t n, double eps) {
  using A = norm_acc_t<T>;
  __shared__ A total;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    A sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += kNormBlock) {
      const A v = static_cast<A>(static_cast<compute_t<T>>(xr[i]));
      sum += v * v;
    }
    sum = block_reduce(sum, [](A p, A q) { return p + q; });
    if (threadIdx.x == 0) total = sum;
    __syncthreads();
    write_row(xr, w, y + r * n, n, row_scale<T>(total, n, eps), threadIdx.x, kNormBlock);
    __syncthreads();  // `total` is rewritten by the next row
  }
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& out) {
  const int device = out.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_raw_stream(device);
  const int64_t rows = x.size(0), n = x.size(1);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || sizeof(T) == 1) {  // fp8 is refused by the front end
      fail("rms_norm", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      const T* xp = static_cast<const T*>(x.raw_data());
      const T* wp = weight.defined() ? static_cast<const T*>(weight.raw_data()) : nullptr;
      T* yp = static_cast<T*>(out.raw_data());
      if (n <= kWarpRowMax) {
        rms_norm_warp_rows<T><<<grid_for(rows, kNormBlock / 32, device), kNormBlock, 0, stream>>>(xp, wp, yp, rows, n, eps);
      } else {
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, int64_t{device_properties(device).multiProcessorCount} * 16));
        rms_norm_block_rows<T><<<blocks, kNormBlock, 0, stream>>>(xp, wp, yp, rows, n, eps);
      }
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
