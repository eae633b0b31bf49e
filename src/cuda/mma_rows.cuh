// out[c, n] = sum_k x[c, k] * W[n, k] (+ bias[n]) for 2..8 rows c of 16-bit x (decode with a few
// sequences) on tensor cores, the rows of x as the mma's columns, each weight byte read once. W is
// unit-stride along K with 16-byte aligned rows: 16-bit (gemv.cu's linear) or FP8 codes with fp32
// decoding scales (fp8_linear.cu). Device code and its host launcher; sm_80+ (mma.sync).
//
// A block of 4, 8 or 16 warps owns 16 weight rows (n0 .. n0 + 15) and splits K's steps among its
// warps. A step is one 16-byte load of rows g and g + 8 per thread (lane = 4 g + q): 16 FP8 codes
// or 8 16-bit values each at k = step * 4 L + q L .. + L - 1 (L elements per load), and the same L
// elements of x row g (the mma's column g, zero past m). They feed L / 4 mma.sync m16n8k16, FP8
// codes decoded exactly to XT, the k order permuted alike on both sides (moe.cu's down_mma_steps
// layout). FP8: a step's f32 sums are scaled by the rows' 128x128 block scale (one per 2 steps:
// n0 .. n0 + 15 share a block row); per-row and tensorwise scales multiply the final sums. The
// warps' sums meet in shared memory; thread (row, column) writes out[column][n0 + row].
// Versions and measurements: fp8_linear.cu (v3) and gemv.cu (v15).
// Not taken (session 26, branch s26-trials; one build, a host switch, two alternating runs, H200,
// us, this -> trial; docs/perf-runs/2026-12-01-s26-tables.txt): K's batches dealt to a block's
// warps round robin (74 registers for 16-bit, 102-106 FP8): FP8 2-5% faster on most shapes
// (8x4096x14336 21.35-21.41 -> 20.56, 8x2048x512 3.18 -> 2.80) but slower at 2x8192x28672 (63.2 ->
// 68.2) and 8x2048x8192 (7.35 -> 7.52), no rule found; 16-bit mixed (8x2048x512 3.44 -> 3.16,
// 8x4096x2048 7.50 -> 7.67). 8 steps per batch for 16-bit weights (118 registers): 8x2048x512
// 3.44 -> 4.23, the rest within 1.5%; on large weights forced onto the kernel it closed most of
// the gap to cuBLAS (8x4096x14336 35.6 -> 31.6, cuBLAS ~30.3) without passing it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/dependent_launch.cuh"
#include "cuda/grouped_mm.h"
#include "cuda/mma.cuh"
#include "cuda/native_float.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {

// kMmaRowsMaxWarps: warps of a block at most (blockDim.x / 32); kMmaRowsSteps: steps per batch of loads.
constexpr int kMmaRowsMaxWarps = 16, kMmaRowsSteps = 4, kMmaRowsMaxColumns = 8;

/// The weight's element type: XT itself (16-bit weights) or FP8 codes of kFormat.
template <class XT, bool kFp8, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kMmaRowsMaxWarps * 32)
    mma_rows_kernel(const uint4* __restrict__ w, int64_t ldw_vec, int n, int steps, const XT* __restrict__ x, int64_t ldx, int m,
                    const float* __restrict__ scale, int scale_kind, int64_t scale_ld, const XT* __restrict__ bias,
                    XT* __restrict__ out, int64_t ldo) {
  constexpr int kPerLoad = kFp8 ? 16 : 8;     // weight elements per 16-byte load
  constexpr int kXLoads = kPerLoad / 8;       // 16-byte loads of x per step
  using gmm::WeightScale;
  wait_for_previous_kernel();
  __shared__ float sums[kMmaRowsMaxWarps][16][kMmaRowsMaxColumns];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * 16;
  const uint4* top = w + static_cast<int64_t>(min(n0 + g, n - 1)) * ldw_vec + q;  // rows past N repeat the last
  const uint4* bottom = w + static_cast<int64_t>(min(n0 + g + 8, n - 1)) * ldw_vec + q;
  const bool column = g < m;
  const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(column ? g : 0) * ldx) + kXLoads * q;
  const float* block_scales = kFp8 && scale_kind == WeightScale::Block128 ? scale + static_cast<int64_t>(n0 / 128) * scale_ld : nullptr;
  const int per = (steps + warps - 1) / warps, s_begin = min(steps, warp * per), s_end = min(steps, s_begin + per);
  float run[4] = {};
  const auto batch = [&](int s, int count) {  // steps s .. s + count - 1, count <= kMmaRowsSteps
    uint4 wt[kMmaRowsSteps], wb[kMmaRowsSteps], xv[kMmaRowsSteps][kXLoads];
    float step_scale[kMmaRowsSteps];
#pragma unroll
    for (int l = 0; l < kMmaRowsSteps; ++l) {
      const bool ok = l < count;
      wt[l] = ok ? __ldg(top + 4 * (s + l)) : make_uint4(0, 0, 0, 0);
      wb[l] = ok ? __ldg(bottom + 4 * (s + l)) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < kXLoads; ++i) xv[l][i] = ok && column ? __ldg(xr + 4 * kXLoads * (s + l) + i) : make_uint4(0, 0, 0, 0);
      step_scale[l] = block_scales && ok ? __ldg(block_scales + (s + l) / 2) : 1.f;  // 128 codes = 2 steps
    }
#pragma unroll
    for (int l = 0; l < kMmaRowsSteps; ++l) {
      if (l >= count) break;
      const uint32_t t[4] = {wt[l].x, wt[l].y, wt[l].z, wt[l].w}, b[4] = {wb[l].x, wb[l].y, wb[l].z, wb[l].w};
      uint32_t h[2 * kXLoads * 2];
#pragma unroll
      for (int i = 0; i < kXLoads; ++i) h[4 * i] = xv[l][i].x, h[4 * i + 1] = xv[l][i].y, h[4 * i + 2] = xv[l][i].z, h[4 * i + 3] = xv[l][i].w;
      float c[4] = {};
      float(&sum)[4] = kFp8 ? c : run;  // FP8 sums a step apart to scale it; 16-bit weights straight into run
#pragma unroll
      for (int j = 0; j < kPerLoad / 4; ++j) {  // elements k = step base + q L + 4 j + (0..3)
        if constexpr (kFp8) {
          const uint32_t a[4] = {decode_fp8x2<XT, kFormat>(t[j]), decode_fp8x2<XT, kFormat>(b[j]), decode_fp8x2<XT, kFormat>(t[j] >> 16),
                                 decode_fp8x2<XT, kFormat>(b[j] >> 16)};
          mma16816<XT>(sum, a, h[2 * j], h[2 * j + 1]);
        } else {
          const uint32_t a[4] = {t[2 * j], b[2 * j], t[2 * j + 1], b[2 * j + 1]};
          mma16816<XT>(sum, a, h[2 * j], h[2 * j + 1]);
        }
      }
      if constexpr (kFp8) {
#pragma unroll
        for (int i = 0; i < 4; ++i) run[i] = fmaf(c[i], step_scale[l], run[i]);
      }
    }
  };
  int s = s_begin;
  for (; s + kMmaRowsSteps <= s_end; s += kMmaRowsSteps) batch(s, kMmaRowsSteps);
  if (s < s_end) batch(s, s_end - s);
  dependents_may_launch();
  // run = {D[g][2q], D[g][2q + 1], D[g + 8][2q], D[g + 8][2q + 1]}: rows g, g + 8; columns 2q, 2q + 1.
  sums[warp][g][2 * q] = run[0];
  sums[warp][g][2 * q + 1] = run[1];
  sums[warp][g + 8][2 * q] = run[2];
  sums[warp][g + 8][2 * q + 1] = run[3];
  __syncthreads();
  const int row = threadIdx.x % 16, col = threadIdx.x / 16;  // threads 0..127 = 16 rows x 8 columns
  if (col >= m || n0 + row >= n) return;
  float v = 0.f;
  for (int k = 0; k < warps; ++k) v += sums[k][row][col];
  const int r = n0 + row;
  const float row_scale = !kFp8 ? 1.f : scale_kind == WeightScale::Tensorwise ? scale[0] : scale_kind == WeightScale::Rowwise ? scale[r] : 1.f;
  out[static_cast<int64_t>(col) * ldo + r] = from_float<XT>(fmaf(v, row_scale, bias ? to_float(bias[r]) : 0.f));
}

/// One launch of mma_rows_kernel: out [m, n] (rows ldo apart) = x [m, k] (rows ldx apart) times
/// W [n, k] (rows ldw elements apart, 16-byte aligned, k a multiple of 4 L), 2 <= m <= 8.
template <class XT> struct MmaRowsArgs {
  const void* w;
  int64_t ldw;  // in weight elements (FP8 codes or XT values)
  const XT* x;
  int64_t ldx;
  const XT* bias;  // [n] or nullptr
  XT* out;
  int64_t ldo, m, n, k;
  gmm::WeightScale scale;  // FP8 only
  bool pdl;                // a programmatic dependent launch (dependent_launch.cuh)
};

/// Whether mma_rows_kernel takes these rows: 16-bit x, 2..8 rows, k a multiple of a step (64 FP8
/// codes or 32 values), every row 16-byte aligned, sm_80+.
inline bool mma_rows_applies(int64_t m, int64_t n, int64_t k, size_t weight_itemsize, const void* w, int64_t ldw, const void* x,
                             int64_t ldx, size_t x_itemsize, int device) {
  const int64_t step = 4 * 16 / static_cast<int64_t>(weight_itemsize);
  return x_itemsize == 2 && m >= 2 && m <= kMmaRowsMaxColumns && k % step == 0 && k / step <= INT32_MAX && n <= INT32_MAX &&
         (ldw * static_cast<int64_t>(weight_itemsize)) % 16 == 0 && (ldx * 2) % 16 == 0 && aligned16(w) && aligned16(x) &&
         compute_capability(device) >= 80;
}

/// Warps per block: the most of 16 and 8 that still give every warp a whole batch of steps and
/// fit the grid in one wave of resident blocks, else 4 (the least the epilogue's 128 threads
/// need). Session 25's sweep (H200, FP8 weights, bf16 x, 1-8 rows) found this the fastest of 4, 8
/// and 16 on every shape: 2048x4096 8 warps, 4096x2048 16, 2048x8192 and 4096x14336 4.
template <class XT, bool kFp8, __nv_fp8_interpretation_t kFormat = __NV_E4M3>
void launch_mma_rows(const MmaRowsArgs<XT>& a, int device, cudaStream_t stream) {
  constexpr int kPerLoad = kFp8 ? 16 : 8;
  const int64_t tiles = (a.n + 15) / 16, steps = a.k / (4 * kPerLoad);
  const auto kernel = mma_rows_kernel<XT, kFp8, kFormat>;
  int warps = 4;
  for (int candidate : {16, 8}) {
    const int per_sm = resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), candidate * 32, device);
    if (steps >= int64_t{candidate} * kMmaRowsSteps && tiles <= int64_t{per_sm} * device_properties(device).multiProcessorCount) {
      warps = candidate;
      break;
    }
  }
  DependentLaunch(dim3(static_cast<unsigned>(tiles)), warps * 32, 0, stream, a.pdl)(
      kernel, static_cast<const uint4*>(a.w), a.ldw / kPerLoad, static_cast<int>(a.n), static_cast<int>(steps), a.x, a.ldx,
      static_cast<int>(a.m), a.scale.ptr, a.scale.kind, a.scale.s1, a.bias, a.out, a.ldo);
}

}  // namespace ember::cuda
