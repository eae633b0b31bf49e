// CUDA rotary embedding, the CPU backend's arithmetic: one thread per output element, each
// product and the sum rounded to the element type like the unfused expression (so f16/bf16
// results equal transformers' apply_rotary_pos_emb). One launch instead of the six of
// x * cos + cat(-x2, x1) * sin.
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

template <class T>
__global__ void rotary_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin, T* __restrict__ y,
                              int64_t total, int64_t length, int64_t dim) {
  using C = compute_t<T>;
  const int64_t half = dim / 2;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % dim, l = (idx / dim) % length, base = idx - i;
    const C rotated = i < half ? -static_cast<C>(x[base + i + half]) : static_cast<C>(x[base + i - half]);
    const C a = static_cast<C>(convert<T>(static_cast<C>(x[idx]) * static_cast<C>(cos[l * dim + i])));
    const C b = static_cast<C>(convert<T>(rotated * static_cast<C>(sin[l * dim + i])));
    y[idx] = convert<T>(a + b);
  }
}

}  // namespace

void rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  const int device = out.device().index;
  DeviceGuard guard(device);
  const int64_t total = x.numel(), length = x.size(1), dim = x.size(2);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || sizeof(T) == 1) {  // fp8 is refused by the front end
      fail("apply_rotary_emb", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      rotary_kernel<T><<<grid_for(total, kBlock, device), kBlock, 0, current_raw_stream(device)>>>(
          static_cast<const T*>(x.raw_data()), static_cast<const T*>(cos.raw_data()), static_cast<const T*>(sin.raw_data()),
          static_cast<T*>(out.raw_data()), total, length, dim);
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
