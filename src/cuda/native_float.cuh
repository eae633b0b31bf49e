// float <-> the CUDA native 16-bit float types, for kernels that work on raw __half /
// __nv_bfloat16 buffers (GEMV, FP8 GEMV, decode softmax). Device code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ember::cuda {

template <class T> __device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <class T> __device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }

}  // namespace ember::cuda
