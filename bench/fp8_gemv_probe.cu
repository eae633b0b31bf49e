// Why does ember's FP8 decode GEMV (src/cuda/scaled_mm.cu, fp8_mma_gemv at M = 1) take 17.75 us
// on 1x4096x14336 (torch 16.76 us, HBM floor ~15.5 us = ~2 us + 58.7 MB / 4.35 TB/s), and which
// kernel shape reaches the floor? A standalone probe (no ember): ember's kernel copied as it is
// (the baseline, launched as launch_mma_gemv launches it) next to variants that differ in how many
// 16-byte weight loads each lane really has in flight before the first use, where x lives, and
// whether the dot products run on tensor cores (mma) or CUDA cores (half2 FMA). Every launch
// reads its own copy of the weights (copies adding up to >= 400 MB, at least 2, so a replay reads
// from HBM, not the 60 MB L2), timed as a CUDA graph of one launch per copy, median of 5 replays
// (bench/probe_timing.cuh).
//
// The problem is scaled_mm's decode layout as bench/decode_bench.cpp and torch_decode.py run it:
// a = x [1, K] e4m3fn, b = w.t() of w [N, K] e4m3fn (unit stride along K), fp32 decoding scales
// (tensorwise: scale_a and scale_b one value each; rowwise: scale_a [1, 1], scale_b [1, N]), bf16
// out [1, N]; the shapes are bench/shapes.py's SCALED_MM decode shapes with M = 1 (K x N):
// 4096x14336, 8192x28672, 4096x4096, 2048x768, each tensorwise and rowwise. Inputs: random e4m3
// codes over the whole range (no NaN codes 0x7f / 0xff: subnormals up to +-448), random scales in
// [0.1, 1.1); every variant's y is checked on every shape against a float64 host reference of the
// dequantised product (err = max |y - ref| / max |ref|; FAIL above 1e-2: bf16 output rounding
// alone is ~4e-3 of a value).
//
// Variants (SASS facts from nvcc 13.0 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v; in
// each kernel's comment):
//   ember mma     fp8_mma_gemv<1, bf16> as in scaled_mm.cu: 4 warps x 16 rows per block, warps
//                 interleaved over 64-byte steps of K, 4 steps per batch, predicated loads,
//                 64-bit indices, x loaded from global by the g = 0 lanes, mma.sync m16n8k32 e4m3
//                 (lowered by ptxas to e4m3 -> f16 conversions + HMMA.16816 on sm_90a).
//   mma16 W L     the same 16 rows per block of W warps, but each warp a contiguous range of K,
//                 L steps (2L weight loads per lane) per batch with no predicates (one pointer +
//                 immediate offsets, 32-bit indices, rows past N clamped to row N-1), the first
//                 batch issued before x is staged in shared memory as f16 and a barrier; the
//                 weights converted explicitly (cvt e4m3x2 -> f16x2) into mma.sync m16n8k16 f16
//                 with f32 accumulation in the mma (x is converted once per block, not per mma).
//   core R L      CUDA cores: a warp owns R consecutive rows, lane j the 16-byte chunks j, j + 32,
//                 ... of each (512 contiguous bytes per row per load instruction), R x L loads
//                 per lane per batch, unpredicated, first batch before x is staged and the
//                 barrier; cvt e4m3x2 -> f16x2, 8 HFMA2 per chunk into a half2 (8 products per
//                 half, x prescaled by 2^-8 so a product is <= 784 and a chunk's sum <= 6272:
//                 no f16 overflow), then the chunk's half2 added to an f32 accumulator.
//   core bits R L as core R L, but the weights decoded by integer ops (e4m3 bits moved into an
//                 f16 = the value * 2^-8, exact for every code incl. subnormals) instead of the
//                 conversion instruction, in case F2FP's throughput bounds it; x staged in the
//                 byte order the decode produces ([b0, b2], [b1, b3] per word), unscaled.
// L is the most a launch uses: it takes L' = min(L, what K gives each lane / warp) so the
// smaller shapes still run whole batches.
//
// Measured: not yet (written without the GPU). Expected: the baseline needs 0.75 F2FP per weight
// byte (x reconverted per mma), ~12.5 per clock per SM at 4.35 TB/s, near the conversion pipe's
// 16, and its 4 serial round trips per warp leave the small shapes latency-bound (4096x4096: 8
// warps per SM); mma16 W8 L4 and core R1 L8 (0.5 F2FP per byte, one or two whole batches per
// warp) ~16 us on 4096x14336 (~1.1x), 4096x4096 ~7.5 us (~1.4x), 2048x768 ~4 us; core bits as
// good or better if F2FP is what binds; the 90-register variants (mma16 W4 L8, core R1 L16) no
// better (fewer warps per SM for the same bytes in flight).
//
// Build and run on the GPU machine (no CMake needed):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/fp8_gemv_probe.cu -o /tmp/fp8_gemv_probe && /tmp/fp8_gemv_probe
// Only some shapes: append "KxN" names, e.g. "/tmp/fp8_gemv_probe 4096x14336"; "randn" draws the
// codes as ember's decode bench does.
// SASS of a kernel (what the per-variant comments describe):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Xptxas -v bench/fp8_gemv_probe.cu -o /tmp/f.cubin
//   cuobjdump -sass /tmp/f.cubin | less   (or nvdisasm -c /tmp/f.cubin)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "probe_bf16.cuh"
#include "probe_timing.cuh"

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// ember's kernel as in src/cuda/scaled_mm.cu at e30750c (fp8_mma_gemv<NT, OutT>, launch_mma_gemv),
// unchanged but for OutT = bf16 and the bias (none in the benchmark).

constexpr int kMmaWarps = 4;   // warps per block: each takes every kMmaWarps-th 64-byte step of K
constexpr int kMmaUnroll = 4;  // steps whose loads are in flight together

__device__ __forceinline__ void mma_e4m3(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                         float (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
}

// SASS (NT = 1): 64 registers; of a batch's 12 loads (8 weight, 4 x) 6 are issued before the
// first F2FP / HMMA and the other 6 among the mma (the session-5 finding this probe starts
// from); 64-bit address arithmetic per load. Each m16n8k32 e4m3 mma becomes 2 HMMA.16816.F32
// plus 12 F2FP.F16.E4M3.UNPACK_B (8 for the weight rows, 4 for x: x is converted again for
// every mma): 0.75 F2FP per weight byte.
template <int NT>
__global__ void __launch_bounds__(kMmaWarps * 32) ember_mma_gemv(const uint8_t* __restrict__ w, int64_t ldw, const uint8_t* __restrict__ a,
                                                                 int64_t lda, int rows, int64_t n, int64_t k,
                                                                 const float* __restrict__ scale_a, bool scale_a_per_row,
                                                                 const float* __restrict__ scale_b, bool scale_b_per_col,
                                                                 bf16* __restrict__ out, int64_t ldo) {
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
      const float v = acc[t][i] * scale_a[scale_a_per_row ? m : 0] * scale_b[scale_b_per_col ? r : 0];
      out[m * ldo + r] = __float2bfloat16_rn(v);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Variants: raw 16-byte chunks (uint4) with 32-bit indices; K % 64 == 0 (every shape here).

// Two e4m3 bytes (the low 16 bits) -> f16x2 by the conversion instruction (F2FP).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

// Scale values: tensorwise (per_col false) or rowwise scale_b; scale_a has one value at M = 1.
struct Scales {
  const float* a;
  const float* b;
  bool b_per_col;
};

// mma16 W L: see the header. Thread (g = lane / 4, q = lane % 4) loads chunk 4 s + q of rows g
// and g + 8 for step s of its warp's range; word j of the two chunks feeds one m16n8k16 mma as
// a0/a2 (row g, k pairs {0,1} / {2,3} of the word) and a1/a3 (row g + 8), with x's f16 for the
// same 4 k as b0/b1 (every column of B is x: all 8 output columns hold the same dot product).
// SASS: W4 L4 and W8 L4 60 registers, W4 L8 94; the first batch's 8 (L8: 16) weight loads all
// issued, unpredicated (one pointer + immediate offsets), before the x staging loop and its
// BAR.SYNC, so the staging's latency hides under them; a later batch (the loop: K = 4096 gives
// W4 L4 three, W8 L4 one, W4 L8 one) has 6 of 8 (L8: 8 of 16) issued before its first F2FP, the
// rest after a few mma (ptxas moves loads across neither the staging loop's branches, nor would a
// __syncwarp or __syncthreads in the loop pin them: tried, it sinks loads past BAR.SYNC there).
// Per 4-byte word: 4 F2FP.F16.E4M3.UNPACK_B (weights only: 0.5 per weight byte vs the
// baseline's 0.75) + 1 HMMA.16816.F32 (the baseline: 2 HMMA per 16-byte chunk pair + x's F2FP).
template <int WARPS, int L>
__global__ void __launch_bounds__(WARPS * 32) mma16_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                           int n, int n_vec, Scales sc, bf16* __restrict__ y) {
  extern __shared__ uint4 x_f16[];  // K halves: chunk c of x (16 e4m3) -> x_f16[2c], x_f16[2c + 1]
  __shared__ float partial[WARPS][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int r_lo = min(static_cast<int>(blockIdx.x) * 16 + g, n - 1), r_hi = min(static_cast<int>(blockIdx.x) * 16 + g + 8, n - 1);
  const int steps = n_vec / 4, per_warp = (steps + WARPS - 1) / WARPS;
  const int s_begin = min(steps, warp * per_warp), s_end = min(steps, s_begin + per_warp);
  const uint4* lo = w + static_cast<size_t>(r_lo) * ldw_vec + q;
  const uint4* hi = w + static_cast<size_t>(r_hi) * ldw_vec + q;
  uint4 wl[L], wh[L];
  const auto load = [&](int s) {
    const uint4 *pl = lo + 4 * s, *ph = hi + 4 * s;
#pragma unroll
    for (int u = 0; u < L; ++u) {
      wl[u] = __ldg(pl + 4 * u);
      wh[u] = __ldg(ph + 4 * u);
    }
  };
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const auto consume = [&](const uint4& l, const uint4& h, int s) {
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
  const bool first_full = s_begin + L <= s_end;
  if (first_full) load(s_begin);
  // x -> f16 in shared memory while the first batch is in flight.
  for (int c = threadIdx.x; c < n_vec; c += WARPS * 32) {
    const uint4 v = x[c];
    const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      h[2 * j] = e4m3x2_to_f16x2(vw[j]);
      h[2 * j + 1] = e4m3x2_to_f16x2(vw[j] >> 16);
    }
    x_f16[2 * c] = make_uint4(h[0], h[1], h[2], h[3]);
    x_f16[2 * c + 1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
  __syncthreads();
  int s = s_begin;
  if (first_full) {
#pragma unroll
    for (int u = 0; u < L; ++u) consume(wl[u], wh[u], s + u);
    for (s += L; s + L <= s_end; s += L) {
      load(s);
#pragma unroll
      for (int u = 0; u < L; ++u) consume(wl[u], wh[u], s + u);
    }
  }
  for (; s < s_end; ++s) consume(__ldg(lo + 4 * s), __ldg(hi + 4 * s), s);
  // acc[0] = row g, acc[2] = row g + 8 (column 2q; every column is the same).
  if (q == 0) {
    partial[warp][g] = acc[0];
    partial[warp][g + 8] = acc[2];
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    const int r = blockIdx.x * 16 + threadIdx.x;
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) v += partial[i][threadIdx.x];
    if (r < n) y[r] = __float2bfloat16_rn(v * sc.a[0] * sc.b[sc.b_per_col ? r : 0]);
  }
}

// The e4m3 bytes of a word as two f16x2 = the values * 2^-8, by integer ops: odd bytes (b1, b3)
// sit in the high byte of each half: magnitude >> 1 puts e4m3's 4 exponent + 3 mantissa bits
// under f16's (exponent field 4 bits narrower: the value * 2^(7 - 15)), the sign stays; even
// bytes (b0, b2) first shifted up by 8. Exact for every non-NaN code, subnormals included.
__device__ __forceinline__ void e4m3x4_bits_to_f16(uint32_t v, uint32_t& even, uint32_t& odd) {
  odd = ((v & 0x7f007f00u) >> 1) | (v & 0x80008000u);
  const uint32_t e = v << 8;
  even = ((e & 0x7f007f00u) >> 1) | (e & 0x80008000u);
}

// core R L BITS: see the header. 256 threads = 8 warps, 8 R rows per block. x in shared memory
// as f16: chunk c (16 e4m3) -> 16 halves at x_f16[2c], x_f16[2c + 1] in the order the weight
// decode produces (F2FP: natural order, prescaled by 2^-8; BITS: [x0, x2], [x1, x3] per word,
// unscaled). SASS: R1 L8 52 registers, R2 L4 58, R1 L16 88, bits R1 L8 55; the first batch's
// R x L loads (8, 8, 16, 8) all issued, unpredicated (one pointer + immediate offsets of 512
// bytes), before the x staging loop and its BAR.SYNC. Where K gives a lane more than one batch
// the loop's batches are interleaved again: R1 L8 6 of 8 loads before the first F2FP (K = 8192),
// R2 L4 4 of 8 (K = 8192 and 4096), R1 L16 11 of 16 (none of these shapes: K = 8192 is one
// batch). Single-batch shapes: R1 L8 at K = 4096 (4096x14336, 4096x4096), R1 L16 at K = 8192,
// every core variant at K = 2048 (L' = 4). Per 16-byte chunk: 8 F2FP (bits: ~14 LOP3 / IMAD.SHL
// / SHF instead), 8 HFMA2, 2 HADD2.F32, 2 FADD; 2 LDS.128 per chunk shared by the R rows.
// PERSIST (session 6, not run yet): one wave of resident blocks (x staged once per block), each
// warp walking row groups warp, warp + all warps, ...; a group's first batch is loaded after the
// previous group's sum.
template <int R, int L, bool BITS, bool NORM = false, bool PERSIST = false>
__global__ void __launch_bounds__(256) core_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x, int n,
                                                  int n_vec, Scales sc, bf16* __restrict__ y) {
  extern __shared__ uint4 x_f16[];
  float* chunk_scale = reinterpret_cast<float*>(x_f16 + 2 * n_vec);  // NORM: chunk c's power of two
  const int lane = threadIdx.x % 32, groups = (n + R - 1) / R;
  int group = blockIdx.x * 8 + threadIdx.x / 32, row0 = group * R;
  const uint4* wr[R];
  const auto point_rows = [&] {
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = w + static_cast<size_t>(min(row0 + r, n - 1)) * ldw_vec + lane;
  };
  point_rows();
  uint4 v[R][L];
  const auto load = [&](int i) {
#pragma unroll
    for (int u = 0; u < L; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) v[r][u] = __ldg(wr[r] + i + u * 32);
  };
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  // Chunk c of every row dotted with x (c = this lane's chunk index).
  const auto consume = [&](const uint4 (&wq)[R], int c) {
    const uint4 x0 = x_f16[2 * c], x1 = x_f16[2 * c + 1];
    const __half2 xh[8] = {*reinterpret_cast<const __half2*>(&x0.x), *reinterpret_cast<const __half2*>(&x0.y),
                           *reinterpret_cast<const __half2*>(&x0.z), *reinterpret_cast<const __half2*>(&x0.w),
                           *reinterpret_cast<const __half2*>(&x1.x), *reinterpret_cast<const __half2*>(&x1.y),
                           *reinterpret_cast<const __half2*>(&x1.z), *reinterpret_cast<const __half2*>(&x1.w)};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t ww[4] = {wq[r].x, wq[r].y, wq[r].z, wq[r].w};
      __half2 h = __float2half2_rn(0.f);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t p0, p1;
        if constexpr (BITS) {
          e4m3x4_bits_to_f16(ww[j], p0, p1);
        } else {
          p0 = e4m3x2_to_f16x2(ww[j]);
          p1 = e4m3x2_to_f16x2(ww[j] >> 16);
        }
        h = __hfma2(*reinterpret_cast<const __half2*>(&p0), xh[2 * j], h);
        h = __hfma2(*reinterpret_cast<const __half2*>(&p1), xh[2 * j + 1], h);
      }
      const float2 f = __half22float2(h);
      if constexpr (NORM) acc[r] = fmaf(f.x + f.y, chunk_scale[c], acc[r]);
      else acc[r] += f.x + f.y;
    }
  };
  const auto consume_batch = [&](int i) {
#pragma unroll
    for (int u = 0; u < L; ++u) {
      uint4 wq[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wq[r] = v[r][u];
      consume(wq, i + u * 32 + lane);
    }
  };
  const bool first_full = L * 32 <= n_vec;
  if (first_full) load(0);
  for (int c = threadIdx.x; c < n_vec; c += 256) {
    const uint4 xv = x[c];
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (BITS) {
        // Same byte order as the weights' decode; * 2^8 undoes the decode's 2^-8 (values <= 448).
        uint32_t e, o;
        e4m3x4_bits_to_f16(xw[j], e, o);
        const __half2 s = __float2half2_rn(256.f);
        const __half2 he = __hmul2(*reinterpret_cast<const __half2*>(&e), s), ho = __hmul2(*reinterpret_cast<const __half2*>(&o), s);
        h[2 * j] = *reinterpret_cast<const uint32_t*>(&he);
        h[2 * j + 1] = *reinterpret_cast<const uint32_t*>(&ho);
      } else if constexpr (NORM) {
        h[2 * j] = e4m3x2_to_f16x2(xw[j]);
        h[2 * j + 1] = e4m3x2_to_f16x2(xw[j] >> 16);
      } else {
        // x * 2^-8: products <= 448 * 1.75 = 784, 8 of them <= 6272 (f16 max 65504).
        const uint32_t a = e4m3x2_to_f16x2(xw[j]), b = e4m3x2_to_f16x2(xw[j] >> 16);
        const __half2 s = __float2half2_rn(1.f / 256.f);
        const __half2 ha = __hmul2(*reinterpret_cast<const __half2*>(&a), s), hb = __hmul2(*reinterpret_cast<const __half2*>(&b), s);
        h[2 * j] = *reinterpret_cast<const uint32_t*>(&ha);
        h[2 * j + 1] = *reinterpret_cast<const uint32_t*>(&hb);
      }
    }
    if constexpr (NORM) {
      // ember's staging (src/cuda/scaled_mm.cu fp8_core_gemv): the chunk divided by the power of
      // two that brings its largest |x| into [1, 2), the power kept per chunk.
      __half2 amax = __float2half2_rn(0.f);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = __hmax2(amax, __habs2(*reinterpret_cast<const __half2*>(&h[j])));
      const float m = fmaxf(__low2float(amax), __high2float(amax));
      const int e = m > 0.f ? static_cast<int>((__float_as_uint(m) >> 23) & 0xff) - 127 : 0;
      const __half2 down = __float2half2_rn(__uint_as_float(static_cast<uint32_t>(127 - e) << 23));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&h[j]), down);
        h[j] = *reinterpret_cast<const uint32_t*>(&v);
      }
      chunk_scale[c] = __uint_as_float(static_cast<uint32_t>(127 + e) << 23) * (1.f / 256.f);
    }
    x_f16[2 * c] = make_uint4(h[0], h[1], h[2], h[3]);
    x_f16[2 * c + 1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
  __syncthreads();
  for (;;) {
  int i = 0;
  if (first_full) {
    consume_batch(0);
    for (i = L * 32; i + L * 32 <= n_vec; i += L * 32) {
      load(i);
      consume_batch(i);
    }
  }
  for (int c = i + lane; c < n_vec; c += 32) {
    uint4 wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wq[r] = __ldg(wr[r] + (c - lane));
    consume(wq, c);
  }
  // Both decodes leave the products * 2^-8.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  if (lane < R && row0 + lane < n) {
    float mine = acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r) mine = lane == r ? acc[r] : mine;
    const int row = row0 + lane;
    y[row] = __float2bfloat16_rn(mine * 256.f * sc.a[0] * sc.b[sc.b_per_col ? row : 0]);
  }
  if constexpr (!PERSIST) break;
  group += static_cast<int>(gridDim.x) * 8;
  if (group >= groups) break;
  row0 = group * R;
  point_rows();
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if (first_full) load(0);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

struct Shape {
  int k, n;
};

struct Problem {
  Shape s;
  const uint8_t* w0;  // copy 0; copy c at w0 + c * stride bytes
  size_t stride;
  int copies;
  const uint8_t* x;
  Scales sc;
  bf16* y;
  size_t bytes() const { return static_cast<size_t>(s.k) * s.n; }
  const uint8_t* w(int c) const { return w0 + c * stride; }
};

using Launch = std::function<void(const Problem&, const uint8_t* w, cudaStream_t)>;

struct Variant {
  std::string name;
  Launch launch;
};

// launch_mma_gemv for one activation row: (n + 15) / 16 blocks of 4 warps, NT = 1.
void launch_ember(const Problem& p, const uint8_t* w, cudaStream_t st) {
  const auto blocks = static_cast<unsigned>((p.s.n + 15) / 16);
  ember_mma_gemv<1><<<blocks, kMmaWarps * 32, 0, st>>>(w, p.s.k, p.x, p.s.k, 1, p.s.n, p.s.k, p.sc.a, false, p.sc.b, p.sc.b_per_col,
                                                       p.y, p.s.n);
}

// The largest of {1, 2, 4, ..., L} not above `units` (whole batches on the small shapes).
int batch_for(int L, int units) {
  int b = 1;
  while (2 * b <= L && 2 * b <= units) b *= 2;
  return b;
}

template <int WARPS, int L> void launch_mma16_l(const Problem& p, const uint8_t* w, cudaStream_t st) {
  const auto blocks = static_cast<unsigned>((p.s.n + 15) / 16);
  mma16_kernel<WARPS, L><<<blocks, WARPS * 32, p.s.k * 2, st>>>(reinterpret_cast<const uint4*>(w), p.s.k / 16,
                                                                 reinterpret_cast<const uint4*>(p.x), p.s.n, p.s.k / 16, p.sc, p.y);
}

template <int WARPS, int L> void launch_mma16(const Problem& p, const uint8_t* w, cudaStream_t st) {
  const int per_warp = (p.s.k / 64 + WARPS - 1) / WARPS;
  switch (batch_for(L, per_warp)) {
    case 1: return launch_mma16_l<WARPS, 1>(p, w, st);
    case 2: return launch_mma16_l<WARPS, 2>(p, w, st);
    case 4: return launch_mma16_l<WARPS, 4>(p, w, st);
    default: return launch_mma16_l<WARPS, (L >= 8 ? 8 : 4)>(p, w, st);
  }
}

template <int R, int L, bool BITS, bool NORM = false, bool PERSIST = false>
void launch_core_l(const Problem& p, const uint8_t* w, cudaStream_t st) {
  const size_t smem = p.s.k * 2 + (NORM ? p.s.k / 4 : 0);
  auto blocks = static_cast<unsigned>((p.s.n + 8 * R - 1) / (8 * R));
  if constexpr (PERSIST) {
    int sms = 0, per_sm = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, core_kernel<R, L, BITS, NORM, PERSIST>, 256, smem));
    blocks = std::min(blocks, static_cast<unsigned>(sms * per_sm));
  }
  core_kernel<R, L, BITS, NORM, PERSIST><<<blocks, 256, smem, st>>>(reinterpret_cast<const uint4*>(w), p.s.k / 16,
                                                          reinterpret_cast<const uint4*>(p.x), p.s.n, p.s.k / 16, p.sc, p.y);
}

template <int R, int L, bool BITS, bool NORM = false, bool PERSIST = false>
void launch_core(const Problem& p, const uint8_t* w, cudaStream_t st) {
  switch (batch_for(L, p.s.k / 512)) {
    case 1: return launch_core_l<R, 1, BITS, NORM, PERSIST>(p, w, st);
    case 2: return launch_core_l<R, 2, BITS, NORM, PERSIST>(p, w, st);
    case 4: return launch_core_l<R, 4, BITS, NORM, PERSIST>(p, w, st);
    case 8: return launch_core_l<R, (L >= 8 ? 8 : 4), BITS, NORM, PERSIST>(p, w, st);
    default: return launch_core_l<R, (L >= 16 ? 16 : L), BITS, NORM, PERSIST>(p, w, st);
  }
}

// e4m3fn code -> value (exact in double).
double e4m3_value(uint8_t c) {
  const int sign = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -v : v;
}

// "randn" on the command line: weights and x are e4m3 of N(0, 1) samples, as ember's decode bench
// and torch_decode.py make them, instead of uniform codes (the decode bench times fp8_core_gemv
// ~0.5 us slower than this probe does; the data is one difference between the two harnesses).
bool g_randn_codes = false;
// "x20" on the command line: also time each variant as ember's decode bench does, 20 launches per
// graph cycling through the copies (column "us x20"; the gemv probe's "harness" section found the
// each-copy-once graphs ~0.6 us slower per launch than 20-launch ones for the same kernel).
bool g_twenty = false;
// "distinct" on the command line: every copy but the last (the checked one) holds other codes
// (a device hash, e4m3 of about N(0, 1)), as the decode bench's copies do; by default all copies
// hold the same bytes. The last data difference between the two harnesses that the FP8 M = 1 gap
// (15.03 us here at x20, 15.68-15.73 in the bench) leaves. Measured (session 8, same call, randn
// x20, "core R2 L4"): 14.86-14.87 us with and without it. The data is not the gap either.
bool g_distinct = false;

// Codes of about N(0, 1) (Box-Muller over a hash of the index), seeded per copy.
__global__ void fill_distinct_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ seed;
    h ^= h >> 15, h *= 0x85EBCA77u, h ^= h >> 13, h *= 0xC2B2AE3Du, h ^= h >> 16;
    const float u1 = ((h >> 16) + 1) * (1.f / 65537.f), u2 = (h & 0xffffu) * (1.f / 65536.f);
    const float v = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    p[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

void run_shape(Shape s, const std::vector<Variant>& variants, uint8_t* pool, size_t pool_bytes, uint8_t* x_dev, float* sa_dev,
               float* sb_dev, bf16* y_dev) {
  Problem p{};
  p.s = s;
  const size_t bytes = p.bytes();
  p.stride = (bytes + 255) / 256 * 256;
  p.copies = static_cast<int>(std::max<size_t>(2, ((size_t{400} << 20) + bytes - 1) / bytes + 1));
  p.copies = static_cast<int>(std::min<size_t>(p.copies, pool_bytes / p.stride));
  p.w0 = pool;
  p.x = x_dev;
  p.y = y_dev;
  std::mt19937 rng(1234u + s.k * 7u + s.n);
  std::normal_distribution<float> normal(0.f, 1.f);
  const auto code = [&] {
    if (g_randn_codes) return static_cast<uint8_t>(__nv_cvt_float_to_fp8(normal(rng), __NV_SATFINITE, __NV_E4M3));
    uint8_t c;
    do c = static_cast<uint8_t>(rng() & 0xff);
    while ((c & 0x7f) == 0x7f);
    return c;
  };
  std::vector<uint8_t> w_host(bytes), x_host(s.k);
  for (auto& c : w_host) c = code();
  for (auto& c : x_host) c = code();
  std::uniform_real_distribution<float> scale(0.1f, 1.1f);
  std::vector<float> sb_host(s.n);
  for (auto& v : sb_host) v = scale(rng);
  const float sa_host = scale(rng);
  for (int c = 0; c < p.copies; ++c) {
    if (g_distinct && c + 1 < p.copies) fill_distinct_kernel<<<1024, 256>>>(pool + c * p.stride, bytes, 977u * (c + 1));
    else CHECK(cudaMemcpy(pool + c * p.stride, w_host.data(), bytes, cudaMemcpyHostToDevice));
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(x_dev, x_host.data(), s.k, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sa_dev, &sa_host, sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sb_dev, sb_host.data(), s.n * sizeof(float), cudaMemcpyHostToDevice));
  double table[256];
  for (int c = 0; c < 256; ++c) table[c] = e4m3_value(static_cast<uint8_t>(c));
  std::vector<double> dot(s.n), xd(s.k);
  for (int k = 0; k < s.k; ++k) xd[k] = table[x_host[k]];
  for (int n = 0; n < s.n; ++n) {
    const uint8_t* wr = &w_host[static_cast<size_t>(n) * s.k];
    double acc = 0.0;
    for (int k = 0; k < s.k; ++k) acc += table[wr[k]] * xd[k];
    dot[n] = acc * sa_host;
  }
  for (const bool rowwise : {false, true}) {
    p.sc = Scales{sa_dev, sb_dev, rowwise};
    std::vector<double> ref(s.n);
    double ref_max = 0.0;
    for (int n = 0; n < s.n; ++n) {
      ref[n] = dot[n] * sb_host[rowwise ? n : 0];
      ref_max = std::max(ref_max, std::fabs(ref[n]));
    }
    std::printf("\n1x%dx%d %s (%.1f MB, %d copies)\n%-16s %9s %8s %8s %9s\n", s.k, s.n, rowwise ? "rowwise" : "tensorwise", bytes / 1e6,
                p.copies, "variant", "us", "TB/s", "speedup", "err");
    float base_us = 0.f;
    for (const Variant& v : variants) {
      const auto [err, us] =
          check_and_time([&](int c, cudaStream_t st) { v.launch(p, p.w(c), st); }, p.copies, y_dev, s.n, ref, ref_max);
      if (base_us == 0.f) base_us = us;
      const float us20 = g_twenty ? time_graph([&](cudaStream_t st) {
        for (int i = 0; i < 20; ++i) v.launch(p, p.w(i % p.copies), st);
      }, 20) : 0.f;
      std::printf("%-16s %9.2f %8.2f %7.3fx %9.1e%s", v.name.c_str(), us, bytes / us / 1e6, base_us / us, err, err > 1e-2 ? " FAIL" : "");
      if (g_twenty) std::printf("  x20 %.2f us", us20);
      std::printf("\n");
    }
  }
}

// Arguments: shapes to run as "KxN" (none: all four).
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    g_randn_codes |= std::string(argv[i]) == "randn";
    g_twenty |= std::string(argv[i]) == "x20";
    g_distinct |= std::string(argv[i]) == "distinct";
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const std::vector<Shape> shapes = {{4096, 14336}, {8192, 28672}, {4096, 4096}, {2048, 768}};
  const size_t pool_bytes = size_t{560} << 20;  // >= 400 MB of copies, 2 of the largest (235 MB)
  uint8_t* pool = nullptr;
  CHECK(cudaMalloc(&pool, pool_bytes));
  uint8_t* x_dev = nullptr;
  float *sa_dev = nullptr, *sb_dev = nullptr;
  bf16* y_dev = nullptr;
  CHECK(cudaMalloc(&x_dev, 8192));
  CHECK(cudaMalloc(&sa_dev, sizeof(float)));
  CHECK(cudaMalloc(&sb_dev, 28672 * sizeof(float)));
  CHECK(cudaMalloc(&y_dev, 28672 * sizeof(bf16)));
  // The first variant is ember's kernel: the speedups are against it.
  const std::vector<Variant> variants = {
      {"ember mma", launch_ember},
      {"mma16 W4 L4", launch_mma16<4, 4>},
      {"mma16 W4 L8", launch_mma16<4, 8>},
      {"mma16 W8 L4", launch_mma16<8, 4>},
      {"core R1 L8", launch_core<1, 8, false>},
      {"core R2 L4", launch_core<2, 4, false>},
      {"core R2 L4 norm", launch_core<2, 4, false, true>},
      {"core R2 L4 persist", launch_core<2, 4, false, false, true>},
      {"core R1 L16", launch_core<1, 16, false>},
      {"core bits R1 L8", launch_core<1, 8, true>},
  };
  for (const Shape& s : shapes) {
    const std::string name = std::to_string(s.k) + "x" + std::to_string(s.n);
    bool named = false, wanted = false;
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "randn" || std::string(argv[i]) == "x20" || std::string(argv[i]) == "distinct") continue;
      named = true;
      wanted |= name == argv[i];
    }
    if (named && !wanted) continue;
    run_shape(s, variants, pool, pool_bytes, x_dev, sa_dev, sb_dev, y_dev);
  }
  CHECK(cudaFree(pool));
  CHECK(cudaFree(x_dev));
  CHECK(cudaFree(sa_dev));
  CHECK(cudaFree(sb_dev));
  CHECK(cudaFree(y_dev));
  return 0;
}
