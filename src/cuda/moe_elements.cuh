// Element helpers shared by the MoE kernels (grouped_mm.cu, moe.cu): conversions to and from
// float for the kernel element types, 8-element vector loads and FP8 weight scale lookups.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/block_scale.h"
#include "cuda/grouped_mm.h"
#include "cuda/native_float.cuh"

namespace ember::cuda::gmm {

/// float8_e4m3fn storage.
struct E4m3 { uint8_t bits; };

template <class T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(float v) { return v; }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f(double v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f(E4m3 v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, __NV_E4M3)));
}
template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }

// Eight consecutive elements (16 bytes of a 16-bit type, 32 of f32, 8 of fp8), loaded raw and
// unpacked to floats separately, so a kernel can issue a batch of loads before it converts any
// (the loads then overlap; converting right after each load serialises them). The address is
// aligned to the load size.
template <class T> struct Raw8 { uint4 q; };             // 16-bit types
template <> struct Raw8<float> { uint4 lo, hi; };
template <> struct Raw8<E4m3> { uint2 q; };

template <class T> __device__ __forceinline__ Raw8<T> load_raw8(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return {reinterpret_cast<const uint4*>(p)[0], reinterpret_cast<const uint4*>(p)[1]};
  } else if constexpr (std::is_same_v<T, E4m3>) {
    return {*reinterpret_cast<const uint2*>(p)};
  } else {
    return {*reinterpret_cast<const uint4*>(p)};
  }
}

__device__ __forceinline__ void unpack8(const Raw8<__nv_bfloat16>& r, float (&f)[8]) {
  const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void unpack8(const Raw8<__half>& r, float (&f)[8]) {
  const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &w[i], 4);
    const float2 v = __half22float2(h);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void unpack8(const Raw8<float>& r, float (&f)[8]) {
  const uint32_t w[8] = {r.lo.x, r.lo.y, r.lo.z, r.lo.w, r.hi.x, r.hi.y, r.hi.z, r.hi.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = __uint_as_float(w[i]);
}
__device__ __forceinline__ void unpack8(const Raw8<E4m3>& r, float (&f)[8]) {
  decode_fp8x4(r.q.x, f);
  decode_fp8x4(r.q.y, f + 4);
}

template <class T> __device__ __forceinline__ void load8(const T* p, float (&f)[8]) { unpack8(load_raw8(p), f); }

/// sum_i a[i] * b[i] over eight unpacked elements, added to acc.
__device__ __forceinline__ float dot8(const float (&a)[8], const float (&b)[8], float acc) {
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(a[i], b[i], acc);
  return acc;
}

/// The 128x128 block scale of weight element (n, k) of expert g; 1 for the other kinds.
__device__ __forceinline__ float block_scale(const WeightScale& s, int64_t g, int64_t n, int64_t k) {
  return s.kind == WeightScale::Block128 ? s.ptr[block_scale_offset(g, n, k, s.s0, s.s1, s.s2)] : 1.f;
}
/// The tensorwise or per-output-channel scale of column n of expert g; 1 for the other kinds.
__device__ __forceinline__ float column_scale(const WeightScale& s, int64_t g, int64_t n) {
  if (s.kind == WeightScale::Tensorwise) return s.ptr[g * s.s0];
  if (s.kind == WeightScale::Rowwise) return s.ptr[g * s.s0 + n * s.s1];
  return 1.f;
}

}  // namespace ember::cuda::gmm
