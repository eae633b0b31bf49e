// scaled_mm on CUDA: out = (a * scale_a) @ (b * scale_b) (+ bias) for FP8 a [M, K], b [K, N].
//
// Paths (scaled_mm at the end tries cuBLASLt for exact M = 1 over >= 128 MB, then fp8_mma16_gemv /
// fp8_core_gemv, fp8_mma_gemv, fp8_gemv, cuBLASLt, generic):
//   fp8_mma16_gemv / fp8_core_gemv  M = 1, K <= 16384 on compute capability >= 8.9 (fast paths
//               enabled), the decode layout below: x converted once per block to f16, then f16
//               mma (exact products, f32 sums) or, with use_fast_accum, half2 FMAs (see below).
//   fp8_gemv    M <= 4 where fp8_mma_gemv cannot run (capability < 8.9 or fast paths
//               disabled), b = w.t() of a row-major weight w [N, K] (the decode layout), both
//               e4m3fn, out f32/f16/bf16. Reads each weight byte once with 16-byte loads and
//               decodes with the hardware fp8x2 -> half2 conversion; a group of threads owns one
//               output column (= weight row) for all M rows. Half of bf16 GEMV's bytes.
//   cuBLASLt    compute capability >= 8.9 (FP8 tensor cores), "TN" layout (a row-major, b
//               column-major), fast paths enabled: cublasLtMatmul with FP8 inputs, tensorwise
//               scale pointers or outer-vector (rowwise) scales, bias epilogue.
//   generic     anything else (older GPUs, other layouts, e5m2 x e5m2, fp8 output): decode both
//               operands to f32, one cuBLAS f32 GEMM, then the scale/bias/cast epilogue kernel.
//   fp8_mma_gemv M <= 16 on compute capability >= 8.9 (fast paths enabled), same layouts: the
//               dot products run as mma.sync m16n8k32 e4m3 (f32 accumulation; FP8 tensor cores
//               on sm_89, emulated with conversions + HMMA on Hopper, see the versions below)
//               instead of decoding every byte to f32 in registers: a warp takes 16 weight rows
//               and the (up to 8 per n-tile) activation rows as the n side of the product. The
//               order of k inside one mma does not matter, so each thread feeds the mma the 16
//               bytes it loaded in one piece (weight rows g and g+8, activation row g) with the
//               same k permutation on both sides. Each mma's result is added to f32 registers
//               (Hopper's FP8 mma accumulates with reduced precision inside one instruction only).
// Versions tried (H200, 1 x 4096 x 14336): v1 chose 128-thread groups below N = 16896 (2 loads
// per thread in flight): 28 us, 2.1 TB/s, 0.63x torch 2.11's 17.6 us. v2 takes 32-thread groups
// down to N = 8 warps per SM: 17.5 us (3.35 TB/s; two fp8x2 -> half2 -> float2 conversions per
// weight and activation pair bound it). v3 fp8_mma_gemv (mma.sync e4m3): 17.5 us again, because
// Hopper has no FP8 mma.sync: for sm_90a ptxas lowers it to conversions + HMMA.16816 (the SASS
// shows it; Hopper's FP8 tensor cores are reached through wgmma only). Native on sm_89.
// v4 (session 6) at M = 1, from bench/fp8_gemv_probe.cu: fp8_mma16_gemv (probe: 16.70 us
// tensorwise, 17.13 rowwise; 4096x4096 6.65 vs v3's 10.28, 2048x768 2.76 vs 5.20) and, with
// use_fast_accum, fp8_core_gemv (probe 15.24 / 15.36; in ember's benchmark 15.51-15.76 us over
// four runs on two machines, torch 17.0-17.4; exact 16.9-17.4). M = 1 over >= 128 MB without
// use_fast_accum: cuBLASLt (1x8192x28672 56.6 us = torch; fp8_mma16_gemv 63.2).
// Rejected in session 9 (branch fp8-m1-early-scales, 7114889): the epilogue's scales and bias
// loaded before the final reduction (fp8_core_gemv at its start under __launch_bounds__(256, 4),
// where ptxas kept them in local memory; fp8_mma16_gemv before its barrier), to remove the L2
// round trip its SASS showed after the shuffles. Measured with torch in the same call: use_fast_accum
// 17.47 us tensorwise, 18.21 rowwise (15.54-15.77 without it in session 8); exact 16.91 / 16.82.
// v5 (session 10): fp8_mma16_gemv, fp8_core_gemv and fp8_mma_gemv go out as programmatic dependent
// launches on sm_90 (dependent_launch.cuh), triggering at their start (every M <= 4 shape of the
// decode bench was faster so, unlike the large GEMVs: their grids are many waves of small blocks).
// Against EMBER_DISABLE_PDL=1, same call, two runs each: use_fast_accum 1x4096x14336 15.81-15.97 ->
// 15.09 us tensorwise, 15.71-15.74 -> 15.07 rowwise, exact 17.05 -> 16.24-16.30; 1x2048x768
// 3.19 -> 2.52; M = 2 and 4 3-5% faster. The decode bench with torch: 14.86 us (torch 17.19).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend.h"
#include "cuda/dependent_launch.cuh"
#include "cuda/native_float.cuh"
#include "cuda/runtime.h"
#include "ember/ops.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

template <int M, int GROUP, class OutT>
__global__ void __launch_bounds__(kThreads) fp8_gemv(const uint8_t* __restrict__ w, int64_t ldw,
                                                     const uint8_t* __restrict__ a, int64_t lda, int64_t n, int64_t k,
                                                     const float* __restrict__ scale_a, bool scale_a_per_row,
                                                     const float* __restrict__ scale_b, bool scale_b_per_col,
                                                     const OutT* __restrict__ bias, OutT* __restrict__ out, int64_t ldo) {
  constexpr int kUnroll = M <= 2 ? 4 : 2;
  const int lane = threadIdx.x % GROUP;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (kThreads / GROUP) + threadIdx.x / GROUP;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  if (col < n) {
    const auto* wv = reinterpret_cast<const uint4*>(w + col * ldw);
    const int64_t n_vec = k / 16;
    for (int64_t i0 = lane; i0 < n_vec; i0 += kUnroll * GROUP) {
      uint4 wq[kUnroll], aq[kUnroll][M];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = i0 + u * GROUP;
        wq[u] = i < n_vec ? wv[i] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int m = 0; m < M; ++m)
          aq[u][m] = i < n_vec ? reinterpret_cast<const uint4*>(a + m * lda)[i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float wf[16];
        decode_fp8x16(wq[u], wf);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float af[16];
          decode_fp8x16(aq[u][m], af);
#pragma unroll
          for (int j = 0; j < 16; ++j) acc[m] = fmaf(af[j], wf[j], acc[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int off = (GROUP < 32 ? GROUP : 32) / 2; off > 0; off /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
  if constexpr (GROUP > 32) {
    __shared__ float partial[M][kThreads / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int m = 0; m < M; ++m) partial[m][warp] = acc[m];
    __syncthreads();
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        acc[m] = 0.f;
#pragma unroll
        for (int j = 0; j < GROUP / 32; ++j) acc[m] += partial[m][warp + j];
      }
  }
  if (lane == 0 && col < n) {
    const float sb = scale_b[scale_b_per_col ? col : 0];
    const float bv = bias ? to_float(bias[col]) : 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) out[m * ldo + col] = from_float<OutT>(acc[m] * scale_a[scale_a_per_row ? m : 0] * sb + bv);
  }
}

template <int M, class OutT>
void launch_gemv_m(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor& bias,
                   const Tensor& out, cudaStream_t stream, int sms) {
  const int64_t n = out.size(1), k = a.size(1);
  const auto* w = static_cast<const uint8_t*>(b.raw_data());
  const auto* ap = static_cast<const uint8_t*>(a.raw_data());
  const auto* bias_p = bias.defined() ? static_cast<const OutT*>(bias.raw_data()) : nullptr;
  auto* o = static_cast<OutT*>(out.raw_data());
  const bool row_scale = sa.numel() > 1, col_scale = sb.numel() > 1;
  // 32-thread groups (8 loads each at K = 4096) when that still puts ~8 warps on every SM,
  // else 128-thread groups for short columns counts.
  if (n >= int64_t{8} * sms) {
    const auto blocks = static_cast<unsigned>((n + 7) / 8);
    fp8_gemv<M, 32, OutT><<<blocks, kThreads, 0, stream>>>(w, b.stride(1), ap, a.stride(0), n, k, sa.data_ptr<float>(),
                                                          row_scale, sb.data_ptr<float>(), col_scale, bias_p, o, out.stride(0));
  } else {
    const auto blocks = static_cast<unsigned>((n + 1) / 2);
    fp8_gemv<M, 128, OutT><<<blocks, kThreads, 0, stream>>>(w, b.stride(1), ap, a.stride(0), n, k, sa.data_ptr<float>(),
                                                           row_scale, sb.data_ptr<float>(), col_scale, bias_p, o, out.stride(0));
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class OutT>
void launch_gemv(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor& bias,
                 const Tensor& out, cudaStream_t stream, int sms) {
  switch (a.size(0)) {
    case 1: return launch_gemv_m<1, OutT>(a, b, sa, sb, bias, out, stream, sms);
    case 2: return launch_gemv_m<2, OutT>(a, b, sa, sb, bias, out, stream, sms);
    case 3: return launch_gemv_m<3, OutT>(a, b, sa, sb, bias, out, stream, sms);
    default: return launch_gemv_m<4, OutT>(a, b, sa, sb, bias, out, stream, sms);
  }
}

// ---- FP8 GEMV on tensor cores ---------------------------------------------------------------------
constexpr int kMmaWarps = 4;   // warps per block: each takes every kMmaWarps-th 64-byte step of K
constexpr int kMmaUnroll = 4;  // steps whose loads are in flight together
constexpr int kMmaMaxRows = 16;

// d = A (16 x 32 e4m3, rows g / g+8) * B (32 x 8 e4m3, column g) in f32, from zero.
__device__ __forceinline__ void mma_e4m3(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                         float (&d)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
#else
  d[0] = d[1] = d[2] = d[3] = 0.f;  // never launched below 8.9 (scaled_mm checks the capability)
#endif
}

// out[m, r] = (sum_k a[m, k] w[r, k]) * scale_a * scale_b (+ bias[r]) for the 16 weight rows r of
// this block and m < rows (NT n-tiles of 8 activation rows). Thread (g = lane / 4, q = lane % 4)
// loads 16 bytes at k = 64 s + 16 q of weight rows g and g + 8 and of activation row g; bytes
// 0-7 feed one mma as its k slots {4q..4q+3} and {16+4q..16+4q+3}, bytes 8-15 a second mma.
template <int NT, class OutT>
__global__ void __launch_bounds__(kMmaWarps * 32) fp8_mma_gemv(const uint8_t* __restrict__ w, int64_t ldw,
                                                              const uint8_t* __restrict__ a, int64_t lda, int rows, int64_t n,
                                                              int64_t k, const float* __restrict__ scale_a, bool scale_a_per_row,
                                                              const float* __restrict__ scale_b, bool scale_b_per_col,
                                                              const OutT* __restrict__ bias, OutT* __restrict__ out, int64_t ldo) {
  dependents_may_launch();
  wait_for_previous_kernel();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int64_t r_lo = static_cast<int64_t>(blockIdx.x) * 16 + g, r_hi = r_lo + 8;
  const bool lo_ok = r_lo < n, hi_ok = r_hi < n;
  const uint8_t* w_lo = w + (lo_ok ? r_lo : 0) * ldw;
  const uint8_t* w_hi = w + (hi_ok ? r_hi : 0) * ldw;
  const int64_t chunks = k / 16, steps = (chunks + 3) / 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[NT][4] = {};
  for (int64_t s0 = warp; s0 < steps; s0 += kMmaWarps * kMmaUnroll) {
    uint4 wl[kMmaUnroll], wh[kMmaUnroll], av[kMmaUnroll][NT];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t c = (s0 + u * kMmaWarps) * 4 + q;
      const bool in = c < chunks;
      wl[u] = in && lo_ok ? reinterpret_cast<const uint4*>(w_lo)[c] : zero;
      wh[u] = in && hi_ok ? reinterpret_cast<const uint4*>(w_hi)[c] : zero;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int m = t * 8 + g;
        av[u][t] = in && m < rows ? reinterpret_cast<const uint4*>(a + m * lda)[c] : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float d[4];
        mma_e4m3(wl[u].x, wh[u].x, wl[u].y, wh[u].y, av[u][t].x, av[u][t].y, d);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][i] += d[i];
        mma_e4m3(wl[u].z, wh[u].z, wl[u].w, wh[u].w, av[u][t].z, av[u][t].w, d);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][i] += d[i];
      }
    }
  }
  // The warps' partial sums meet in shared memory; warp 0 finishes. Fragment: acc[t][0..1] are
  // (row g, m = 8t + 2q + {0, 1}), acc[t][2..3] the same for row g + 8.
  __shared__ float partial[kMmaWarps - 1][NT][4][32];
  if (warp > 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp - 1][t][i][lane] = acc[t][i];
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int v = 0; v < kMmaWarps - 1; ++v) acc[t][i] += partial[v][t][i][lane];
      const int m = t * 8 + 2 * q + (i & 1);
      const int64_t r = i < 2 ? r_lo : r_hi;
      if (m >= rows || r >= n) continue;
      const float v = acc[t][i] * scale_a[scale_a_per_row ? m : 0] * scale_b[scale_b_per_col ? r : 0] +
                      (bias ? to_float(bias[r]) : 0.f);
      out[m * ldo + r] = from_float<OutT>(v);
    }
  }
}

template <class OutT>
void launch_mma_gemv(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor& bias,
                     const Tensor& out, cudaStream_t stream, bool pdl) {
  const int rows = static_cast<int>(a.size(0));
  const int64_t n = out.size(1), k = a.size(1);
  const auto blocks = static_cast<unsigned>((n + 15) / 16);
  const auto* w = static_cast<const uint8_t*>(b.raw_data());
  const auto* ap = static_cast<const uint8_t*>(a.raw_data());
  const auto* bias_p = bias.defined() ? static_cast<const OutT*>(bias.raw_data()) : nullptr;
  auto* o = static_cast<OutT*>(out.raw_data());
  const bool row_scale = sa.numel() > 1, col_scale = sb.numel() > 1;
  const DependentLaunch launch(blocks, kMmaWarps * 32, 0, stream, pdl);
  if (rows <= 8)
    launch(fp8_mma_gemv<1, OutT>, w, b.stride(1), ap, a.stride(0), rows, n, k, sa.data_ptr<float>(), row_scale, sb.data_ptr<float>(),
           col_scale, bias_p, o, out.stride(0));
  else
    launch(fp8_mma_gemv<2, OutT>, w, b.stride(1), ap, a.stride(0), rows, n, k, sa.data_ptr<float>(), row_scale, sb.data_ptr<float>(),
           col_scale, bias_p, o, out.stride(0));
  EMBER_CUDA_CHECK_LAUNCH();
}

// ---- FP8 GEMV at M = 1: x converted once per block into shared memory ----------------------------
// Both kernels below were probed first in bench/fp8_gemv_probe.cu: on Hopper the fp8 mma.sync of
// fp8_mma_gemv is conversions + HMMA anyway, and it spends 0.75 F2FP per weight byte (x converted
// again for every mma). These convert each weight byte once (one F2FP per two bytes, to f16)
// against x staged once per block as f16 (exact: every e4m3 value is an f16), with the block's
// first batch of weight loads issued before the staging and its barrier.
//   fp8_mma16_gemv  (exact; the default below 128 MB of weights) the probe's "mma16 W8 L4": 16
//                   weight rows per block of 8 warps, each warp a contiguous range of K; mma.sync
//                   m16n8k16 f16 with f32 accumulation (the products of f16 values are exact).
//   fp8_core_gemv   (use_fast_accum) the probe's "core R2 L4": CUDA-core half2 FMAs, a chunk's 16
//                   products summed as two f16 chains of 8, then in f32.
// Measured in ember (H200, 1 x 4096 x 14336 bf16 out): an exact CUDA-core variant (f16 pairs
// widened to f32, FFMA against x staged as f32) took 24.9 us: FMA-bound, dropped.
constexpr int kStagedMaxK = 16384;  // x as f16 (+ the fast kernel's chunk scales) within 48 KB

// Two e4m3 bytes (the low 16 bits of `pair`) -> f16x2 by the conversion instruction. The M = 1
// kernels below keep this and their own `asm volatile` mma rather than cuda/mma.cuh's
// decode_fp8x2 / mma16816 (same instructions): with those, ptxas allocated registers differently
// (session 8, sm_90a: fp8_mma16_gemv<4> 64 -> 68, 4 -> 3 blocks per SM), and these kernels'
// measured times rest on their current allocation.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

/// out[col] = v * scale_a * scale_b (+ bias[col]) for the one activation row.
template <class OutT>
__device__ __forceinline__ void write_m1(float v, int col, const float* scale_a, const float* scale_b, bool scale_b_per_col,
                                         const OutT* bias, OutT* out) {
  out[col] = from_float<OutT>(v * scale_a[0] * scale_b[scale_b_per_col ? col : 0] + (bias ? to_float(bias[col]) : 0.f));
}

constexpr int kMma16Warps = 8;

// Thread (g = lane / 4, q = lane % 4) loads chunk 4 s + q (16 bytes) of weight rows g and g + 8 for
// step s of its warp's range; word j of the two chunks is one m16n8k16 mma's A (a0 / a2: row g, the
// word's byte pairs {0, 1} / {2, 3}; a1 / a3: row g + 8), with x's f16 for the same 4 k as B (every
// column of B is x, so every column of D is the same dot product). Rows past n read row n - 1; the
// steps past K (K % 64 != 0) are predicated loads against zeros staged past x's end.
template <int L, class OutT>
__global__ void __launch_bounds__(kMma16Warps * 32) fp8_mma16_gemv(const uint4* __restrict__ w, int ldw_chunks,
                                                                  const uint4* __restrict__ x, int chunks, int n,
                                                                  const float* __restrict__ scale_a,
                                                                  const float* __restrict__ scale_b, bool scale_b_per_col,
                                                                  const OutT* __restrict__ bias, OutT* __restrict__ out) {
  dependents_may_launch();
  wait_for_previous_kernel();
  extern __shared__ uint4 x_f16[];  // chunk c of x (16 e4m3) -> x_f16[2c], x_f16[2c + 1]; zeros past x
  __shared__ float partial[kMma16Warps][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int row0 = static_cast<int>(blockIdx.x) * 16;
  const int full_steps = chunks / 4, steps = (chunks + 3) / 4, per_warp = (steps + kMma16Warps - 1) / kMma16Warps;
  const int s_begin = min(steps, warp * per_warp), s_end = min(steps, s_begin + per_warp);
  const int batch_end = min(s_end, full_steps);
  const uint4* lo = w + static_cast<size_t>(min(row0 + g, n - 1)) * ldw_chunks + q;
  const uint4* hi = w + static_cast<size_t>(min(row0 + g + 8, n - 1)) * ldw_chunks + q;
  uint4 wl[L], wh[L];
  const auto load_batch = [&](int s) {
#pragma unroll
    for (int u = 0; u < L; ++u) {
      wl[u] = __ldg(lo + 4 * (s + u));
      wh[u] = __ldg(hi + 4 * (s + u));
    }
  };
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const auto add_step = [&](const uint4& l, const uint4& h, int s) {
    const uint4* xs = x_f16 + 2 * (4 * s + q);
    const uint4 x0 = xs[0], x1 = xs[1];
    const uint32_t lw[4] = {l.x, l.y, l.z, l.w}, hw[4] = {h.x, h.y, h.z, h.w};
    const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t a0 = e4m3x2_to_f16x2(lw[j]), a2 = e4m3x2_to_f16x2(lw[j] >> 16);
      const uint32_t a1 = e4m3x2_to_f16x2(hw[j]), a3 = e4m3x2_to_f16x2(hw[j] >> 16);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(xw[2 * j]), "r"(xw[2 * j + 1]));
    }
  };
  const bool first_batch = s_begin + L <= batch_end;
  if (first_batch) load_batch(s_begin);
  for (int c = threadIdx.x; c < 4 * steps; c += kMma16Warps * 32) {
    uint32_t h[8] = {};
    if (c < chunks) {
      const uint4 v = x[c];
      const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        h[2 * j] = e4m3x2_to_f16x2(vw[j]);
        h[2 * j + 1] = e4m3x2_to_f16x2(vw[j] >> 16);
      }
    }
    x_f16[2 * c] = make_uint4(h[0], h[1], h[2], h[3]);
    x_f16[2 * c + 1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
  __syncthreads();
  int s = s_begin;
  if (first_batch) {
    for (;;) {
#pragma unroll
      for (int u = 0; u < L; ++u) add_step(wl[u], wh[u], s + u);
      s += L;
      if (s + L > batch_end) break;
      load_batch(s);
    }
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (; s < s_end; ++s) {
    const bool in = 4 * s + q < chunks;
    add_step(in ? __ldg(lo + 4 * s) : zero, in ? __ldg(hi + 4 * s) : zero, s);
  }
  // acc[0] = D(row g, column 2q), acc[2] = D(row g + 8, column 2q).
  if (q == 0) {
    partial[warp][g] = acc[0];
    partial[warp][g + 8] = acc[2];
  }
  __syncthreads();
  if (threadIdx.x < 16 && row0 + static_cast<int>(threadIdx.x) < n) {
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < kMma16Warps; ++i) v += partial[i][threadIdx.x];
    write_m1(v, row0 + static_cast<int>(threadIdx.x), scale_a, scale_b, scale_b_per_col, bias, out);
  }
}

constexpr int kCoreWarps = 8;
constexpr int kCoreRows = 2;

// A warp owns kCoreRows consecutive weight rows; lane j takes the 16-byte chunks j, j + 32, ... of
// each (512 contiguous bytes per load instruction), L chunks per row per batch, unpredicated (rows
// past n read row n - 1 and are not written), then a tail of single chunks. L = 0: the tail only
// (K < 512). L is a template constant so the first batch's loads are unconditional: loaded under
// a runtime `if`, they were sunk below the staging barrier (SASS at 5d3257d; 16.3 us instead of
// 15.5 on 1x4096x14336).
// Precision: ~4e-4 of max|out| on random data, below bf16 output rounding. Each x chunk is staged
// divided by the power of two that brings its largest |x| into [1, 2) (kept as the chunk's f32
// scale), so |product| < 896 and a chain's sum < 7168 (no f16 overflow), and x's large elements
// times any weight (>= 2^-9) stay in f16's normal range.
template <int L, class OutT>
__global__ void __launch_bounds__(kCoreWarps * 32) fp8_core_gemv(const uint4* __restrict__ w, int ldw_chunks,
                                                                const uint4* __restrict__ x, int chunks, int n,
                                                                const float* __restrict__ scale_a,
                                                                const float* __restrict__ scale_b, bool scale_b_per_col,
                                                                const OutT* __restrict__ bias, OutT* __restrict__ out) {
  dependents_may_launch();
  wait_for_previous_kernel();
  extern __shared__ uint4 x_half[];                                     // chunk c: x_half[2c], x_half[2c + 1]
  float* x_chunk_scale = reinterpret_cast<float*>(x_half + 2 * chunks);  // chunk c's power of two
  constexpr int R = kCoreRows;
  const int lane = threadIdx.x % 32, row0 = (blockIdx.x * kCoreWarps + threadIdx.x / 32) * R;
  const uint4* row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = w + static_cast<size_t>(min(row0 + r, n - 1)) * ldw_chunks + lane;
  uint4 batch[R][L > 0 ? L : 1];
  const auto load_batch = [&](int c0) {
#pragma unroll
    for (int l = 0; l < L; ++l)
#pragma unroll
      for (int r = 0; r < R; ++r) batch[r][l] = __ldg(row[r] + c0 + l * 32);
  };
  if constexpr (L > 0) load_batch(0);  // the launcher picks L <= chunks / 32

  for (int c = threadIdx.x; c < chunks; c += kCoreWarps * 32) {
    const uint4 v = x[c];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    __half2 h[8];
    __half2 amax = __float2half2_rn(0.f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = e4m3x2_to_f16x2(words[j]), hi = e4m3x2_to_f16x2(words[j] >> 16);
      memcpy(&h[2 * j], &lo, 4);
      memcpy(&h[2 * j + 1], &hi, 4);
      amax = __hmax2(amax, __hmax2(__habs2(h[2 * j]), __habs2(h[2 * j + 1])));
    }
    const float m = fmaxf(__low2float(amax), __high2float(amax));
    // 2^e <= m < 2^(e + 1), e in [-9, 8]; m = 0 (or NaN, whose products are NaN anyway): e = 0.
    const int e = m > 0.f ? static_cast<int>((__float_as_uint(m) >> 23) & 0xff) - 127 : 0;
    const __half2 down = __float2half2_rn(__uint_as_float(static_cast<uint32_t>(127 - e) << 23));
    uint32_t packed[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __half2 scaled = __hmul2(h[j], down);
      memcpy(&packed[j], &scaled, 4);
    }
    x_half[2 * c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    x_half[2 * c + 1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    x_chunk_scale[c] = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
  }
  __syncthreads();

  float acc[R] = {};
  // Chunk c of every row (wq[r]) dotted with x's chunk c.
  const auto add_chunk = [&](const uint4 (&wq)[R], int c) {
    const uint4 x0 = x_half[2 * c], x1 = x_half[2 * c + 1];
    const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const float scale = x_chunk_scale[c];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t ww[4] = {wq[r].x, wq[r].y, wq[r].z, wq[r].w};
      __half2 sum = __float2half2_rn(0.f);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t w_lo = e4m3x2_to_f16x2(ww[j]), w_hi = e4m3x2_to_f16x2(ww[j] >> 16);
        __half2 wl, wh, xl, xh;
        memcpy(&wl, &w_lo, 4);
        memcpy(&wh, &w_hi, 4);
        memcpy(&xl, &xw[2 * j], 4);
        memcpy(&xh, &xw[2 * j + 1], 4);
        sum = __hfma2(wl, xl, sum);
        sum = __hfma2(wh, xh, sum);
      }
      acc[r] = fmaf(__low2float(sum) + __high2float(sum), scale, acc[r]);
    }
  };
  int c0 = 0;
  if constexpr (L > 0) {
    for (;;) {
#pragma unroll
      for (int l = 0; l < L; ++l) {
        uint4 wq[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wq[r] = batch[r][l];
        add_chunk(wq, c0 + l * 32 + lane);
      }
      c0 += L * 32;
      if (c0 + L * 32 > chunks) break;
      load_batch(c0);
    }
  }
  for (int c = c0 + lane; c < chunks; c += 32) {
    uint4 wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wq[r] = __ldg(row[r] + (c - lane));
    add_chunk(wq, c);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  if (lane < R && row0 + lane < n) {
    float v = acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r) v = lane == r ? acc[r] : v;
    write_m1(v, row0 + lane, scale_a, scale_b, scale_b_per_col, bias, out);
  }
}

// One activation row: fp8_core_gemv with use_fast_accum, else fp8_mma16_gemv. L: the most loads
// per row per lane (core: of 32 chunks each; mma16: of 4-chunk steps each) that K still fills as
// one whole batch, of 1, 2, 4 (core: 0 when K has no whole batch).
template <class OutT>
void launch_m1_gemv(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor& bias,
                    const Tensor& out, cudaStream_t stream, bool use_fast_accum, bool pdl) {
  const int n = static_cast<int>(out.size(1)), chunks = static_cast<int>(a.size(1) / 16);
  const auto* w = static_cast<const uint4*>(b.raw_data());
  const auto* x = static_cast<const uint4*>(a.raw_data());
  const int ldw = static_cast<int>(b.stride(1) / 16);
  const float *sa_p = sa.data_ptr<float>(), *sb_p = sb.data_ptr<float>();
  const bool per_col = sb.numel() > 1;
  const auto* bias_p = bias.defined() ? static_cast<const OutT*>(bias.raw_data()) : nullptr;
  auto* o = static_cast<OutT*>(out.raw_data());
  const auto pick = [](int per_lane, auto launch) {
    if (per_lane >= 4) return launch(std::integral_constant<int, 4>{});
    if (per_lane >= 2) return launch(std::integral_constant<int, 2>{});
    if (per_lane >= 1) return launch(std::integral_constant<int, 1>{});
    launch(std::integral_constant<int, 0>{});
  };
  if (use_fast_accum) {
    const auto blocks = static_cast<unsigned>((n + kCoreWarps * kCoreRows - 1) / (kCoreWarps * kCoreRows));
    const size_t smem = static_cast<size_t>(chunks) * (2 * sizeof(uint4) + sizeof(float));
    pick(chunks / 32, [&](auto l) {
      DependentLaunch(blocks, kCoreWarps * 32, smem, stream, pdl)(fp8_core_gemv<decltype(l)::value, OutT>, w, ldw, x, chunks, n, sa_p,
                                                                  sb_p, per_col, bias_p, o);
    });
  } else {
    const int steps = (chunks + 3) / 4;
    const auto blocks = static_cast<unsigned>((n + 15) / 16);
    const size_t smem = static_cast<size_t>(4 * steps) * 2 * sizeof(uint4);
    pick((steps + kMma16Warps - 1) / kMma16Warps, [&](auto l) {  // >= 1: K > 0 here
      if constexpr (decltype(l)::value > 0)
        DependentLaunch(blocks, kMma16Warps * 32, smem, stream, pdl)(fp8_mma16_gemv<decltype(l)::value, OutT>, w, ldw, x, chunks, n,
                                                                     sa_p, sb_p, per_col, bias_p, o);
    });
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

/// The decode layouts both GEMV kernels take (up to `max_rows` rows of a).
bool gemv_layout(const Tensor& a, const Tensor& b, const Tensor& out, int64_t max_rows) {
  const int64_t k = a.size(1);
  return a.size(0) <= max_rows && a.dtype() == kFloat8_e4m3fn && b.dtype() == kFloat8_e4m3fn && !is_fp8(out.dtype()) &&
         a.stride(1) == 1 && b.stride(0) == 1 && out.stride(1) == 1 && k % 16 == 0 && a.stride(0) % 16 == 0 &&
         b.stride(1) % 16 == 0 && aligned16(a.raw_data()) && aligned16(b.raw_data());
}

// ---- epilogue: out = cast(acc * scale_a[m] * scale_b[n] + bias[n]), saturating for fp8 ----------
template <class OutT>
__global__ void scale_epilogue(const float* __restrict__ acc, int64_t m, int64_t n, const float* __restrict__ sa,
                               bool sa_rows, const float* __restrict__ sb, bool sb_cols, const OutT* __restrict__ bias,
                               OutT* __restrict__ out, int64_t ldo) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    float v = acc[idx] * sa[sa_rows ? i : 0] * sb[sb_cols ? j : 0];
    if (bias) v += to_float(bias[j]);
    if constexpr (std::is_same_v<OutT, __nv_fp8_storage_t>) {
      out[i * ldo + j] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    } else {
      out[i * ldo + j] = from_float<OutT>(v);
    }
  }
}

void launch_epilogue(const Tensor& acc, const Tensor& sa, const Tensor& sb, const Tensor& bias, const Tensor& out,
                     cudaStream_t stream) {
  const int64_t m = out.size(0), n = out.size(1);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((m * n + 255) / 256, 65535));
  auto go = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_epilogue<T><<<blocks, 256, 0, stream>>>(acc.data_ptr<float>(), m, n, sa.data_ptr<float>(), sa.numel() > 1,
                                                  sb.data_ptr<float>(), sb.numel() > 1,
                                                  bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr,
                                                  static_cast<T*>(out.raw_data()), out.stride(0));
  };
  switch (out.dtype()) {
    case kFloat32: go(static_cast<float*>(nullptr)); break;
    case kFloat16: go(static_cast<__half*>(nullptr)); break;
    case kBFloat16: go(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: go(static_cast<__nv_fp8_storage_t*>(nullptr)); break;
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

// ---- cuBLASLt ------------------------------------------------------------------------------------
#define EMBER_CUBLASLT_CHECK(expr)                                                                       \
  do {                                                                                                  \
    const cublasStatus_t st_ = (expr);                                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) fail("scaled_mm", "{} failed: expected CUBLAS_STATUS_SUCCESS, got {}", #expr, static_cast<int>(st_)); \
  } while (0)

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard lock(mutex);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(device + 1, nullptr);
  if (!handles[device]) EMBER_CUBLASLT_CHECK(cublasLtCreate(&handles[device]));
  return handles[device];
}

cudaDataType_t lt_type(DType d) {
  switch (d) {
    case kFloat8_e4m3fn: return CUDA_R_8F_E4M3;
    case kFloat8_e5m2: return CUDA_R_8F_E5M2;
    case kFloat16: return CUDA_R_16F;
    case kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

bool lt_layout(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t k = a.size(1);
  // cuBLASLt FP8 wants "TN" (a row-major, b column-major), 16-byte aligned leading dims, and at
  // least one e4m3 operand.
  return a.stride(1) == 1 && b.stride(0) == 1 && out.stride(1) == 1 && k % 16 == 0 && a.stride(0) % 16 == 0 &&
         b.stride(1) % 16 == 0 && out.stride(0) == out.size(1) &&
         (a.dtype() == kFloat8_e4m3fn || b.dtype() == kFloat8_e4m3fn);
}

// RAII owners for the cuBLASLt descriptors of one call.
struct LtDesc { cublasLtMatmulDesc_t h = nullptr; ~LtDesc() { if (h) cublasLtMatmulDescDestroy(h); } };
struct LtLayout { cublasLtMatrixLayout_t h = nullptr; ~LtLayout() { if (h) cublasLtMatrixLayoutDestroy(h); } };
struct LtPref { cublasLtMatmulPreference_t h = nullptr; ~LtPref() { if (h) cublasLtMatmulPreferenceDestroy(h); } };

template <class T> void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  EMBER_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(T)));
}

// Runs D[N x M] (column-major, = out [M, N] row-major) = op(W)(N x K) * A^T(K x M) with the FP8
// operands and the given scales. Returns false when cuBLASLt has no algorithm for the call.
bool lt_matmul(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor& bias,
               const Tensor& out, bool use_fast_accum, cudaStream_t stream, int device) {
  const bool vector_scales = sa.numel() > 1 || sb.numel() > 1;
  if (vector_scales && (sa.numel() == 1 || sb.numel() == 1)) return false;  // mixed: generic path
  const int64_t m = a.size(0), k = a.size(1), n = out.size(1);
  LtDesc desc;
  EMBER_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  // Off: cuBLASLt promotes the FP8 tensor cores' partial sums to f32 every so often (torch's default).
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(use_fast_accum));
  // Lt's A is ember's b (op(A) has N rows), Lt's B is ember's a (M columns).
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(sb.data_ptr<float>()));
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(sa.data_ptr<float>()));
  if (vector_scales) {
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  }
  if (bias.defined()) {
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.raw_data()));
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, lt_type(bias.dtype()));
  }
  LtLayout la, lb, ld;
  EMBER_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&la.h, lt_type(b.dtype()), k, n, b.stride(1)));
  EMBER_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&lb.h, lt_type(a.dtype()), k, m, a.stride(0)));
  EMBER_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&ld.h, lt_type(out.dtype()), n, m, out.stride(0)));
  constexpr size_t kWorkspace = 32u << 20;
  LtPref pref;
  EMBER_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
  EMBER_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                                            sizeof(kWorkspace)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt_handle(device), desc.h, la.h, lb.h, ld.h, ld.h, pref.h, 1, &heuristic, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    return false;
  }
  const Tensor workspace = empty({static_cast<int64_t>(kWorkspace)}, kUInt8, out.device());
  const float alpha = 1.f, beta = 0.f;
  EMBER_CUBLASLT_CHECK(cublasLtMatmul(lt_handle(device), desc.h, &alpha, b.raw_data(), la.h, a.raw_data(), lb.h, &beta,
                                      out.raw_data(), ld.h, out.raw_data(), ld.h, &heuristic.algo, workspace.raw_data(),
                                      kWorkspace, stream));
  return true;
}

}  // namespace

void scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out, bool use_fast_accum) {
  const int device = out.device().index;
  cudaStream_t stream = current_raw_stream(device);
  // M = 1 over 128 MB of weights or more without use_fast_accum: cuBLASLt, as torch does
  // (1x8192x28672, 235 MB: 56.6 us = torch, fp8_mma16_gemv 63 us), at torch's precision (the FP8
  // tensor cores' partial sums, promoted to f32 now and then: ~1% of max|out| at K = 8192, see
  // parity case scaled_mm_m1_large_lt); below, fp8_mma16_gemv (exact products, f32 sums) is as
  // fast (1x4096x14336) or faster.
  constexpr int64_t kLtM1MinBytes = int64_t{128} << 20;
  if (!use_fast_accum && a.size(0) == 1 && a.size(1) * out.size(1) >= kLtM1MinBytes && !is_fp8(out.dtype()) &&
      lt_layout(a, b, out) && fast_paths_enabled(device, 89) &&
      lt_matmul(a, b, scale_a, scale_b, bias, out, use_fast_accum, stream, device)) {
    return;
  }
  if (gemv_layout(a, b, out, 1) && a.size(1) <= kStagedMaxK && out.size(1) <= INT32_MAX && fast_paths_enabled(device, 89)) {
    const bool pdl = dependent_launches_enabled(device);
    switch (out.dtype()) {
      case kFloat32: return launch_m1_gemv<float>(a, b, scale_a, scale_b, bias, out, stream, use_fast_accum, pdl);
      case kFloat16: return launch_m1_gemv<__half>(a, b, scale_a, scale_b, bias, out, stream, use_fast_accum, pdl);
      default: return launch_m1_gemv<__nv_bfloat16>(a, b, scale_a, scale_b, bias, out, stream, use_fast_accum, pdl);
    }
  }
  if (gemv_layout(a, b, out, kMmaMaxRows) && fast_paths_enabled(device, 89)) {
    const bool pdl = dependent_launches_enabled(device);
    switch (out.dtype()) {
      case kFloat32: return launch_mma_gemv<float>(a, b, scale_a, scale_b, bias, out, stream, pdl);
      case kFloat16: return launch_mma_gemv<__half>(a, b, scale_a, scale_b, bias, out, stream, pdl);
      default: return launch_mma_gemv<__nv_bfloat16>(a, b, scale_a, scale_b, bias, out, stream, pdl);
    }
  }
  if (gemv_layout(a, b, out, 4)) {
    const int sms = device_properties(device).multiProcessorCount;
    switch (out.dtype()) {
      case kFloat32: return launch_gemv<float>(a, b, scale_a, scale_b, bias, out, stream, sms);
      case kFloat16: return launch_gemv<__half>(a, b, scale_a, scale_b, bias, out, stream, sms);
      default: return launch_gemv<__nv_bfloat16>(a, b, scale_a, scale_b, bias, out, stream, sms);
    }
  }
  if (!is_fp8(out.dtype()) && lt_layout(a, b, out) && fast_paths_enabled(device, 89) &&
      lt_matmul(a, b, scale_a, scale_b, bias, out, use_fast_accum, stream, device)) {
    return;
  }
  // Generic: exact decode to f32, one f32 GEMM, then scales, bias and the cast.
  const Tensor acc = mm(a.to(kFloat32), b.to(kFloat32)).contiguous();
  launch_epilogue(acc, scale_a, scale_b, bias, out, stream);
}

}  // namespace ember::cuda
