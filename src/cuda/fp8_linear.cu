// Weight-only FP8 linear on CUDA (fp8_linear): out[m, n] = sum_k x[m, k] * w[n, k] * s(n, k)
// (+ bias[n]), x f32/f16/bf16, w [N, K] e4m3fn or e5m2 with fp32 decoding scales.
//   mma_rows_kernel  2..8 rows of 16-bit x (decode with a few sequences), K a multiple of 64, w
//                 unit-stride along K with 16-byte rows, sm_80+: tensor cores, the rows of x as
//                 the mma's columns, each weight byte read once (cuda/mma_rows.cuh, shared with
//                 gemv.cu's 16-bit weights).
//   rows_kernel   up to 8 rows of x otherwise (one row of 16-bit x; f32 x; K % 64 != 0), w
//                 unit-stride along K with 16-byte rows and K a multiple of 16: a warp (or half a
//                 warp, v2) per weight row n streams it with
//                 16-byte loads (16 codes each) in whole batches of kLoads per lane, then one
//                 predicated batch; each load is decoded once through the hardware fp8x2 -> half2
//                 converter and dotted with every x row, read through L1 (all warps read the same
//                 x). A 128x128 block scale is one number per 8 loads of a row (128 codes) and
//                 multiplies that load's f32 partial sum; per-row and tensorwise scales multiply
//                 the final sum.
//   otherwise     e4m3fn weights: grouped_mm's rows problem with one group of all rows (run_rows:
//                 the mma tile kernel for prefill), then the bias; e5m2 weights: dequantized to f32,
//                 then linear (grouped_mm's kernels take e4m3fn only).
// The two kernels here are programmatic dependent launches below 16 MiB of weights, triggered
// after the main loop (gemv.cu's rule).
// Versions (H200, bf16 x, one row, bench/decode_bench.cpp "weight_fp8", us; graph replay / eager):
//   v0 the engine's path before this op: scaled_grouped_mm with one group (a fill for the offsets,
//      grouped_mm's prep kernel and its decode kernel): 2048x4096 12.96 / 18.45 (bf16 linear 6.05
//      / 7.38), 2048x512 9.28 / 18.31 (2.01 / 6.28), 4096x2048 11.84 / 20.19 (6.66 / 7.99),
//      4096x14336 29.70 / 34.03 (30.10 / 32.23): slower than bf16 with half the bytes.
//   v1 rows_kernel, a warp per weight row: 2048x4096 4.73 / 5.28, 2048x512 2.78 / 4.45, 4096x2048
//      4.52 / 5.97, 2048x8192 8.51 / 9.75, 4096x14336 19.19 / 21.03 (3.06 TB/s), 14336x4096 17.55,
//      8192x28672 60.89 (3.86 TB/s; bf16 107.46). Rows of x cost FMAs and L1 reads of x per row:
//      2 rows of 2048x4096 8.87 us (bf16 6.95), 4 rows 11.35 (8.07), 8 rows 18.31 (12.66; the old
//      path 22.50), 8 rows of 4096x14336 94.19 (bf16 67.62, the old path 88.55). At 8 rows the f32
//      FMAs alone would need the SM's whole FMA rate to keep up with its share of HBM: more rows
//      want tensor cores (as moe.cu's mma kernels), not done.
//   v2 16 lanes per weight row where 32 would leave each lane half a batch (1024 < K <= 2048) and
//      the grid keeps >= 256 blocks. One build, two alternating runs (us, 32 -> 16 lanes):
//      2048x8192 8.67-8.71 -> 6.84-6.89, 2 rows of 2048x4096 8.96 -> 7.01-7.05, 4 rows 11.36-11.42
//      -> 10.81-10.84, 1 row 4.82-4.83 -> 4.75-4.76; but 2048x512 (16 blocks) 2.86 -> 3.46-3.49
//      and 1024x4096 (4 loads a lane either way) 3.18-3.20 -> 3.47-3.50, which keep 32.
//   v3 (session 25) mma_rows_kernel for 2..8 rows of 16-bit x. Its first form, blocks of 4 warps
//      (session 25 call 1, us, rows kernel -> mma): 8x2048x4096 18.55 -> 5.86, 8x4096x14336 93.8 ->
//      19.7, 2x2048x4096 7.18 -> 5.79, but 2x4096x2048 6.97 -> 9.13 (128 blocks of 4 warps: about 4
//      warps an SM). Then 4, 8 and 16 warps a block (call 2): each shape wants the most warps that
//      keep a whole batch per warp and one wave (mma_rows.cuh's launch_mma_rows). One build, two alternating runs
//      (call 3, us, rows kernel -> mma by that rule; bf16 linear): 2x4096x2048 7.02 -> 4.73 (8.62),
//      8x4096x2048 18.03 -> 4.93 (12.04), 8x2048x512 10.30 -> 3.19 (4.56), 4x2048x4096 10.77 -> 4.34
//      (8.21), 8x2048x8192 30.62 -> 7.21 (22.00), 8x4096x14336 94.28 -> 21.12 (67.90), 8x8192x28672
//      362.4 -> 65.24 (265.26). At one row the rows kernel stays: 1x4096x14336 19.30 against mma's
//      20.31, 1x8192x28672 60.98 against 63.79 (only 1x2048x4096 is faster by mma, 4.32 against
//      4.74). ncu (8x4096x14336, 4 warps): DRAM 50% of peak, issue slots 37% busy, 25% achieved
//      occupancy (94 registers): latency-bound, not conversion-bound. A trial decoding the codes by
//      bit moves instead of the converter ran 2-13% slower (its results were wrong too: __byte_perm
//      ignores prmt's sign-replicating selectors). (this)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <climits>
#include <type_traits>

#include "backend.h"
#include "cuda/dependent_launch.cuh"
#include "cuda/grouped_mm.h"
#include "cuda/mma_rows.cuh"
#include "cuda/moe_elements.cuh"
#include "cuda/native_float.cuh"
#include "cuda/runtime.h"
#include "ember/ops.h"

namespace ember::cuda {
namespace {

using gmm::from_f;
using gmm::load8;
using gmm::to_f;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kLoads = 8;    // 16-byte weight loads per lane and batch
constexpr int kMaxRows = 8;  // rows of x the rows kernel takes
using gmm::WeightScale;

// x[0..15] . w[0..15]; x 16-byte aligned.
template <class XT> __device__ __forceinline__ float dot16(const XT* x, const float (&w)[16]) {
  float lo[8], hi[8];
  load8(x, lo);
  load8(x + 8, hi);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(lo[i], w[i], acc);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(hi[i], w[8 + i], acc);
  return acc;
}

// R >= m rows of x (m <= R), kLanes lanes (16 or 32) per weight row. w rows ldw_vec 16-byte units
// apart, k_vec units long; x rows ldx elements apart; the block scales' rows scale_ld apart; out
// [m, n] contiguous.
template <class XT, int R, int kLanes, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kThreads) rows_kernel(const uint4* __restrict__ w, int64_t ldw_vec, int n, int k_vec,
                                                        const XT* __restrict__ x, int64_t ldx, int m, const float* __restrict__ scale,
                                                        int scale_kind, int64_t scale_ld, const XT* __restrict__ bias,
                                                        XT* __restrict__ out) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x % kLanes, row = blockIdx.x * (kThreads / kLanes) + threadIdx.x / kLanes;
  if (row >= n) return;  // all kLanes lanes of the row
  const uint4* wr = w + static_cast<int64_t>(row) * ldw_vec;
  const float* block_scales = scale_kind == WeightScale::Block128 ? scale + static_cast<int64_t>(row / 128) * scale_ld : nullptr;
  float acc[R] = {};
  // Loads u of a batch from unit i: units i + kLanes u + lane. All loads (and their block scales)
  // are issued before any is decoded, so they are in flight together.
  const auto batch = [&](int i, bool tail) {
    uint4 v[kLoads];
    float s[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = i + kLanes * u + lane;
      const bool ok = !tail || c < k_vec;
      v[u] = ok ? __ldg(wr + c) : make_uint4(0, 0, 0, 0);
      s[u] = block_scales && ok ? __ldg(block_scales + c / 8) : 1.f;  // 8 units = 128 codes
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = i + kLanes * u + lane;
      if (tail && c >= k_vec) continue;
      float wf[16];
      decode_fp8x16<kFormat>(v[u], wf);
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < m) acc[r] = fmaf(s[u], dot16(x + r * ldx + 16 * static_cast<int64_t>(c), wf), acc[r]);
    }
  };
  int i = 0;
  for (; i + kLanes * kLoads <= k_vec; i += kLanes * kLoads) batch(i, false);
  if (i < k_vec) batch(i, true);
  dependents_may_launch();
  const float row_scale = scale_kind == WeightScale::Tensorwise ? scale[0] : scale_kind == WeightScale::Rowwise ? scale[row] : 1.f;
  const float b = bias ? to_f(bias[row]) : 0.f;
  // The row's lanes only: with 16 lanes per row the other half of the warp may have exited.
  const unsigned lanes = kLanes == 32 ? 0xffffffffu : 0xffffu << (threadIdx.x % 32 / kLanes * kLanes);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) v += __shfl_xor_sync(lanes, v, off);
    if (lane == 0 && r < m) out[static_cast<int64_t>(r) * n + row] = from_f<XT>(fmaf(v, row_scale, b));
  }
}

// The front end's [1], [N, 1] or [ceil(N/128), ceil(K/128)] scale (contiguous) as grouped_mm's
// one-group [1, R, C] form; weight_scale tells the block scales' one-column case (K <= 128) from
// per-row scales by R.
WeightScale one_group_scale(const Tensor& scale, int64_t n) {
  return gmm::weight_scale(scale.reshape({1, -1, scale.dim() == 2 ? scale.size(1) : 1}), n);
}

template <class XT, __nv_fp8_interpretation_t kFormat>
void launch_rows(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out, int device) {
  const int64_t m = x.size(0), n = weight.size(0), k = weight.size(1);
  const WeightScale ws = one_group_scale(scale, n);
  const bool pdl = decode_gemv_dependent(n * k, device);
  // 16 lanes per row where that fills a lane's batch that 32 lanes would leave half empty (1024 <
  // K <= 2048) and the grid still has >= 256 blocks (v2 has the numbers).
  const bool half = k / 16 > 8 * kLoads && k / 16 <= 16 * kLoads && n >= 4096;
  const int64_t rows_per_block = half ? kThreads / 16 : kWarps;
  const DependentLaunch launch(dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block)), kThreads, 0, current_raw_stream(device), pdl);
  const auto run = [&](auto kernel) {
    launch(kernel, static_cast<const uint4*>(weight.raw_data()), weight.stride(0) / 16, static_cast<int>(n), static_cast<int>(k / 16),
           static_cast<const XT*>(x.raw_data()), x.stride(0), static_cast<int>(m), ws.ptr, ws.kind, ws.s1, bias.defined() ? static_cast<const XT*>(bias.raw_data()) : nullptr,
           static_cast<XT*>(out.raw_data()));
  };
  const auto run_lanes = [&](auto rows_tag) {
    constexpr int R = decltype(rows_tag)::value;
    if (half) run(rows_kernel<XT, R, 16, kFormat>);
    else run(rows_kernel<XT, R, 32, kFormat>);
  };
  if (m == 1) run_lanes(std::integral_constant<int, 1>());
  else if (m == 2) run_lanes(std::integral_constant<int, 2>());
  else if (m <= 4) run_lanes(std::integral_constant<int, 4>());
  else run_lanes(std::integral_constant<int, kMaxRows>());
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class XT, __nv_fp8_interpretation_t kFormat>
void launch_fp8_mma_rows(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out, int device) {
  const int64_t n = weight.size(0), k = weight.size(1);
  MmaRowsArgs<XT> a{weight.raw_data(), weight.stride(0), static_cast<const XT*>(x.raw_data()), x.stride(0),
                    bias.defined() ? static_cast<const XT*>(bias.raw_data()) : nullptr, static_cast<XT*>(out.raw_data()), n, x.size(0), n, k,
                    one_group_scale(scale, n), decode_gemv_dependent(n * k, device)};
  launch_mma_rows<XT, true, kFormat>(a, device, current_raw_stream(device));
  EMBER_CUDA_CHECK_LAUNCH();
}

// 2..8 rows of 16-bit x with K % 64 == 0 on tensor cores (sm_80+); else the rows kernel. (At one
// row the rows kernel is as fast or faster on every shape but 2048x4096: session 25, PERF.md.)
template <class XT> void launch_small_batch(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out, int device) {
  const bool e4m3 = weight.dtype() == kFloat8_e4m3fn;
  if constexpr (!std::is_same_v<XT, float>) {
    if (mma_rows_applies(x.size(0), weight.size(0), weight.size(1), 1, weight.raw_data(), weight.stride(0), x.raw_data(), x.stride(0),
                         sizeof(XT), device)) {
      if (e4m3) launch_fp8_mma_rows<XT, __NV_E4M3>(x, weight, scale, bias, out, device);
      else launch_fp8_mma_rows<XT, __NV_E5M2>(x, weight, scale, bias, out, device);
      return;
    }
  }
  if (e4m3) launch_rows<XT, __NV_E4M3>(x, weight, scale, bias, out, device);
  else launch_rows<XT, __NV_E5M2>(x, weight, scale, bias, out, device);
}

// e4m3fn weights beyond the rows kernel: grouped_mm's rows problem, one group of all rows.
void run_grouped(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out, int device) {
  gmm::RowsProblem p;
  p.a = x.raw_data(); p.a_rs = x.stride(0); p.a_ks = x.stride(1); p.a_type = x.dtype();
  p.b = weight.raw_data(); p.b_ks = weight.stride(1); p.b_ns = weight.stride(0); p.b_type = weight.dtype();  // B [1, K, N] = w^T
  p.scale_b = one_group_scale(scale, weight.size(0));
  p.rows = x.size(0); p.n = weight.size(0); p.k = weight.size(1);
  p.out = out.raw_data(); p.o_rs = out.stride(0); p.o_ns = out.stride(1); p.out_type = out.dtype();
  gmm::run_rows(p, device);
  if (bias.defined()) binary(BinaryOp::Add, out, bias.reshape({1, p.n}).expand(out.sizes()), out);
}

}  // namespace

void fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out) {
  const int device = out.device().index;
  const int64_t m = x.size(0), n = weight.size(0), k = weight.size(1);
  const size_t x_size = itemsize(x.dtype());
  const bool rows = m <= kMaxRows && k % 16 == 0 && k / 16 < INT_MAX && n < INT_MAX && weight.stride(1) == 1 && weight.stride(0) % 16 == 0 &&
                    aligned16(weight.raw_data()) && x.stride(1) == 1 && (x.stride(0) * static_cast<int64_t>(x_size)) % 16 == 0 &&
                    aligned16(x.raw_data()) && fast_paths_enabled(device, 0);
  if (rows) {
    if (x.dtype() == kBFloat16) launch_small_batch<__nv_bfloat16>(x, weight, scale, bias, out, device);
    else if (x.dtype() == kFloat16) launch_small_batch<__half>(x, weight, scale, bias, out, device);
    else launch_small_batch<float>(x, weight, scale, bias, out, device);
  } else if (weight.dtype() == kFloat8_e4m3fn) {
    run_grouped(x, weight, scale, bias, out, device);
  } else {
    copy(linear(x.to(kFloat32), dequantize_fp8(weight, scale, kFloat32), bias.defined() ? std::optional<Tensor>(bias.to(kFloat32)) : std::nullopt), out);
  }
}

}  // namespace ember::cuda
