// float <-> the CUDA native 16-bit float types, for kernels that work on raw __half /
// __nv_bfloat16 buffers (GEMV, FP8 GEMV, decode softmax), and 16 FP8 codes -> floats. Device code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace ember::cuda {

template <class T> __device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <class T> __device__ __forceinline__ T from_float(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }

/// 4 FP8 codes (one 32-bit word, low byte first) -> f[0..3], two at a time through the hardware
/// fp8x2 -> half2 converter (exact: e4m3 and e5m2 fit f16).
template <__nv_fp8_interpretation_t kFormat = __NV_E4M3> __device__ __forceinline__ void decode_fp8x4(uint32_t word, float* f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * h)), kFormat)));
    f[2 * h] = v.x;
    f[2 * h + 1] = v.y;
  }
}

/// 16 FP8 codes (one 16-byte load, low byte first) -> 16 floats.
template <__nv_fp8_interpretation_t kFormat = __NV_E4M3> __device__ __forceinline__ void decode_fp8x16(const uint4& q, float (&f)[16]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) decode_fp8x4<kFormat>(words[w], f + 4 * w);
}

}  // namespace ember::cuda
