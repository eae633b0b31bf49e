// Why is ember's bf16 decode GEMV (src/cuda/gemv.cu) slower than cuBLAS on the H200, and which
// kernel shape closes the gap? A standalone probe (no ember): ember's kernels copied as they are
// (the baselines, launched as gemv.cu's host code launches them for each shape) next to variants
// that differ in how many 16-byte weight loads each lane really has in flight, how the tail is
// handled, how many rows a warp shares one x load with, and how the columns layout reduces its
// split of K. Every launch reads its own copy of the weights (copies adding up to >= 400 MB, at
// least 2, so a replay reads from HBM, not the 60 MB L2), timed as a CUDA graph of one launch per
// copy, median of 5 replays (bench/probe_timing.cuh).
//
// Layouts and shapes (K N as in the decode tables):
//   rows     W [N, K] unit-stride along K, y = W x ("NxKx1" rows): 28672x8192, 8192x8192,
//            3584x14336, 4096x14336, 2304x9216, 2304x256000.
//   columns  y = x B with B [K, N] row-major ("1xKxN"): 2048x4096, 2048x8192, 2048x7168,
//            2304x2048, 768x2048, 512x2048, 2048x2048, 8192x128256, 2304x256000, 4096x128256.
// Inputs are random bf16 in [-1, 1); every variant's y is checked on every shape against a
// float64 host reference (err = max |y - ref| / max |ref|; FAIL above 1e-2: bf16 output rounding
// alone is ~4e-3 of a value).
//
// Prints one line per (variant, shape): microseconds per launch, TB/s over the weight bytes, and
// the speedup over the baseline (ember's kernel for that shape as of v5, commit 4557c2f; > 1:
// faster). The rows and columns sections led to gemv.cu's v6; columns2 is the next round.
//
// Measured (H200, 2026-11-30; docs/perf-runs/2026-11-30-s5-probes.txt):
//   rows: "unpred L4" 1.07-1.25x over v5 on all six shapes (28672x8192 134.8 -> 108.7 us), taken
//     into v6; smem, pipe and multi-row variants at most as good, except multi R4 L2 noL1 on
//     2304x9216 (1.20x).
//   columns: "cluster C16/C32 T256 L8" 1.06-1.07x on the lm_head shapes (taken into v6 for
//     N >= 100000); nothing won the 16-32 MB shapes.
//   columns2 (16-32 MB shapes): "batch C16 T512 L8 push" 1.04-1.14x on 2048x{2048, 6144, 7168,
//     8192}, 768x2048 and 512x2048, but 0.94-0.98x on 2304x2048, 2304x9216 and 2048x4096, where
//     "batch C4 T1024 L8" (no cluster, 128 blocks) is best at 1.05x (7.20 vs 7.58 us). Both
//     integrated as gemv.cu's v7 (batch_columns_kernel) on the shapes where they won.
//   columns3 (session 6, docs/perf-runs/2026-11-30-s6-probes.txt; small shapes, N <= 1024):
//     "batch C4 T256 L4 push" 1.06-1.48x over v5 on all nine (2048x32 3.10 -> 2.25 us), "batch
//     C16 T256 L8 push" better at K 2048, N 256-768 (2048x512 2.97 us): gemv.cu's v8.
//   columns4 (session 6; 15 mid shapes, v7's included): "batch C16 T256 L8 push" faster than v7's
//     configurations and v5 on all of them (2048x4096 6.48 vs v7's 7.19 us): gemv.cu's v9.
//
// columns6 (session 8): the 100-135 MB columns shapes 14336x4096, 14336x3584, 3584x14336,
// 4096x14336 and 8192x8192, which every columns kernel reads at 3.7-3.94 TB/s and the rows layout
// of the same bytes at 4.05-4.1. Is it how a row is read? The columns kernels read it as strips of
// 64-512 bytes at different times from different blocks; the "rowtile" kernels give a block whole
// row segments of 7-16 KB (a thread per 16-byte chunk across the row, L rows per batch), K split
// into about one or two waves of resident blocks and reduced by vector atomics ("c4"/"c8": first
// through a cluster's distributed shared memory). Each variant is also timed as the decode bench
// times it (20 launches per graph: "us x20"). Measured (H200, session 8, docs/perf-runs/
// 2026-11-30-s8-probes.txt): every rowtile variant slower than ember's kernels on all five shapes,
// 2.2-3.6 TB/s (14336x3584 x20: ember 26.68 us, rowtile L8 1wave 36.29, L8 1wave c8 28.28): whole
// row segments per block do not read faster, and the split's reduction costs more. Rejected.
//
// columns7 (session 8): the same shapes, where the best columns kernels still run 224-256 blocks
// on 264 resident slots (2 per SM): on 14336x3584, 92 SMs hold two equal blocks and 40 one, and
// the doubly loaded SMs set the end. Two fixes of the balance: "balanced" runs the batch kernel
// (push) in the cluster of ANY size up to 16 whose tiles x cluster fill one or two rounds of the
// resident slots best (e.g. C16 T512 in clusters of 9: 252 blocks); "streamk" runs exactly one
// wave of resident blocks, each taking an equal share of the (tile, row group) units, so a block
// may end one tile and start the next; the segments meet by 16-byte vector atomics and a per-tile
// row count, and the block completing K writes y. Measured (H200, session 8, us x20): no variant
// clearly better than the best existing one on any shape. 14336x3584: ember 26.53, batch C16 T512
// L8 push 26.43, balanced C16 T512 (the plan kept cluster 8) 26.45, streamk L8 26.84; 14336x4096:
// ember 30.02, batch C16 T512 29.71, balanced C16 T512 in clusters of 7 29.78, streamk L8 29.77.
// Load balance is not what holds these shapes below 3.9 TB/s. Rejected.
//
// Build and run on the GPU machine (no CMake needed):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/gemv_probe.cu -o /tmp/gemv_probe && /tmp/gemv_probe
// Only some sections: append their names (rows, rows2, columns, columns2, columns3, columns4,
// columns5, columns6, columns7, harness), e.g. "/tmp/gemv_probe columns2".
// SASS of a kernel (what the per-variant comments describe):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Xptxas -v bench/gemv_probe.cu -o /tmp/g.cubin
//   cuobjdump -sass /tmp/g.cubin | less   (or nvdisasm -c /tmp/g.cubin)
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "probe_bf16.cuh"
#include "probe_timing.cuh"

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;  // ember's block size for both layouts
constexpr int kVec = 8;        // bf16 per 16-byte load

// ---------------------------------------------------------------------------------------------
// ember's v5 kernels as in src/cuda/gemv.cu at 4557c2f (T = bf16, one input row, 16-byte path),
// unchanged but for the template parameters these shapes fix.

template <class T> struct alignas(16) Vec { T v[16 / sizeof(T)]; };

__device__ __forceinline__ float dot16(const Vec<bf16>& a, const Vec<bf16>& b, float acc) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc = fmaf(__bfloat162float(a.v[i]), __bfloat162float(b.v[i]), acc);
  return acc;
}

// ember rows_kernel<bf16, GROUP, true, 1>. SASS (GROUP 32, this copy): 40 registers; weight and x
// loads issued in pairs, 2 of a batch's 4 weight loads before the first FFMA, then 1 more per
// few FFMAs: ~2 weight loads in flight per lane.
template <int GROUP>
__global__ void __launch_bounds__(kThreads) ember_rows_kernel(const bf16* __restrict__ w, int64_t ldw, const bf16* __restrict__ x,
                                                              const bf16* __restrict__ bias, bf16* __restrict__ y, int64_t n_rows,
                                                              int64_t k) {
  constexpr int kRowsPerBlock = kThreads / GROUP;
  constexpr int kLoads = 4;
  const int lane = threadIdx.x % GROUP;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  float acc = 0.f;
  if (row < n_rows) {
    const bf16* wr = w + row * ldw;
    const int64_t n_vec = k / kVec;
    const auto* wv = reinterpret_cast<const Vec<bf16>*>(wr);
    for (int64_t i0 = lane; i0 < n_vec; i0 += kLoads * GROUP) {
      Vec<bf16> wq[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t i = i0 + u * GROUP;
        wq[u] = i < n_vec ? wv[i] : Vec<bf16>{};
      }
      const auto* xv = reinterpret_cast<const Vec<bf16>*>(x);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t i = i0 + u * GROUP;
        acc = dot16(wq[u], i < n_vec ? xv[i] : Vec<bf16>{}, acc);
      }
    }
  }
#pragma unroll
  for (int off = (GROUP < 32 ? GROUP : 32) / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if constexpr (GROUP > 32) {
    __shared__ float partial[kThreads / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) partial[warp] = acc;
    __syncthreads();
    if (lane == 0) {
      acc = 0.f;
#pragma unroll
      for (int j = 0; j < GROUP / 32; ++j) acc += partial[warp + j];
    }
  }
  if (lane == 0 && row < n_rows) {
    const float b = bias ? __bfloat162float(bias[row]) : 0.f;
    y[row] = __float2bfloat16_rn(acc + b);
  }
}

constexpr int kSlices = 8;  // K slices per block in ember's columns kernel (v4)

// With K split over gridDim.y blocks per column tile (blockIdx.x): true in the last of them to
// finish (by ticket), which then sees every other block's writes. Every thread of the block calls it.
__device__ bool last_split_of_tile(unsigned* tickets) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// ember columns_kernel<bf16, true> (v4): 32 threads x 16 bytes across a tile of 256 columns, 8
// slices of K down the block, gridDim.y splits K; with splits every block adds into `accum`, the
// last block of the tile (ticket) writes y and zeroes accum and the ticket for the next launch.
// SASS: 40 registers.
__global__ void __launch_bounds__(kThreads) ember_columns_kernel(const bf16* __restrict__ b, int64_t ldb, const bf16* __restrict__ x,
                                                                 const bf16* __restrict__ bias, bf16* __restrict__ y, int64_t n, int64_t k,
                                                                 int64_t k_per_split, float* __restrict__ accum,
                                                                 unsigned* __restrict__ tickets) {
  constexpr int VW = kVec;
  constexpr int kTile = 32 * VW;
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile + col_thread * VW;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_per_split;
  const int64_t k_end = min(k, k_begin + k_per_split);
  float acc[VW];
#pragma unroll
  for (int j = 0; j < VW; ++j) acc[j] = 0.f;
  if (col0 < n) {
    int64_t kk = k_begin + slice;
    for (; kk + 3 * kSlices < k_end; kk += 4 * kSlices) {
      Vec<bf16> r[4];
      float xs[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        r[u] = *reinterpret_cast<const Vec<bf16>*>(b + (kk + u * kSlices) * ldb + col0);
        xs[u] = __bfloat162float(x[kk + u * kSlices]);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int j = 0; j < VW; ++j) acc[j] = fmaf(xs[u], __bfloat162float(r[u].v[j]), acc[j]);
    }
    for (; kk < k_end; kk += kSlices) {
      const Vec<bf16> r = *reinterpret_cast<const Vec<bf16>*>(b + kk * ldb + col0);
      const float xk = __bfloat162float(x[kk]);
#pragma unroll
      for (int j = 0; j < VW; ++j) acc[j] = fmaf(xk, __bfloat162float(r.v[j]), acc[j]);
    }
  }
  __shared__ float sums[kSlices][kTile];
#pragma unroll
  for (int j = 0; j < VW; ++j) sums[slice][col_thread * VW + j] = acc[j];
  __syncthreads();
  const bool split = gridDim.y > 1;
  for (int t = threadIdx.x; t < kTile; t += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) s += sums[sl][t];
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + t;
    if (col >= n) continue;
    if (split) {
      atomicAdd(&accum[col], s);
    } else {
      if (bias) s += __bfloat162float(bias[col]);
      y[col] = __float2bfloat16_rn(s);
    }
  }
  if (!split) return;
  if (!last_split_of_tile(tickets)) return;
  for (int t = threadIdx.x; t < kTile; t += kThreads) {
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + t;
    if (col >= n) continue;
    float s = __ldcg(&accum[col]);
    accum[col] = 0.f;
    if (bias) s += __bfloat162float(bias[col]);
    y[col] = __float2bfloat16_rn(s);
  }
  if (threadIdx.x == 0) tickets[blockIdx.x] = 0;
}

constexpr int kMaxXRange = 4096;  // rows of x the X_SMEM kernels stage in shared memory
constexpr int kMaxCluster = 16;   // blocks per cluster: the non-portable limit cluster_limit allows at most

// ember cluster_columns_kernel<bf16, true> (v5), generalised over the tile (COLS threads x 16
// bytes across, THREADS / COLS slices down) and the loads in flight: ember's is <8, 256, 8>.
// SASS <8, 256, 8> (ember's): 59 registers, and despite the 8-load batch only 2 weight loads
// before the first FFMA, then one per few FFMAs (ptxas hoists the x loads between them).
// X_SMEM (variants only): the rank's x range staged in shared memory as floats; SASS <32, 256,
// 8, X_SMEM> 63 registers, 4 weight loads before the first FFMA; <32, 512, 8, X_SMEM> 95
// registers, 7-8 weight loads before the first FFMA.
template <int COLS, int THREADS, int LOADS, bool X_SMEM = false>
__global__ void __launch_bounds__(THREADS) cluster_columns_kernel(const bf16* __restrict__ b, int64_t ldb, const bf16* __restrict__ x,
                                                                  const bf16* __restrict__ bias, bf16* __restrict__ y, int64_t n, int64_t k,
                                                                  int64_t k_per_rank) {
  constexpr int VW = kVec;
  constexpr int kColThreads = COLS, kSlicesDown = THREADS / COLS, kCols = COLS * VW;
  constexpr int kParts = THREADS / kCols;  // threads summing one column's slices
  static_assert(kParts >= 1 && kCols % 32 == 0);
  constexpr int kStride = kCols + 32 / kParts;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __cluster_barrier_arrive_relaxed();
  const unsigned rank = cluster.block_rank(), ranks = cluster.num_blocks();
  const unsigned share = kCols / ranks;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const unsigned source = threadIdx.x % ranks, owned = threadIdx.x / ranks;
  const int64_t out_col = tile0 + rank * share + owned;
  const bool writes = threadIdx.x < kCols && source == 0 && out_col < n;
  const float bias_value = writes && bias ? __bfloat162float(bias[out_col]) : 0.f;

  const int col_thread = threadIdx.x % kColThreads, slice = threadIdx.x / kColThreads;
  const int64_t col0 = tile0 + col_thread * VW;
  const int64_t k_begin = rank * k_per_rank, k_end = min(k, k_begin + k_per_rank);
  // X_SMEM: the rank's x range as floats in shared memory first (k_per_rank <= kMaxXRange).
  __shared__ float x_range[X_SMEM ? kMaxXRange : 1];
  if constexpr (X_SMEM) {
    for (int64_t i = k_begin + threadIdx.x; i < k_end; i += THREADS) x_range[i - k_begin] = __bfloat162float(x[i]);
    __syncthreads();
  }
  float acc[VW];
#pragma unroll
  for (int j = 0; j < VW; ++j) acc[j] = 0.f;
  if (col0 < n) {
    for (int64_t k0 = k_begin + slice; k0 < k_end; k0 += LOADS * kSlicesDown) {
      Vec<bf16> r[LOADS];
      float xs[LOADS];
#pragma unroll
      for (int u = 0; u < LOADS; ++u) {
        const int64_t kk = k0 + u * kSlicesDown;
        r[u] = Vec<bf16>{};
        xs[u] = 0.f;
        if (kk < k_end) {
          r[u] = *reinterpret_cast<const Vec<bf16>*>(b + kk * ldb + col0);
          xs[u] = X_SMEM ? x_range[kk - k_begin] : __bfloat162float(x[kk]);
        }
      }
#pragma unroll
      for (int u = 0; u < LOADS; ++u)
#pragma unroll
        for (int j = 0; j < VW; ++j) acc[j] = fmaf(xs[u], __bfloat162float(r[u].v[j]), acc[j]);
    }
  }
  __shared__ alignas(16) float sums[kSlicesDown][kStride];
  __shared__ float inbox[kCols];
#pragma unroll
  for (int j = 0; j < VW; j += 4)
    *reinterpret_cast<float4*>(&sums[slice][col_thread * VW + j]) = make_float4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
  __syncthreads();
  const int col = threadIdx.x / kParts, part = threadIdx.x % kParts;
  float s = 0.f;
  if (col < kCols) {
#pragma unroll
    for (int sl = part; sl < kSlicesDown; sl += kParts) s += sums[sl][col];
  }
#pragma unroll
  for (int off = kParts / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  cluster.barrier_wait();
  if (part == 0 && col < kCols) cluster.map_shared_rank(inbox, static_cast<int>(col / share))[rank * share + col % share] = s;
  cluster.sync();
  if (threadIdx.x < kCols) {
    float v = inbox[source * share + owned];
    for (unsigned off = 1; off < ranks; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (writes) y[out_col] = __float2bfloat16_rn(v + bias_value);
  }
}

// ---------------------------------------------------------------------------------------------
// Variants. They work on raw 16-byte chunks (uint4) with 32-bit indices inside a row and unpack
// bf16 by shifts (the same arithmetic as __bfloat162float).

// A weight chunk: read-only path, or read-only and not kept in L1 (the weights stream through
// once; x, read by every warp, stays in L1).
template <bool NO_L1> __device__ __forceinline__ uint4 load_weight(const uint4* p) {
  if constexpr (NO_L1) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  } else {
    return __ldg(p);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// One warp's dot product of its row (wr, this lane's first chunk) with x (xr, likewise): full
// batches of L chunks per lane with no predicates (one pointer + immediate offsets), then one
// predicated tail batch; the warp's sum. Shared by the "unpred" and "smem" variants, which differ
// only in where x lives.
template <int L, bool NO_L1>
__device__ __forceinline__ float warp_row_dot(const uint4* wr, const uint4* xr, int n_vec, int lane) {
  float acc = 0.f;
  int i = 0;
  for (; i + L * 32 <= n_vec; i += L * 32) {
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) v[u] = load_weight<NO_L1>(wr + i + u * 32);
#pragma unroll
    for (int u = 0; u < L; ++u) acc = dot8(v[u], xr[i + u * 32], acc);
  }
  if (i < n_vec) {
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) v[u] = i + u * 32 + lane < n_vec ? load_weight<NO_L1>(wr + i + u * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < L; ++u)
      if (i + u * 32 + lane < n_vec) acc = dot8(v[u], xr[i + u * 32], acc);
  }
  return warp_sum(acc);
}

// rows "unpred L NO_L1": a warp per row; main loop of full batches of L chunks per lane with no
// predicates (addresses = one pointer + immediate offsets u * 512 bytes), then one predicated
// tail batch. SASS: L4 32 registers, weight and x loads in pairs, 2 weight loads before the
// first FFMA (no better than ember's); L8 48 registers, 3-4 weight loads before the first FFMA
// (ptxas hoists the global x loads between them), the rest one per few FFMAs. NO_L1 changes
// only the load flavour (LDG.E.NA).
template <int L, bool NO_L1>
__global__ void __launch_bounds__(kThreads) rows_unpred_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                               bf16* __restrict__ y, int n_rows, int n_vec) {
  const int lane = threadIdx.x % 32, row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;  // the whole warp
  const float acc = warp_row_dot<L, NO_L1>(w + static_cast<size_t>(row) * ldw_vec + lane, x + lane, n_vec, lane);
  if (lane == 0) y[row] = __float2bfloat16_rn(acc);
}

// rows "persist L" (session 6, not run yet): as "unpred L" but one wave of resident blocks, each
// warp walking rows warp, warp + all warps, ...: no block starts after the first wave, and the last
// rows spread over every warp (the 100-134 MB shapes read at 3.75-3.85 TB/s in ember's v6 rows
// kernel; the stream probe's floor there is ~4.05 TB/s).
template <int L>
__global__ void __launch_bounds__(kThreads) rows_persist_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                                bf16* __restrict__ y, int n_rows, int n_vec) {
  const int lane = threadIdx.x % 32, warps = static_cast<int>(gridDim.x) * (kThreads / 32);
  for (int row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; row < n_rows; row += warps) {
    const float acc = warp_row_dot<L, false>(w + static_cast<size_t>(row) * ldw_vec + lane, x + lane, n_vec, lane);
    if (lane == 0) y[row] = __float2bfloat16_rn(acc);
  }
}

// rows "pipe L": a warp per row, software pipelined: batch i + 1's L weight loads are issued
// before batch i is consumed, so L loads sit in registers while the previous L are used. SASS
// L4: 48 registers, but ptxas issues batch i + 1's loads after batch i's x loads and half its
// FFMAs, reusing its registers: 4 weight loads in flight, never 8 (no real overlap).
template <int L>
__global__ void __launch_bounds__(kThreads) rows_pipe_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                             bf16* __restrict__ y, int n_rows, int n_vec) {
  const int lane = threadIdx.x % 32, row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;
  const uint4* wr = w + static_cast<size_t>(row) * ldw_vec + lane;
  const uint4* xr = x + lane;
  float acc = 0.f;
  int i = 0;
  if (n_vec >= L * 32) {
    uint4 cur[L];
#pragma unroll
    for (int u = 0; u < L; ++u) cur[u] = __ldg(wr + u * 32);
    for (; i + 2 * L * 32 <= n_vec; i += L * 32) {
      uint4 next[L];
#pragma unroll
      for (int u = 0; u < L; ++u) next[u] = __ldg(wr + i + L * 32 + u * 32);
#pragma unroll
      for (int u = 0; u < L; ++u) acc = dot8(cur[u], xr[i + u * 32], acc);
#pragma unroll
      for (int u = 0; u < L; ++u) cur[u] = next[u];
    }
#pragma unroll
    for (int u = 0; u < L; ++u) acc = dot8(cur[u], xr[i + u * 32], acc);
    i += L * 32;
  }
  if (i < n_vec) {
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) v[u] = i + u * 32 + lane < n_vec ? __ldg(wr + i + u * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < L; ++u)
      if (i + u * 32 + lane < n_vec) acc = dot8(v[u], xr[i + u * 32], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) y[row] = __float2bfloat16_rn(acc);
}

// rows "smem L": as "unpred L NO_L1" but x is first copied into shared memory (K * 2 bytes of
// dynamic shared memory per block) and read from there: ptxas hoists global x loads between the
// weight loads (they are long-latency too), not the short shared-memory ones. SASS: L4 32
// registers, all 4 weight loads before the first FFMA; L8 48 registers, 6 weight loads before
// the first FFMA and the other 2 after 1-3 FFMAs (~8 in flight).
template <int L>
__global__ void __launch_bounds__(kThreads) rows_smem_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                             bf16* __restrict__ y, int n_rows, int n_vec) {
  extern __shared__ uint4 xs[];
  for (int i = threadIdx.x; i < n_vec; i += kThreads) xs[i] = x[i];
  __syncthreads();
  const int lane = threadIdx.x % 32, row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;
  const float acc = warp_row_dot<L, true>(w + static_cast<size_t>(row) * ldw_vec + lane, xs + lane, n_vec, lane);
  if (lane == 0) y[row] = __float2bfloat16_rn(acc);
}

// rows "multi R L": a warp owns R consecutive rows (n_rows % R == 0), L chunks per row per batch:
// R * L weight loads in flight per lane, and each x chunk is loaded once for R rows (the x
// traffic from L1/L2 drops R-fold). Unpredicated main loop, predicated tail. SASS: R2 L4 50
// registers, 5-6 of its 8 weight loads before the first FFMA; R4 L2 58 registers, 6 of 8 before
// the first FFMA, the other 2 within a few FFMAs.
template <int R, int L, bool NO_L1>
__global__ void __launch_bounds__(kThreads) rows_multi_kernel(const uint4* __restrict__ w, int ldw_vec, const uint4* __restrict__ x,
                                                              bf16* __restrict__ y, int n_rows, int n_vec) {
  const int lane = threadIdx.x % 32, row0 = (blockIdx.x * (kThreads / 32) + threadIdx.x / 32) * R;
  if (row0 >= n_rows) return;
  const uint4* wr = w + static_cast<size_t>(row0) * ldw_vec + lane;
  const uint4* xr = x + lane;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  int i = 0;
  for (; i + L * 32 <= n_vec; i += L * 32) {
    uint4 v[R][L];
#pragma unroll
    for (int u = 0; u < L; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) v[r][u] = load_weight<NO_L1>(wr + r * ldw_vec + i + u * 32);
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const uint4 xv = xr[i + u * 32];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = dot8(v[r][u], xv, acc[r]);
    }
  }
  if (i < n_vec) {
    uint4 v[R][L];
#pragma unroll
    for (int u = 0; u < L; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        v[r][u] = i + u * 32 + lane < n_vec ? load_weight<NO_L1>(wr + r * ldw_vec + i + u * 32) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < L; ++u) {
      if (i + u * 32 + lane >= n_vec) continue;
      const uint4 xv = xr[i + u * 32];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = dot8(v[r][u], xv, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
  if (lane < R) {
    float mine = acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r) mine = lane == r ? acc[r] : mine;
    y[row0 + lane] = __float2bfloat16_rn(mine);
  }
}

// The v4-layout tiles (32 threads x 16 bytes across 256 columns, kSlices slices down a block):
// each thread's 8 column sums over its slice (acc) summed over the slices in shared memory; thread
// i < 64 gets columns tile * 256 + 4i .. + 3 (`col`) in s when it owns them (`owns`: col < n, with
// n % 8 == 0 so 4 columns are in or out together). Every thread of the block calls it.
__device__ __forceinline__ float4 sum_tile_slices(const float (&acc)[kVec], int tile, int n, int& col, bool& owns) {
  constexpr int kTile = 32 * kVec;
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  __shared__ alignas(16) float sums[kSlices][kTile];
#pragma unroll
  for (int j = 0; j < kVec; j += 4)
    *reinterpret_cast<float4*>(&sums[slice][col_thread * kVec + j]) = make_float4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
  __syncthreads();
  const int c4 = threadIdx.x * 4;
  col = tile * kTile + c4;
  owns = threadIdx.x < kTile / 4 && col < n;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  if (owns) {
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) {
      const float4 v = *reinterpret_cast<const float4*>(&sums[sl][c4]);
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
  }
  return s;
}

// columns "split L": v4's layout (32 threads x 16 bytes across a 256-column tile, 8 slices down
// the block, gridDim.y splits K into ranges of ~L * 8 rows, so each thread has one batch of L
// loads) with an unpredicated main loop, and the split reduction by 16-byte vector atomics
// (red.global.add.v4.f32, sm_90) into `accum`: a quarter of v4's atomics. Same ticket protocol.
// SASS (L8 and L4): 32 registers, and ptxas still interleaves: 2 weight loads before the first
// FFMA, then 2 per 2-4 FFMAs (~2 in flight) even with x in shared memory; so this variant
// measures the cheaper reduction (one batch per thread, vector atomics), not more loads in flight.
template <int L>
__global__ void __launch_bounds__(kThreads) columns_split_kernel(const uint4* __restrict__ b, int ldb_vec, const bf16* __restrict__ x,
                                                                 bf16* __restrict__ y, int n, int k, int k_per_split,
                                                                 float* __restrict__ accum, unsigned* __restrict__ tickets) {
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int cv = blockIdx.x * 32 + col_thread;  // this thread's 16-byte column chunk
  const int k_begin = blockIdx.y * k_per_split, k_end = min(k, k_begin + k_per_split);
  // The split's x as floats in shared memory (k_per_split <= kMaxXRange): read by LDS, which
  // ptxas does not hoist between the weight loads as it does global x loads.
  __shared__ float x_range[kMaxXRange];
  for (int i = k_begin + threadIdx.x; i < k_end; i += kThreads) x_range[i - k_begin] = __bfloat162float(x[i]);
  __syncthreads();
  float acc[kVec] = {};
  if (cv * kVec < n) {
    const uint4* bp = b + static_cast<size_t>(k_begin + slice) * ldb_vec + cv;
    const size_t step = static_cast<size_t>(kSlices) * ldb_vec;  // one slice step down K
    int kk = k_begin + slice;
    for (; kk + (L - 1) * kSlices < k_end; kk += L * kSlices, bp += L * step) {
      uint4 r[L];
      float xs[L];
#pragma unroll
      for (int u = 0; u < L; ++u) r[u] = __ldg(bp + u * step);
#pragma unroll
      for (int u = 0; u < L; ++u) xs[u] = x_range[kk - k_begin + u * kSlices];
#pragma unroll
      for (int u = 0; u < L; ++u) {
        const uint32_t q[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[2 * j] = fmaf(xs[u], __uint_as_float(q[j] << 16), acc[2 * j]);
          acc[2 * j + 1] = fmaf(xs[u], __uint_as_float(q[j] & 0xFFFF0000u), acc[2 * j + 1]);
        }
      }
    }
    for (; kk < k_end; kk += kSlices, bp += step) {
      const uint4 r = __ldg(bp);
      const float xk = x_range[kk - k_begin];
      const uint32_t q[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[2 * j] = fmaf(xk, __uint_as_float(q[j] << 16), acc[2 * j]);
        acc[2 * j + 1] = fmaf(xk, __uint_as_float(q[j] & 0xFFFF0000u), acc[2 * j + 1]);
      }
    }
  }
  // 64 threads each sum 4 consecutive columns over the slices.
  const bool split = gridDim.y > 1;
  int col;
  bool owns;
  const float4 s = sum_tile_slices(acc, blockIdx.x, n, col, owns);
  if (owns) {
    if (split) {
      atomicAdd(reinterpret_cast<float4*>(&accum[col]), s);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(&y[col]) = __floats2bfloat162_rn(s.x, s.y);
      *reinterpret_cast<__nv_bfloat162*>(&y[col + 2]) = __floats2bfloat162_rn(s.z, s.w);
    }
  }
  if (!split) return;
  if (!last_split_of_tile(tickets)) return;
  if (owns) {
    float4* a = reinterpret_cast<float4*>(&accum[col]);
    const float4 v = __ldcg(a);
    *a = make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<__nv_bfloat162*>(&y[col]) = __floats2bfloat162_rn(v.x, v.y);
    *reinterpret_cast<__nv_bfloat162*>(&y[col + 2]) = __floats2bfloat162_rn(v.z, v.w);
  }
  if (threadIdx.x == 0) tickets[blockIdx.x] = 0;
}

// ---------------------------------------------------------------------------------------------
// Columns, second round (the "columns2" section): mid shapes (K 512-2304, N 2048-9216, 2-40 MB),
// where torch beats ember by 4-11% and every variant above lost. Each thread's rows of K go in
// batches of L 16-byte loads, and the FIRST batch is issued before anything else: x is staged into
// shared memory only after it, so x's L2 round trip overlaps the weights' (the earlier X_SMEM
// kernels staged x first and paid that round trip serially), and the bar.sync between the loads
// and their first use keeps ptxas from interleaving them with FFMAs (it cannot sink loads below
// the barrier, and the FFMAs need x read from shared memory after it). K is split over a cluster
// of blocks per column tile, reduced through distributed shared memory as v5 does; the host picks
// the largest power-of-2 cluster with EVERY block resident at once (cudaOccupancyMaxActiveClusters)
// so the whole matrix is requested in about one round trip, and cluster 1 (no cross-block
// reduction at all, a plain launch) when the tiles alone fill the resident slots.

// L weight chunks, `step` chunks apart (one per slice step down K); PRED: only the first `valid`.
template <int L, bool PRED> __device__ __forceinline__ void load_batch(uint4 (&r)[L], const uint4* p, size_t step, int valid) {
#pragma unroll
  for (int u = 0; u < L; ++u) r[u] = !PRED || u < valid ? load_weight<true>(p + u * step) : make_uint4(0, 0, 0, 0);
}

// acc[j] += x[row] * B[row][col0 + j] over the batch's rows; xr: the first row's x (raw bf16 bits)
// in shared memory, the next S entries on. Rows past K have zero weights and zero x.
template <int L, int S> __device__ __forceinline__ void fma_batch(float (&acc)[kVec], const uint4 (&r)[L], const uint16_t* xr) {
#pragma unroll
  for (int u = 0; u < L; ++u) {
    const float xk = __uint_as_float(static_cast<uint32_t>(xr[u * S]) << 16);
    const uint32_t q[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[2 * j] = fmaf(xk, __uint_as_float(q[j] << 16), acc[2 * j]);
      acc[2 * j + 1] = fmaf(xk, __uint_as_float(q[j] & 0xFFFF0000u), acc[2 * j + 1]);
    }
  }
}

// columns "batch C{COLS} T{THREADS} L{L}": a tile of COLS x 16 bytes across (COLS * 8 columns),
// THREADS / COLS slices down, L rows per thread per batch; a block takes its cluster rank's K
// range (k_per_rank rows; its x range, zero-padded to whole batches, <= kMaxXRange). Whole
// batches load without predicates, the range's last partial batch with them (block-uniform
// choice). SASS (ptxas -v: no spills, no stack): in every instantiation, both paths of the first
// batch (whole and predicated) issue all L LDG.E.NA.128 before the x staging and its BAR.SYNC,
// so no FFMA can wait on a load issued late; later batches (loop) issue all L LDGs, then the
// LDS.U16 of x, then the FFMAs. Registers (resident blocks per SM):
//   C4 T1024 L8 (tile 32 columns, 64 B per row, 256 slices): 60 (1).
//   C8 T1024 L8 (tile 64 columns, 128 B, 128 slices): 62 (1); PUSH 62.
//   C16 T512 L8 (tile 128 columns, 256 B, 32 slices): 60 (2); PUSH 59.
//   C32 T512 L8 (tile 256 columns, 512 B per warp row as v4, 16 slices): 60 (2); PUSH 59.
//   C32 T256 L16 (tile 256 columns, 8 slices, 16 loads in flight): 95 (2).
// PUSH: the partials go to their owner rank by st.async, each completing bytes on the owner's
// mbarrier (expecting the tile's kCols * 4 bytes), and only owners wait, on that mbarrier: no
// closing cluster barrier, whose release ptxas compiles to MEMBAR.ALL.GPU (cluster.sync() in v5
// and here without PUSH: MEMBAR.ALL.GPU, UCGABAR_ARV, UCGABAR_WAIT).
// ANY_CLUSTER (PUSH only; the "balanced" variants): clusters of any size up to kMaxCluster, not
// only powers of 2. Rank q owns the tile's columns [q * kCols / ranks, (q + 1) * kCols / ranks)
// (shares differ by at most one column), receives its share from every rank into an inbox with
// rows of ceil(kCols / ranks) slots, and sums them with a loop over the ranks instead of shuffles.
// SASS (ANY_CLUSTER, L8): C16 T512 64 registers (2 blocks per SM), C8/C16/C32 T256 62 (4); the
// batches as above; the instantiations without it compile to the same SASS as before it existed.
template <int COLS, int THREADS, int L, bool PUSH = false, bool ANY_CLUSTER = false>
__global__ void __launch_bounds__(THREADS) columns_batch_kernel(const uint4* __restrict__ b, int ldb_vec, const bf16* __restrict__ x,
                                                                bf16* __restrict__ y, int n, int k, int k_per_rank) {
  constexpr int kSlicesDown = THREADS / COLS, kCols = COLS * kVec, kBatchRows = L * kSlicesDown;
  constexpr int kParts = THREADS / kCols;  // threads summing one column's slices
  static_assert(kParts >= 1 && kParts <= 32 && THREADS == kParts * kCols && kCols % 32 == 0);
  static_assert(PUSH || !ANY_CLUSTER);
  constexpr int kStride = kCols + 32 / kParts;  // padding: the column sums read conflict-free
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned ranks = cluster.num_blocks(), rank = cluster.block_rank();
  // ANY_CLUSTER: this rank's columns of the tile, and the inbox row per source rank.
  const unsigned own_begin = ANY_CLUSTER ? rank * kCols / ranks : 0;
  const unsigned own_count = ANY_CLUSTER ? (rank + 1) * kCols / ranks - own_begin : kCols;
  const unsigned inbox_row = ANY_CLUSTER ? (kCols + ranks - 1) / ranks : 0;
  __shared__ alignas(8) uint64_t received;  // PUSH: the owner's mbarrier
  const uint32_t received_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&received));
  if (PUSH && ranks > 1 && threadIdx.x == 0) {
    // One arrival (this one) plus 4 bytes from every rank for each owned column complete phase
    // 0; the init is released to the other ranks by the cluster barrier.
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
                 "fence.mbarrier_init.release.cluster;\n\t"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(received_addr),
                 "r"(ANY_CLUSTER ? own_count * ranks * 4 : kCols * 4)
                 : "memory");
  }
  if (ranks > 1) __cluster_barrier_arrive_relaxed();

  const int col_thread = threadIdx.x % COLS, slice = threadIdx.x / COLS;
  const int cv = blockIdx.x * COLS + col_thread;  // this thread's 16-byte chunk of a row
  const bool active = cv * kVec < n;              // n % 8 == 0
  const int k_begin = static_cast<int>(rank) * k_per_rank, k_end = min(k, k_begin + k_per_rank);
  const int range = max(0, k_end - k_begin), padded = (range + kBatchRows - 1) / kBatchRows * kBatchRows;
  const int valid = (range - slice + kSlicesDown - 1) / kSlicesDown;  // this thread's rows in the range (<= 0: none)
  const size_t step = static_cast<size_t>(kSlicesDown) * ldb_vec;
  const uint4* bp = b + static_cast<size_t>(k_begin + slice) * ldb_vec + cv;

  uint4 r[L];
  if (active) {
    if (range >= kBatchRows) load_batch<L, false>(r, bp, step, L);
    else load_batch<L, true>(r, bp, step, valid);
  }
  __shared__ uint16_t x_range[kMaxXRange];
  const uint16_t* xg = reinterpret_cast<const uint16_t*>(x) + k_begin;
  for (int i = threadIdx.x; i < padded; i += THREADS) x_range[i] = i < range ? xg[i] : uint16_t{0};
  __syncthreads();
  float acc[kVec] = {};
  if (active) {
    fma_batch<L, kSlicesDown>(acc, r, x_range + slice);
    for (int kb = kBatchRows, done = L; kb < padded; kb += kBatchRows, done += L) {
      bp += L * step;
      if (kb + kBatchRows <= range) load_batch<L, false>(r, bp, step, L);
      else load_batch<L, true>(r, bp, step, valid - done);
      fma_batch<L, kSlicesDown>(acc, r, x_range + kb + slice);
    }
  }

  __shared__ alignas(16) float sums[kSlicesDown][kStride];
  __shared__ float inbox[ANY_CLUSTER ? kCols + kMaxCluster - 1 : kCols];  // ANY_CLUSTER: ranks rows of inbox_row
  if constexpr (kStride % 4 == 0) {
#pragma unroll
    for (int j = 0; j < kVec; j += 4)
      *reinterpret_cast<float4*>(&sums[slice][col_thread * kVec + j]) = make_float4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) sums[slice][col_thread * kVec + j] = acc[j];
  }
  __syncthreads();
  const int col = threadIdx.x / kParts, part = threadIdx.x % kParts;
  float s = 0.f;
#pragma unroll
  for (int sl = part; sl < kSlicesDown; sl += kParts) s += sums[sl][col];
#pragma unroll
  for (int off = kParts / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  const int tile0 = blockIdx.x * kCols;
  if (ranks == 1) {
    if (part == 0 && tile0 + col < n) y[tile0 + col] = __float2bfloat16_rn(s);
    return;
  }
  // Rank q owns columns [q * share, (q + 1) * share) of the tile: every rank sends it those
  // partials, it sums them (ranks: a power of 2 <= 16, so kCols % ranks == 0; ANY_CLUSTER: the
  // uneven shares above).
  const unsigned share = kCols / ranks;
  cluster.barrier_wait();
  if constexpr (PUSH) {
    if (part == 0) {
      // ANY_CLUSTER: the owner q is the one with q * kCols / ranks <= col < (q + 1) * kCols / ranks.
      const uint32_t owner = ANY_CLUSTER ? ((col + 1) * ranks - 1) / kCols : col / share;
      const uint32_t index = ANY_CLUSTER ? rank * inbox_row + col - owner * kCols / ranks : rank * share + col % share;
      const uint32_t slot = static_cast<uint32_t>(__cvta_generic_to_shared(&inbox[index]));
      uint32_t remote_slot, remote_barrier;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(slot), "r"(owner));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_barrier) : "r"(received_addr), "r"(owner));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote_slot), "r"(__float_as_uint(s)),
                   "r"(remote_barrier)
                   : "memory");
    }
    if (threadIdx.x >= own_count) return;
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                   : "=r"(done)
                   : "r"(received_addr)
                   : "memory");
  } else {
    if (part == 0) cluster.map_shared_rank(inbox, static_cast<int>(col / share))[rank * share + col % share] = s;
    cluster.sync();
  }
  if constexpr (ANY_CLUSTER) {
    float v = 0.f;
    for (unsigned q = 0; q < ranks; ++q) v += inbox[q * inbox_row + threadIdx.x];
    const int out = tile0 + static_cast<int>(own_begin + threadIdx.x);
    if (out < n) y[out] = __float2bfloat16_rn(v);
  } else if (threadIdx.x < kCols) {
    const unsigned source = threadIdx.x % ranks, owned = threadIdx.x / ranks;
    float v = inbox[source * share + owned];
    for (unsigned off = 1; off < ranks; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int out = tile0 + static_cast<int>(rank * share + owned);
    if (source == 0 && out < n) y[out] = __float2bfloat16_rn(v);
  }
}

// ---------------------------------------------------------------------------------------------
// Columns, sixth round (the "columns6" section): the 100-135 MB shapes with both sides >= 3584,
// where every columns kernel above reads 3.7-3.94 TB/s and the rows layout of the same bytes
// 4.05-4.1. The columns kernels read a row of B as strips of 64-512 contiguous bytes, fetched at
// different times by different blocks; the rows kernels stream whole contiguous rows. Do blocks
// that read whole row segments of several KB at a time stream as fast as the rows layout?

constexpr int kMaxRowTile = 1024;  // threads per block (CUDA's limit): 16 KB of a row

// Two floats as a bf16 pair (round to nearest), the first in the low half.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  std::memcpy(&bits, &pair, sizeof bits);
  return bits;
}

// 8 floats as 8 bf16 in one 16-byte store; y 16-byte aligned.
__device__ __forceinline__ void store_bf16x8(bf16* y, const float (&v)[kVec]) {
  *reinterpret_cast<uint4*>(y) =
      make_uint4(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]), bf16x2_bits(v[4], v[5]), bf16x2_bits(v[6], v[7]));
}

// A row-tile block's partial sums: acc[j] = sum over the block's K range (rows k_begin ..
// k_begin + k_per_split - 1, clipped to K; none past K) of x[row] * B[row][cv * 8 + j]. The thread
// walks its chunk column cv down the range, L consecutive rows per batch: whole batches without
// predicates, then one predicated tail batch. As in columns_batch_kernel, the first batch's loads
// are issued before x is staged in shared memory (its L2 round trip overlaps theirs), and the
// barrier keeps ptxas from interleaving those loads with FFMAs. Every thread of the block calls it.
template <int L>
__device__ __forceinline__ void rowtile_partial(const uint4* __restrict__ b, int ldb_vec, const bf16* __restrict__ x, int k,
                                                int k_per_split, int cv, float (&acc)[kVec]) {
  const int k_begin = blockIdx.y * k_per_split;
  const int range = max(0, min(k - k_begin, k_per_split));  // 0: a cluster's trailing rank past K
  const int padded = (max(range, 1) + L - 1) / L * L;       // whole batches, at least the first; <= kMaxXRange
  const size_t step = ldb_vec;                              // one row down
  const uint4* bp = b + static_cast<size_t>(k_begin) * ldb_vec + cv;
  uint4 r[L];
  if (range >= L) load_batch<L, false>(r, bp, step, L);
  else load_batch<L, true>(r, bp, step, range);
  // x of the range as raw bf16 bits, zero past it: the tail batch's missing rows have zero weights
  // and must not meet a NaN pattern.
  __shared__ uint16_t x_range[kMaxXRange];
  const uint16_t* xg = reinterpret_cast<const uint16_t*>(x) + k_begin;
  for (int i = threadIdx.x; i < padded; i += blockDim.x) x_range[i] = i < range ? xg[i] : uint16_t{0};
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc[j] = 0.f;
  fma_batch<L, 1>(acc, r, x_range);
  int kb = L;  // rows of the range consumed (the first batch, whole or not)
  for (; kb + L <= range; kb += L) {
    bp += L * step;
    load_batch<L, false>(r, bp, step, L);
    fma_batch<L, 1>(acc, r, x_range + kb);
  }
  if (kb < range) {
    bp += L * step;
    load_batch<L, true>(r, bp, step, range - kb);
    fma_batch<L, 1>(acc, r, x_range + kb);
  }
}

// After every block of the tile has added its share of the tile's sums into the zeroed `accum`
// (16-byte vector atomics, sm_90): the last block to finish (ticket) writes the tile's y, thread t
// its chunk, zeroes accum and resets the ticket for the next launch. Every thread of the block
// calls it.
__device__ __forceinline__ void rowtile_finish(bf16* __restrict__ y, float* __restrict__ accum, unsigned* __restrict__ tickets) {
  if (!last_split_of_tile(tickets)) return;
  const int cv = blockIdx.x * blockDim.x + threadIdx.x;
  float4* sum = reinterpret_cast<float4*>(accum + cv * kVec);
  const float4 lo = __ldcg(sum), hi = __ldcg(sum + 1);
  sum[0] = make_float4(0.f, 0.f, 0.f, 0.f);
  sum[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  store_bf16x8(y + cv * kVec, {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w});
  if (threadIdx.x == 0) tickets[blockIdx.x] = 0;
}

// columns "rowtile L{L} {W}wave": a block is a row tile, blockDim.x threads each owning one
// 16-byte chunk (8 columns) side by side, so each batch the block reads L row segments of
// blockDim.x * 16 contiguous bytes (the whole row where N / 8 <= 1024 chunks; the host picks a
// block size that divides N / 8, so every thread has a chunk). gridDim.x: tiles across a row;
// gridDim.y splits K into ranges of k_per_split rows (a multiple of L, none empty). The splits
// reduce as columns_split_kernel's do: each thread adds its 8 sums into `accum` with two 16-byte
// vector atomics, then the ticket (rowtile_finish). SASS (ptxas -v: no spills, no stack): L8 62
// registers, L4 44; all L LDG.E.NA.128 of a batch before its first FFMA, the first batch's before
// the x staging and its BAR.SYNC.
template <int L>
__global__ void __launch_bounds__(kMaxRowTile) columns_rowtile_kernel(const uint4* __restrict__ b, int ldb_vec, const bf16* __restrict__ x,
                                                                     bf16* __restrict__ y, int k, int k_per_split,
                                                                     float* __restrict__ accum, unsigned* __restrict__ tickets) {
  const int cv = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's 16-byte chunk of a row
  float acc[kVec];
  rowtile_partial<L>(b, ldb_vec, x, k, k_per_split, cv, acc);
  if (gridDim.y == 1) {
    store_bf16x8(y + cv * kVec, acc);
    return;
  }
  float4* sum = reinterpret_cast<float4*>(accum + cv * kVec);
  atomicAdd(sum, make_float4(acc[0], acc[1], acc[2], acc[3]));
  atomicAdd(sum + 1, make_float4(acc[4], acc[5], acc[6], acc[7]));
  rowtile_finish(y, accum, tickets);
}

// columns "rowtile L{L} {W}wave c{C}": the rowtile kernel's blocks in clusters of C along y (C
// consecutive K ranges of one tile; blockDim.x % C == 0) that first sum their partials through
// distributed shared memory, so the global atomics drop C-fold: rank q owns the tile's chunks
// [q * share, (q + 1) * share) (share = blockDim.x / C); every rank stores its 8 sums of each
// chunk into the owner's inbox (two float4), and 2 * share of the owner's threads each sum one
// float4 over the C ranks and add it into `accum`, then the ticket as in the rowtile kernel
// (every block of the tile takes one, the last writes y); a single cluster per tile writes y
// directly. K splits come in whole clusters, so the last cluster's trailing ranks may get empty
// ranges. SASS (ptxas -v: no spills, no stack): C4 and C8 (L8) 62 registers, all 8 LDG.E.NA.128
// of a batch before its first FFMA. CLUSTER is a template parameter because with the cluster size
// read at run time (60 registers) ptxas issued the loop's last 2 loads after FFMAs that wait on
// the first.
template <int L, int CLUSTER>
__global__ void __launch_bounds__(kMaxRowTile) columns_rowtile_cluster_kernel(const uint4* __restrict__ b, int ldb_vec,
                                                                             const bf16* __restrict__ x, bf16* __restrict__ y, int k,
                                                                             int k_per_split, float* __restrict__ accum,
                                                                             unsigned* __restrict__ tickets) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __cluster_barrier_arrive_relaxed();  // waited for before the first remote store: every rank started
  const int cv = blockIdx.x * blockDim.x + threadIdx.x;
  float acc[kVec];
  rowtile_partial<L>(b, ldb_vec, x, k, k_per_split, cv, acc);

  __shared__ float4 inbox[2 * kMaxRowTile];  // [source rank][chunk of the share][half]
  const unsigned rank = cluster.block_rank();
  const int share = blockDim.x / CLUSTER, owner = threadIdx.x / share, slot = threadIdx.x % share;
  cluster.barrier_wait();
  float4* remote = cluster.map_shared_rank(inbox, owner) + 2 * (rank * share + slot);
  remote[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  remote[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  cluster.sync();
  // Thread t < 2 * share: half t % 2 of owned chunk t / 2, i.e. inbox[q * 2 * share + t] over q.
  const bool sums = static_cast<int>(threadIdx.x) < 2 * share;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  if (sums) {
#pragma unroll
    for (int q = 0; q < CLUSTER; ++q) {
      const float4 v = inbox[q * 2 * share + threadIdx.x];
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
  }
  const int col = (blockIdx.x * blockDim.x + rank * share + threadIdx.x / 2) * kVec + threadIdx.x % 2 * 4;
  if (gridDim.y == CLUSTER) {
    if (sums) *reinterpret_cast<uint2*>(y + col) = make_uint2(bf16x2_bits(s.x, s.y), bf16x2_bits(s.z, s.w));
    return;
  }
  if (sums) atomicAdd(reinterpret_cast<float4*>(accum + col), s);
  rowtile_finish(y, accum, tickets);
}

// ---------------------------------------------------------------------------------------------
// Columns, seventh round (the "columns7" section): the same 100-135 MB shapes. The best columns
// kernels run 224-256 blocks on 264 resident slots (2 per SM): with equal work per block, 92 SMs
// hold two blocks and 40 one on 14336x3584, and the kernel ends when the doubly loaded SMs do,
// with fewer bytes in flight while they finish. Two fixes of the balance: the batch kernel in a
// cluster of any size whose block count fills the slots best ("balanced", host side), and a
// stream-K kernel that gives every resident block the same number of rows.

// With K split into segments that different blocks take: adds this block's `rows` of the tile to
// its count and returns true in the block whose rows complete K (the last to finish), which then
// sees every other block's writes. Every thread of the block calls it.
__device__ bool last_rows_of_tile(unsigned* ticket, int rows, int k) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, static_cast<unsigned>(rows)) + rows == static_cast<unsigned>(k);
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// A stream-K block's sums over one segment of a 256-column tile (`rows` rows of K, this thread's
// slice in acc): reduced over the 8 slices in shared memory, then written as y if the segment is
// the whole tile, else added into `accum` by 16-byte vector atomics, and the block completing the
// tile's K rows writes y, zeroes accum and resets the tile's count for the next launch. Every
// thread of the block calls it.
__device__ __forceinline__ void streamk_segment_done(const float (&acc)[kVec], int tile, int rows, int n, int k, bf16* __restrict__ y,
                                                     float* __restrict__ accum, unsigned* __restrict__ tickets) {
  // 64 threads each sum 4 consecutive columns over the slices.
  int col;
  bool owns;
  const float4 s = sum_tile_slices(acc, tile, n, col, owns);
  if (rows == k) {
    if (owns) *reinterpret_cast<uint2*>(y + col) = make_uint2(bf16x2_bits(s.x, s.y), bf16x2_bits(s.z, s.w));
    __syncthreads();  // the owners have read `sums` before the block's next segment overwrites it
    return;
  }
  if (owns) atomicAdd(reinterpret_cast<float4*>(accum + col), s);
  // Its barriers also keep `sums` from being overwritten before the owners have read it.
  if (!last_rows_of_tile(tickets + tile, rows, k)) return;
  if (owns) {
    float4* sum = reinterpret_cast<float4*>(accum + col);
    const float4 v = __ldcg(sum);
    *sum = make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<uint2*>(y + col) = make_uint2(bf16x2_bits(v.x, v.y), bf16x2_bits(v.z, v.w));
  }
  if (threadIdx.x == 0) tickets[tile] = 0;
}

// Blocks per SM the stream-K kernel is compiled for: the most at which ptxas fits it without
// spills (L8: 64 registers, 4 blocks; L4: 40 registers, 6 blocks).
constexpr int streamk_min_blocks(int loads) { return loads >= 8 ? 4 : 6; }

// columns "streamk L{L}": v4's layout (32 threads x 16 bytes across a 256-column tile, 8 slices
// down the block), over a work space of units: unit = (tile, group), a group being the L * 8 rows
// group * L * 8 .. of K that one batch covers (each thread L rows, one per 16-byte load), ordered
// tile-major. The grid is one wave of resident blocks (the host launches no more blocks than
// units), and block i takes units [i * units / blocks, (i + 1) * units / blocks): every block the
// same rows, give or take one group, whatever the tile count. A block's range may end one tile and
// start the next (or cover whole tiles); at the end of each tile segment streamk_segment_done
// reduces it. Each batch loads without predicates, except a tile's last group where K is not a
// multiple of the group (block-uniform choice); the first batch is issued before x is staged in
// shared memory, and each next batch before the previous segment's reduction, so the loads are in
// flight while it runs. SASS (ptxas -v: no spills, no stack): L8 64 registers, L4 40; every batch
// issues its L LDG.E.NA.128 before any FFMA, the first before the x staging's BAR.SYNC, the next
// ones before the segment's STS/BAR.SYNC/ATOMG.
template <int L>
__global__ void __launch_bounds__(kThreads, streamk_min_blocks(L))
    columns_streamk_kernel(const uint4* __restrict__ b, int ldb_vec, const bf16* __restrict__ x, bf16* __restrict__ y, int n, int k,
                           int groups_per_tile, int units, float* __restrict__ accum, unsigned* __restrict__ tickets) {
  constexpr int kGroupRows = L * kSlices;
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int unit_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * units / gridDim.x);
  const int unit_end = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * units / gridDim.x);
  const size_t step = static_cast<size_t>(kSlices) * ldb_vec;  // one slice step down K
  // This thread's chunk of `tile` exists (n % 8 == 0; only a last partial tile has threads past N).
  const auto active = [&](int tile) { return (tile * 32 + col_thread) * kVec < n; };
  // Unit (tile, group)'s loads: rows group * kGroupRows + slice + u * kSlices of this thread's chunk.
  const auto load_unit = [&](uint4(&r)[L], int tile, int group) {
    if (!active(tile)) return;
    const uint4* p = b + static_cast<size_t>(group * kGroupRows + slice) * ldb_vec + tile * 32 + col_thread;
    const int rows = k - group * kGroupRows;  // >= 1
    if (rows >= kGroupRows) load_batch<L, false>(r, p, step, L);
    else load_batch<L, true>(r, p, step, (rows - slice + kSlices - 1) / kSlices);
  };

  int tile = unit_begin / groups_per_tile, group = unit_begin % groups_per_tile;
  uint4 r[L];
  load_unit(r, tile, group);
  // x for the block's units as raw bf16 bits: entry j is x at row j % kGroupRows of the group of
  // unit unit_begin + j / kGroupRows, so one array serves segments of several tiles; zero past K,
  // so that a partial group's missing rows (zero weights) do not meet a NaN pattern. The host
  // keeps (unit_end - unit_begin) * kGroupRows within kMaxXRange.
  __shared__ uint16_t x_units[kMaxXRange];
  const uint16_t* xg = reinterpret_cast<const uint16_t*>(x);
  for (int j = threadIdx.x; j < (unit_end - unit_begin) * kGroupRows; j += kThreads) {
    const int row = (group + j / kGroupRows) % groups_per_tile * kGroupRows + j % kGroupRows;
    x_units[j] = row < k ? xg[row] : uint16_t{0};
  }
  __syncthreads();
  float acc[kVec] = {};
  int segment_group = group;  // the current tile segment's first group
  for (int unit = unit_begin;;) {
    if (active(tile)) fma_batch<L, kSlices>(acc, r, x_units + (unit - unit_begin) * kGroupRows + slice);
    const bool tile_done = group + 1 == groups_per_tile, more = ++unit < unit_end;
    const int next_tile = tile_done ? tile + 1 : tile, next_group = tile_done ? 0 : group + 1;
    if (more) load_unit(r, next_tile, next_group);
    if (tile_done || !more) {
      const int rows = min((group + 1) * kGroupRows, k) - segment_group * kGroupRows;
      streamk_segment_done(acc, tile, rows, n, k, y, accum, tickets);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] = 0.f;
      segment_group = 0;
    }
    if (!more) break;
    tile = next_tile, group = next_group;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

struct Shape {
  int k, n;
};

struct Problem {
  Shape s;
  const bf16* w0;          // copy 0; copy c at w0 + c * stride elements
  size_t stride;           // elements between copies
  int copies;
  const bf16* x;
  bf16* y;
  float* accum;            // zeroed split-K state (the columns kernels leave it zero)
  unsigned* tickets;
  int sms;
  size_t bytes() const { return static_cast<size_t>(s.k) * s.n * sizeof(bf16); }
  const bf16* w(int c) const { return w0 + c * stride; }
};

using Launch = std::function<void(const Problem&, const bf16* w, cudaStream_t)>;

struct Variant {
  std::string name;
  Launch launch;
  bool (*applies)(const Shape&) = nullptr;  // null: every shape of its layout
  std::string (*config)(const Problem&) = nullptr;  // non-null: the launch it picks, printed after err
};

// The group width gemv.cu's launch_rows_m picks (one input row, 16-byte path).
int ember_rows_group(const Problem& p) {
  const int64_t want_warps = 8 * static_cast<int64_t>(p.sms), per_row = p.s.k / kVec;
  int group = 32;
  while (group < 256 && static_cast<int64_t>(p.s.n) * group / 32 < want_warps && per_row / (2 * group) >= 4) group *= 2;
  return group;
}

template <int GROUP> void launch_ember_rows_group(const Problem& p, const bf16* w, cudaStream_t st) {
  const unsigned blocks = (p.s.n + kThreads / GROUP - 1) / (kThreads / GROUP);
  ember_rows_kernel<GROUP><<<blocks, kThreads, 0, st>>>(w, p.s.k, p.x, nullptr, p.y, p.s.n, p.s.k);
}

void launch_ember_rows(const Problem& p, const bf16* w, cudaStream_t st) {
  switch (ember_rows_group(p)) {
    case 32: return launch_ember_rows_group<32>(p, w, st);
    case 64: return launch_ember_rows_group<64>(p, w, st);
    case 128: return launch_ember_rows_group<128>(p, w, st);
    default: return launch_ember_rows_group<256>(p, w, st);
  }
}

// A warp-per-row (or R rows per warp) variant kernel over the problem.
template <class Kernel> void launch_warp_rows(Kernel kernel, int rows_per_warp, const Problem& p, const bf16* w, cudaStream_t st) {
  const int warps = (p.s.n + rows_per_warp - 1) / rows_per_warp;
  const unsigned blocks = (warps + kThreads / 32 - 1) / (kThreads / 32);
  kernel<<<blocks, kThreads, 0, st>>>(reinterpret_cast<const uint4*>(w), p.s.k / kVec, reinterpret_cast<const uint4*>(p.x), p.y, p.s.n,
                                      p.s.k / kVec);
}

template <int L> void launch_rows_persist(const Problem& p, const bf16* w, cudaStream_t st) {
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rows_persist_kernel<L>, kThreads, 0));
  const int needed = (p.s.n + kThreads / 32 - 1) / (kThreads / 32);
  const unsigned blocks = static_cast<unsigned>(std::min(needed, per_sm * p.sms));
  rows_persist_kernel<L><<<blocks, kThreads, 0, st>>>(reinterpret_cast<const uint4*>(w), p.s.k / kVec, reinterpret_cast<const uint4*>(p.x),
                                                      p.y, p.s.n, p.s.k / kVec);
}

// rows "smem L": x in dynamic shared memory (the kernel's attribute allows 64 KB: set in main()).
template <int L> void launch_rows_smem(const Problem& p, const bf16* w, cudaStream_t st) {
  const unsigned blocks = (p.s.n + kThreads / 32 - 1) / (kThreads / 32);
  rows_smem_kernel<L><<<blocks, kThreads, p.s.k * sizeof(bf16), st>>>(reinterpret_cast<const uint4*>(w), p.s.k / kVec,
                                                                     reinterpret_cast<const uint4*>(p.x), p.y, p.s.n, p.s.k / kVec);
}

// A launch of `tiles` x `cluster` blocks of `threads`, one cluster per column tile (blockIdx.y =
// rank), as gemv.cu's ClusterLaunch; the attribute lives as long as the config that points to it.
struct ClusterLaunch {
  cudaLaunchAttribute attribute{};
  cudaLaunchConfig_t config{};
  ClusterLaunch(int tiles, int cluster, int threads, cudaStream_t stream) {
    config.gridDim = dim3(tiles, cluster);
    config.blockDim = dim3(threads);
    config.stream = stream;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 1;
    attribute.val.clusterDim.y = cluster;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// The largest cluster (16 or the portable 8) `kernel` may use with THREADS-thread blocks, as
// gemv.cu's cluster_size_limit decides it.
template <class Kernel> int cluster_limit(Kernel kernel, int threads) {
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const ClusterLaunch launch(1, 16, threads, nullptr);
  int largest = 0, clusters = 0;
  CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, kernel, &launch.config));
  if (largest >= 16) CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config));
  return clusters > 0 ? 16 : 8;
}

// The cluster kernel <COLS, THREADS, LOADS> with `cluster` blocks splitting K per tile.
template <int COLS, int THREADS, int LOADS, bool X_SMEM = false>
void launch_cluster(const Problem& p, const bf16* w, cudaStream_t st, int cluster) {
  const auto kernel = cluster_columns_kernel<COLS, THREADS, LOADS, X_SMEM>;  // cluster_limit allowed clusters of 16
  const ClusterLaunch launch((p.s.n + COLS * kVec - 1) / (COLS * kVec), cluster, THREADS, st);
  const int64_t k_per_rank = (p.s.k + cluster - 1) / cluster;
  CHECK(cudaLaunchKernelEx(&launch.config, kernel, w, static_cast<int64_t>(p.s.n), p.x, static_cast<const bf16*>(nullptr), p.y,
                           static_cast<int64_t>(p.s.n), static_cast<int64_t>(p.s.k), k_per_rank));
}

// ember's cluster (split of K) for a shape: gemv.cu's launch_columns_cluster rule (double until
// ~4 blocks per SM while each thread keeps >= 4 rows); 0 where it returns false (v4 runs).
int ember_cluster(const Problem& p) {
  constexpr int kCols = 64, kSlicesDown = 32, kLoads = 8;
  if (p.s.n > 1024 && static_cast<int64_t>(p.s.n) * p.s.k > 3700000) return 0;
  static const int max_cluster = cluster_limit(cluster_columns_kernel<8, 256, 8>, 256);
  const int64_t tiles = (p.s.n + kCols - 1) / kCols;
  int64_t cluster = 1;
  while (cluster < max_cluster && tiles * cluster < 4 * p.sms && p.s.k / (2 * kSlicesDown * cluster) >= 4) cluster *= 2;
  const int64_t rows_per_thread = ((p.s.k + cluster - 1) / cluster + kSlicesDown - 1) / kSlicesDown;
  if (tiles * cluster < 2 * p.sms && rows_per_thread > 2 * kLoads) return 0;
  return static_cast<int>(cluster);
}

void launch_ember_columns(const Problem& p, const bf16* w, cudaStream_t st) {
  if (const int cluster = ember_cluster(p)) return launch_cluster<8, 256, 8>(p, w, st, cluster);
  const int64_t tiles = (p.s.n + 255) / 256;
  const int64_t target = 4 * p.sms;
  int64_t splits = std::max<int64_t>(1, (target + tiles - 1) / tiles);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, p.s.k / (2 * kSlices)));
  splits = std::min<int64_t>(splits, 65535);
  const int64_t k_per_split = (p.s.k + splits - 1) / splits;
  splits = (p.s.k + k_per_split - 1) / k_per_split;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  ember_columns_kernel<<<grid, kThreads, 0, st>>>(w, p.s.n, p.x, nullptr, p.y, p.s.n, p.s.k, k_per_split, p.accum, p.tickets);
}

// The cluster variants' split: double the cluster (<= the kernel's limit) until ~BLOCKS_PER_SM
// blocks per SM while each thread keeps >= LOADS rows of K, and at least until each rank's x
// range fits in shared memory.
template <int COLS, int THREADS, int LOADS, int BLOCKS_PER_SM> void launch_cluster_variant(const Problem& p, const bf16* w, cudaStream_t st) {
  static const int max_cluster = cluster_limit(cluster_columns_kernel<COLS, THREADS, LOADS, true>, THREADS);
  constexpr int kSlicesDown = THREADS / COLS;
  const int64_t tiles = (p.s.n + COLS * kVec - 1) / (COLS * kVec);
  int cluster = 1;
  while (cluster < max_cluster && tiles * cluster < BLOCKS_PER_SM * p.sms && p.s.k / (2 * kSlicesDown * cluster) >= LOADS) cluster *= 2;
  while ((p.s.k + cluster - 1) / cluster > kMaxXRange) cluster *= 2;
  if (cluster > max_cluster) {
    std::fprintf(stderr, "K = %d needs a cluster of %d\n", p.s.k, cluster);
    std::exit(1);
  }
  launch_cluster<COLS, THREADS, LOADS, true>(p, w, st, cluster);
}

// The split variant: K ranges of L * 8 rows (one batch per thread), at most 65535 splits.
template <int L> void launch_columns_split(const Problem& p, const bf16* w, cudaStream_t st) {
  const int tiles = (p.s.n + 255) / 256;
  int k_per_split = L * kSlices;
  while ((p.s.k + k_per_split - 1) / k_per_split > 65535) k_per_split *= 2;
  // No more splits than ~8 blocks per SM need: longer ranges (several batches) beyond that.
  while (2 * k_per_split <= kMaxXRange && static_cast<int64_t>(tiles) * ((p.s.k + 2 * k_per_split - 1) / (2 * k_per_split)) >= 8 * p.sms)
    k_per_split *= 2;
  const int splits = (p.s.k + k_per_split - 1) / k_per_split;
  const dim3 grid(tiles, splits);
  columns_split_kernel<L><<<grid, kThreads, 0, st>>>(reinterpret_cast<const uint4*>(w), p.s.n / kVec, p.x, p.y, p.s.n, p.s.k, k_per_split,
                                                     p.accum, p.tickets);
}

// Blocks of `kernel` (THREADS threads) resident at once, in clusters of `cluster` along y: the
// most clusters that fit at once (cluster 1: blocks per SM x SMs), cached per kernel and size. A
// cluster size the runtime refuses counts as none fitting (the "balanced" plans try every size).
template <class Kernel> int resident_clusters(Kernel kernel, int threads, int cluster, int sms) {
  static std::map<std::pair<const void*, int>, int> cache;  // the batch kernels share one Kernel type
  const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), cluster};
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  int count = 0;
  if (cluster == 1) {
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel, threads, 0));
    count *= sms;
  } else {
    const ClusterLaunch launch(1, cluster, threads, nullptr);
    if (cudaOccupancyMaxActiveClusters(&count, kernel, &launch.config) != cudaSuccess) {
      (void)cudaGetLastError();  // clear it: a refused size is an answer, not a failure
      count = 0;
    }
  }
  return cache[key] = count;
}

// The batch kernel's cluster for a shape: the largest power of 2 (<= the kernel's limit) with
// every cluster resident at once and >= 1 row of K per thread; 0 if the rank's x range cannot
// fit in shared memory (K > 4096 at that cluster: none of the columns2 shapes).
template <int COLS, int THREADS, int L, bool PUSH = false> int batch_cluster(const Problem& p) {
  const auto kernel = columns_batch_kernel<COLS, THREADS, L, PUSH>;
  constexpr int kSlicesDown = THREADS / COLS, kBatchRows = L * kSlicesDown;
  static const int max_cluster = cluster_limit(kernel, THREADS);
  const int tiles = (p.s.n + COLS * kVec - 1) / (COLS * kVec);
  int cluster = 1;
  while (2 * cluster <= max_cluster && p.s.k / (2 * cluster) >= kSlicesDown &&
         tiles <= resident_clusters(kernel, THREADS, 2 * cluster, p.sms))
    cluster *= 2;
  const int k_per_rank = (p.s.k + cluster - 1) / cluster;
  return (k_per_rank + kBatchRows - 1) / kBatchRows * kBatchRows <= kMaxXRange ? cluster : 0;
}

// "cluster C blocks B": the batch kernel's launch for the shape; "skip: why" where it cannot run.
template <int COLS, int THREADS, int L, bool PUSH = false> std::string batch_config(const Problem& p) {
  const int cluster = batch_cluster<COLS, THREADS, L, PUSH>(p), tiles = (p.s.n + COLS * kVec - 1) / (COLS * kVec);
  if (cluster == 0) return "skip: a rank's x range exceeds " + std::to_string(kMaxXRange) + " rows";
  return "cluster " + std::to_string(cluster) + " blocks " + std::to_string(tiles * cluster);
}

template <int COLS, int THREADS, int L, bool PUSH = false> void launch_columns_batch(const Problem& p, const bf16* w, cudaStream_t st) {
  const auto kernel = columns_batch_kernel<COLS, THREADS, L, PUSH>;
  const int cluster = batch_cluster<COLS, THREADS, L, PUSH>(p);
  if (cluster == 0) {
    std::fprintf(stderr, "batch C%d T%d L%d: K = %d does not fit its x range\n", COLS, THREADS, L, p.s.k);
    std::exit(1);
  }
  const int tiles = (p.s.n + COLS * kVec - 1) / (COLS * kVec);
  const int k_per_rank = (p.s.k + cluster - 1) / cluster;
  const auto* bv = reinterpret_cast<const uint4*>(w);
  if (cluster == 1) {
    kernel<<<tiles, THREADS, 0, st>>>(bv, p.s.n / kVec, p.x, p.y, p.s.n, p.s.k, k_per_rank);
    return;
  }
  const ClusterLaunch launch(tiles, cluster, THREADS, st);
  CHECK(cudaLaunchKernelEx(&launch.config, kernel, bv, p.s.n / kVec, p.x, p.y, p.s.n, p.s.k, k_per_rank));
}

// The rowtile kernels' block for N (threads = 16-byte chunks per tile): the whole row of N / 8
// chunks if it fits in one block, else the largest divisor of N / 8 that is a multiple of 32 and
// <= kMaxRowTile (whole tiles and whole warps); 0 if there is none.
int rowtile_threads(int n) {
  const int chunks = n / kVec;
  if (chunks <= kMaxRowTile) return chunks;
  for (int threads = kMaxRowTile; threads >= 32; threads -= 32)
    if (chunks % threads == 0) return threads;
  return 0;
}

// Blocks of the rowtile kernel (CLUSTER 1) or of the cluster kernel in clusters of CLUSTER resident
// at once with `threads`-thread blocks, cached per size (the launches run inside graph capture).
template <int L, int CLUSTER> int rowtile_resident(int threads, int sms) {
  static std::map<int, int> cache;
  if (const auto it = cache.find(threads); it != cache.end()) return it->second;
  int count = 0;
  if constexpr (CLUSTER == 1) {
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, columns_rowtile_kernel<L>, threads, 0));
    count *= sms;
  } else {
    const ClusterLaunch launch(1, CLUSTER, threads, nullptr);
    CHECK(cudaOccupancyMaxActiveClusters(&count, columns_rowtile_cluster_kernel<L, CLUSTER>, &launch.config));
    count *= CLUSTER;
  }
  return cache[threads] = count;
}

struct RowtilePlan {
  int threads = 0, tiles = 0, splits = 0, k_per_split = 0;
  const char* unfit = nullptr;  // non-null: why the shape cannot run
};

// "rowtile L{L} {WAVES}wave[ c{CLUSTER}]": as many K splits (a multiple of CLUSTER) as make
// tiles x splits about WAVES waves of resident blocks, never more; each split a multiple of L rows.
template <int L, int WAVES, int CLUSTER> RowtilePlan rowtile_plan(const Problem& p) {
  RowtilePlan plan;
  plan.threads = rowtile_threads(p.s.n);
  if (plan.threads == 0 || plan.threads % CLUSTER != 0) {
    plan.unfit = "N / 8 has no tile of <= 1024 threads (a multiple of 32 and of the cluster)";
    return plan;
  }
  plan.tiles = p.s.n / kVec / plan.threads;
  const int resident = rowtile_resident<L, CLUSTER>(plan.threads, p.sms);
  if (resident == 0) {
    plan.unfit = "no block or cluster of this size fits";
    return plan;
  }
  const int clusters_per_tile = std::max(1, WAVES * resident / (plan.tiles * CLUSTER));
  const int wanted_splits = clusters_per_tile * CLUSTER;
  plan.k_per_split = ((p.s.k + wanted_splits - 1) / wanted_splits + L - 1) / L * L;
  plan.splits = ((p.s.k + plan.k_per_split - 1) / plan.k_per_split + CLUSTER - 1) / CLUSTER * CLUSTER;
  if (plan.k_per_split > kMaxXRange) plan.unfit = "a split's x range exceeds 4096 rows";
  return plan;
}

// "tile T (B bytes) splits S blocks X rows R[ cluster C]", or "skip: why".
template <int L, int WAVES, int CLUSTER = 1> std::string rowtile_config(const Problem& p) {
  const RowtilePlan plan = rowtile_plan<L, WAVES, CLUSTER>(p);
  if (plan.unfit) return std::string("skip: ") + plan.unfit;
  return "tile " + std::to_string(plan.threads) + " (" + std::to_string(plan.threads * 16) + " B) splits " + std::to_string(plan.splits) +
         " blocks " + std::to_string(plan.tiles * plan.splits) + " rows " + std::to_string(plan.k_per_split) +
         (CLUSTER > 1 ? " cluster " + std::to_string(CLUSTER) : "");
}

template <int L, int WAVES, int CLUSTER = 1> void launch_columns_rowtile(const Problem& p, const bf16* w, cudaStream_t st) {
  const RowtilePlan plan = rowtile_plan<L, WAVES, CLUSTER>(p);
  if (plan.unfit) {
    std::fprintf(stderr, "rowtile L%d %dwave c%d, %dx%d: %s\n", L, WAVES, CLUSTER, p.s.k, p.s.n, plan.unfit);
    std::exit(1);
  }
  const auto* bv = reinterpret_cast<const uint4*>(w);
  if constexpr (CLUSTER == 1) {
    columns_rowtile_kernel<L><<<dim3(plan.tiles, plan.splits), plan.threads, 0, st>>>(bv, p.s.n / kVec, p.x, p.y, p.s.k, plan.k_per_split,
                                                                                    p.accum, p.tickets);
  } else {
    ClusterLaunch launch(plan.tiles, CLUSTER, plan.threads, st);
    launch.config.gridDim.y = plan.splits;  // clusters of CLUSTER along y, splits / CLUSTER of them per tile
    CHECK(cudaLaunchKernelEx(&launch.config, columns_rowtile_cluster_kernel<L, CLUSTER>, bv, p.s.n / kVec, p.x, p.y, p.s.k,
                             plan.k_per_split, p.accum, p.tickets));
  }
}

// The "balanced" variants' launch: the batch kernel (PUSH, ANY_CLUSTER) in the cluster, of any
// size up to the kernel's limit, whose blocks (tiles x cluster) fill the most of one or two rounds
// of the resident slots (blocks per SM x SMs). A round holds as many clusters as
// cudaOccupancyMaxActiveClusters allows at once (clusters stay within a GPC, so fewer than slots /
// cluster may fit); fill = blocks / (rounds x slots). Each rank gets ceil(K / cluster) rows, as in
// launch_columns_batch: at least one per thread, none empty, and its x range within kMaxXRange.
// Ties go to the smaller cluster (one round rather than two, less to reduce).
struct BalancedPlan {
  int tiles = 0, slots = 0, cluster = 0, k_per_rank = 0, rounds = 0;  // cluster 0: no size is legal
};

template <int COLS, int THREADS, int L> BalancedPlan balanced_plan(const Problem& p) {
  const auto kernel = columns_batch_kernel<COLS, THREADS, L, true, true>;
  constexpr int kSlicesDown = THREADS / COLS, kBatchRows = L * kSlicesDown;
  static const int max_cluster = cluster_limit(kernel, THREADS);  // also allows the sizes above 8
  BalancedPlan plan;
  plan.tiles = (p.s.n + COLS * kVec - 1) / (COLS * kVec);
  plan.slots = resident_clusters(kernel, THREADS, 1, p.sms);
  double best_fill = 0.0;
  for (int cluster = 1; cluster <= max_cluster; ++cluster) {
    const int k_per_rank = (p.s.k + cluster - 1) / cluster;
    if (k_per_rank < kSlicesDown || (cluster - 1) * k_per_rank >= p.s.k) continue;
    if ((k_per_rank + kBatchRows - 1) / kBatchRows * kBatchRows > kMaxXRange) continue;
    const int resident = resident_clusters(kernel, THREADS, cluster, p.sms);
    if (resident == 0) continue;
    const int rounds = (plan.tiles + resident - 1) / resident;
    const double fill = static_cast<double>(plan.tiles) * cluster / (static_cast<double>(rounds) * plan.slots);
    if (rounds <= 2 && fill > best_fill) {
      best_fill = fill;
      plan.cluster = cluster, plan.k_per_rank = k_per_rank, plan.rounds = rounds;
    }
  }
  return plan;
}

// "tiles T cluster C blocks B of S slots (R rounds) rows K", or "skip: why".
template <int COLS, int THREADS, int L> std::string balanced_config(const Problem& p) {
  const BalancedPlan plan = balanced_plan<COLS, THREADS, L>(p);
  if (plan.cluster == 0) return "skip: no cluster size fits a rank's x range";
  return "tiles " + std::to_string(plan.tiles) + " cluster " + std::to_string(plan.cluster) + " blocks " +
         std::to_string(plan.tiles * plan.cluster) + " of " + std::to_string(plan.slots) + " slots (" + std::to_string(plan.rounds) +
         (plan.rounds == 1 ? " round" : " rounds") + ") rows " + std::to_string(plan.k_per_rank);
}

template <int COLS, int THREADS, int L> void launch_columns_balanced(const Problem& p, const bf16* w, cudaStream_t st) {
  const auto kernel = columns_batch_kernel<COLS, THREADS, L, true, true>;
  const BalancedPlan plan = balanced_plan<COLS, THREADS, L>(p);
  if (plan.cluster == 0) {
    std::fprintf(stderr, "balanced C%d T%d L%d, %dx%d: no cluster size fits a rank's x range\n", COLS, THREADS, L, p.s.k, p.s.n);
    std::exit(1);
  }
  const auto* bv = reinterpret_cast<const uint4*>(w);
  if (plan.cluster == 1) {
    kernel<<<plan.tiles, THREADS, 0, st>>>(bv, p.s.n / kVec, p.x, p.y, p.s.n, p.s.k, plan.k_per_rank);
    return;
  }
  const ClusterLaunch launch(plan.tiles, plan.cluster, THREADS, st);
  CHECK(cudaLaunchKernelEx(&launch.config, kernel, bv, p.s.n / kVec, p.x, p.y, p.s.n, p.s.k, plan.k_per_rank));
}

// The stream-K launch: one wave of resident blocks (all that fit per SM, at most BLOCKS_PER_SM if
// that is > 0), no more blocks than units so none is empty; unfit where a block's units span more
// x than kMaxXRange rows.
struct StreamkPlan {
  int tiles = 0, groups_per_tile = 0, units = 0, per_sm = 0, blocks = 0;
  const char* unfit = nullptr;  // non-null: why the shape cannot run
};

template <int L, int BLOCKS_PER_SM> StreamkPlan streamk_plan(const Problem& p) {
  constexpr int kGroupRows = L * kSlices;
  StreamkPlan plan;
  const int resident_per_sm = resident_clusters(columns_streamk_kernel<L>, kThreads, 1, p.sms) / p.sms;
  plan.per_sm = BLOCKS_PER_SM > 0 ? std::min(BLOCKS_PER_SM, resident_per_sm) : resident_per_sm;
  plan.tiles = (p.s.n + 32 * kVec - 1) / (32 * kVec);
  plan.groups_per_tile = (p.s.k + kGroupRows - 1) / kGroupRows;
  plan.units = plan.tiles * plan.groups_per_tile;
  plan.blocks = std::min(plan.per_sm * p.sms, plan.units);
  if (plan.blocks == 0) plan.unfit = "no block fits on an SM";
  else if ((plan.units + plan.blocks - 1) / plan.blocks * kGroupRows > kMaxXRange) plan.unfit = "a block's x range exceeds 4096 rows";
  return plan;
}

// "tiles T units U (R rows) blocks B (P/SM) units/block A-B", or "skip: why".
template <int L, int BLOCKS_PER_SM = 0> std::string streamk_config(const Problem& p) {
  const StreamkPlan plan = streamk_plan<L, BLOCKS_PER_SM>(p);
  if (plan.unfit) return std::string("skip: ") + plan.unfit;
  return "tiles " + std::to_string(plan.tiles) + " units " + std::to_string(plan.units) + " (" + std::to_string(L * kSlices) +
         " rows) blocks " + std::to_string(plan.blocks) + " (" + std::to_string(plan.per_sm) + "/SM) units/block " +
         std::to_string(plan.units / plan.blocks) + "-" + std::to_string((plan.units + plan.blocks - 1) / plan.blocks);
}

template <int L, int BLOCKS_PER_SM = 0> void launch_columns_streamk(const Problem& p, const bf16* w, cudaStream_t st) {
  const StreamkPlan plan = streamk_plan<L, BLOCKS_PER_SM>(p);
  if (plan.unfit) {
    std::fprintf(stderr, "streamk L%d, %dx%d: %s\n", L, p.s.k, p.s.n, plan.unfit);
    std::exit(1);
  }
  columns_streamk_kernel<L><<<plan.blocks, kThreads, 0, st>>>(reinterpret_cast<const uint4*>(w), p.s.n / kVec, p.x, p.y, p.s.n, p.s.k,
                                                              plan.groups_per_tile, plan.units, p.accum, p.tickets);
}

// ---------------------------------------------------------------------------------------------

uint16_t bits(bf16 v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}
// One line per (variant, shape). x20: also time each variant as ember's decode bench does, 20
// launches per graph cycling through the copies (columns "us x20" and "TB/s x20"; the "harness"
// section measured that ~0.6 us faster per launch than the graph of each copy once).
void run_layout(const char* layout, bool rows, const std::vector<Shape>& shapes, const std::vector<Variant>& variants, bf16* pool,
                size_t pool_bytes, Problem base, bool x20 = false) {
  std::printf("\n%s layout%s\n%-22s %13s %9s %8s", layout, rows ? " (W [N, K], y = W x)" : " (B [K, N], y = x B)", "variant", "K x N",
              "us", "TB/s");
  if (x20) std::printf(" %9s %8s", "us x20", "TB/s x20");
  std::printf(" %8s %9s\n", "speedup", "err");
  for (const Shape& s : shapes) {
    Problem p = base;
    p.s = s;
    const size_t bytes = p.bytes();
    p.stride = (bytes + 255) / 256 * 256 / sizeof(bf16);
    p.copies = static_cast<int>(std::max<size_t>(2, ((size_t{400} << 20) + bytes - 1) / bytes));
    p.copies = static_cast<int>(std::min<size_t>(p.copies, pool_bytes / (p.stride * sizeof(bf16))));
    p.w0 = pool;
    fill_bf16_kernel<<<4 * p.sms, 256>>>(pool, static_cast<size_t>(s.k) * s.n, 12345u + s.k * 7u + s.n);
    fill_bf16_kernel<<<64, 256>>>(const_cast<bf16*>(p.x), s.k, 777u + s.k);
    for (int c = 1; c < p.copies; ++c) CHECK(cudaMemcpy(pool + c * p.stride, pool, bytes, cudaMemcpyDeviceToDevice));
    std::vector<uint16_t> w_host(static_cast<size_t>(s.k) * s.n), x_host(s.k);
    CHECK(cudaMemcpy(w_host.data(), pool, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(x_host.data(), p.x, s.k * sizeof(bf16), cudaMemcpyDeviceToHost));
    const std::vector<double> ref = gemv_reference(w_host, x_host, s.k, s.n, rows);
    double ref_max = 0.0;
    for (double v : ref) ref_max = std::max(ref_max, std::fabs(v));
    float base_us = 0.f;
    for (const Variant& v : variants) {
      if (v.applies && !v.applies(s)) continue;
      const std::string config = v.config ? v.config(p) : "";
      if (config.rfind("skip: ", 0) == 0) {
        std::printf("%-22s %dx%d skipped: %s\n", v.name.c_str(), s.k, s.n, config.c_str() + 6);
        continue;
      }
      const auto [err, us] =
          check_and_time([&](int c, cudaStream_t st) { v.launch(p, p.w(c), st); }, p.copies, p.y, s.n, ref, ref_max);
      if (base_us == 0.f) base_us = us;
      char shape[32];
      std::snprintf(shape, sizeof shape, "%dx%d", s.k, s.n);
      std::printf("%-22s %13s %9.2f %8.2f", v.name.c_str(), shape, us, bytes / us / 1e6);
      if (x20) {
        const float us20 = time_graph([&](cudaStream_t st) {
          for (int i = 0; i < 20; ++i) v.launch(p, p.w(i % p.copies), st);
        }, 20);
        std::printf(" %9.2f %8.2f", us20, bytes / us20 / 1e6);
      }
      std::printf(" %7.3fx %9.1e%s%s%s\n", base_us / us, err, err > 1e-2 ? " FAIL" : "", config.empty() ? "" : "  ", config.c_str());
    }
  }
}

// Sections: rows, rows2 (long rows, few warps per SM), columns (the first round), columns2 (the
// batch kernels on the mid shapes), columns3 (the small shapes), columns4 (256-thread tiles on mid
// shapes), columns5 (the same on the 100-470 MB shapes), columns6 (row tiles on the 100-135 MB
// shapes), columns7 (load balance on the same shapes: clusters of any size, stream-K), harness
// (the timing setups); the arguments name the ones to run, none: all of them.
int main(int argc, char** argv) {
  const auto wanted = [&](const char* section) {
    if (argc == 1) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], section) == 0) return true;
    return false;
  };
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const size_t pool_bytes = size_t{4400} << 20;  // 2 copies of the largest shape (8192 x 128256: 2.1 GB)
  bf16* pool = nullptr;
  CHECK(cudaMalloc(&pool, pool_bytes));
  Problem base{};
  base.sms = prop.multiProcessorCount;
  constexpr int kMaxK = 28672, kMaxN = 256000;
  CHECK(cudaMalloc(const_cast<bf16**>(&base.x), kMaxK * sizeof(bf16)));
  CHECK(cudaMalloc(&base.y, kMaxN * sizeof(bf16)));
  CHECK(cudaMalloc(&base.accum, kMaxN * sizeof(float)));
  CHECK(cudaMemset(base.accum, 0, kMaxN * sizeof(float)));
  CHECK(cudaMalloc(&base.tickets, kMaxN * sizeof(unsigned)));
  CHECK(cudaMemset(base.tickets, 0, kMaxN * sizeof(unsigned)));

  for (const void* kernel : {reinterpret_cast<const void*>(rows_smem_kernel<4>), reinterpret_cast<const void*>(rows_smem_kernel<8>)})
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));

  // The first variant of each layout is ember's current kernel: the speedups are against it.
  const std::vector<Variant> row_variants = {
      {"ember rows (G32)", launch_ember_rows},
      {"ember rows G64", launch_ember_rows_group<64>},
      {"unpred L4", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<4, false>, 1, p, w, st); }},
      {"unpred L8", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<8, false>, 1, p, w, st); }},
      {"persist L4", launch_rows_persist<4>},
      {"persist L8", launch_rows_persist<8>},
      {"unpred L4 noL1", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<4, true>, 1, p, w, st); }},
      {"unpred L8 noL1", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<8, true>, 1, p, w, st); }},
      {"pipe L4", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_pipe_kernel<4>, 1, p, w, st); }},
      {"smem L4", launch_rows_smem<4>},
      {"smem L8", launch_rows_smem<8>},
      {"multi R2 L4", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_multi_kernel<2, 4, false>, 2, p, w, st); }},
      {"multi R2 L4 noL1", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_multi_kernel<2, 4, true>, 2, p, w, st); }},
      {"multi R4 L2 noL1", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_multi_kernel<4, 2, true>, 4, p, w, st); }},
  };
  const std::vector<Shape> row_shapes = {{28672, 8192}, {8192, 8192}, {3584, 14336}, {4096, 14336}, {2304, 9216}, {2304, 256000}};

  const std::vector<Variant> column_variants = {
      {"ember columns (v4/v5)", launch_ember_columns},
      {"split L8 f4", launch_columns_split<8>},
      {"split L4 f4", launch_columns_split<4>},
      {"cluster C32 T256 L8", launch_cluster_variant<32, 256, 8, 4>},
      {"cluster C32 T512 L8", launch_cluster_variant<32, 512, 8, 2>},
      {"cluster C16 T256 L8", launch_cluster_variant<16, 256, 8, 4>},
      {"cluster C8 T256 L8", launch_cluster_variant<8, 256, 8, 4>},
  };
  const std::vector<Shape> column_shapes = {{2048, 4096}, {2048, 8192}, {2048, 7168},  {2304, 2048},   {768, 2048},
                                            {512, 2048},  {2048, 2048}, {8192, 128256}, {2304, 256000}, {4096, 128256}};

  // The mid shapes where torch beats ember (ember bench, torch vs ember us: 2048x4096 7.23 vs
  // 8.14, 2048x8192 11.13 vs 11.68, 2048x7168 10.07 vs 10.85, 2304x9216 12.57 vs 13.74, ...).
  const std::vector<Variant> column2_variants = {
      {"ember columns (v4/v5)", launch_ember_columns},
      {"split L8 f4", launch_columns_split<8>},
      {"batch C4 T1024 L8", launch_columns_batch<4, 1024, 8>, nullptr, batch_config<4, 1024, 8>},
      {"batch C8 T1024 L8", launch_columns_batch<8, 1024, 8>, nullptr, batch_config<8, 1024, 8>},
      {"batch C16 T512 L8", launch_columns_batch<16, 512, 8>, nullptr, batch_config<16, 512, 8>},
      {"batch C32 T512 L8", launch_columns_batch<32, 512, 8>, nullptr, batch_config<32, 512, 8>},
      {"batch C32 T256 L16", launch_columns_batch<32, 256, 16>, nullptr, batch_config<32, 256, 16>},
      {"batch C16 T512 L8 push", launch_columns_batch<16, 512, 8, true>, nullptr, batch_config<16, 512, 8, true>},
      {"batch C32 T512 L8 push", launch_columns_batch<32, 512, 8, true>, nullptr, batch_config<32, 512, 8, true>},
      {"batch C8 T1024 L8 push", launch_columns_batch<8, 1024, 8, true>, nullptr, batch_config<8, 1024, 8, true>},
  };
  const std::vector<Shape> column2_shapes = {{2048, 4096}, {2048, 8192}, {2048, 7168}, {2304, 9216}, {2048, 6144},
                                             {2304, 2048}, {2048, 2048}, {768, 2048},  {512, 2048}};

  if (wanted("rows")) run_layout("rows", true, row_shapes, row_variants, pool, pool_bytes, base);
  // rows2 (session 7): long rows with few warps per SM (N < 32 x 132 rows at a warp per row),
  // where ember's rows reach 3.87 TB/s at 14336x3584 (26.5 us, 27 warps per SM, 2 KB in flight
  // per warp): does L8 (4 KB per warp) help there, and where does it start to hurt?
  const std::vector<Variant> row2_variants = {
      {"unpred L4", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<4, false>, 1, p, w, st); }},
      {"unpred L8", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<8, false>, 1, p, w, st); }},
      {"multi R2 L4", [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_multi_kernel<2, 4, false>, 2, p, w, st); }},
  };
  const std::vector<Shape> row2_shapes = {{14336, 3584}, {14336, 4096}, {9216, 2304}, {7168, 2048}, {4096, 2048},
                                          {4096, 4096},  {8192, 1024},  {3584, 4096}, {2048, 4096}, {8192, 2048}};
  if (wanted("rows2")) run_layout("rows2", true, row2_shapes, row2_variants, pool, pool_bytes, base);
  if (wanted("columns")) run_layout("columns", false, column_shapes, column_variants, pool, pool_bytes, base);
  if (wanted("columns2")) run_layout("columns2", false, column2_shapes, column2_variants, pool, pool_bytes, base);

  // Third round (session 6): the small columns shapes (N <= 1024, 0.1-17 MB), where ember's columns
  // layout takes ~1-1.5 us longer than its rows layout on the same sizes (ember bench at 5d3257d,
  // columns vs rows us: 2048x32 2.95 vs 1.73, 2048x128 2.96 vs 1.83, 2048x256 3.79 vs 2.36,
  // 2048x512 4.23 vs 2.67, 4096x1024 5.76 vs 4.48): the batch kernels with narrow tiles.
  const std::vector<Variant> column3_variants = {
      {"ember columns (v4/v5)", launch_ember_columns},
      {"batch C4 T256 L8 push", launch_columns_batch<4, 256, 8, true>, nullptr, batch_config<4, 256, 8, true>},
      {"batch C4 T256 L4 push", launch_columns_batch<4, 256, 4, true>, nullptr, batch_config<4, 256, 4, true>},
      {"batch C4 T512 L8 push", launch_columns_batch<4, 512, 8, true>, nullptr, batch_config<4, 512, 8, true>},
      {"batch C4 T1024 L8 push", launch_columns_batch<4, 1024, 8, true>, nullptr, batch_config<4, 1024, 8, true>},
      {"batch C4 T1024 L8", launch_columns_batch<4, 1024, 8>, nullptr, batch_config<4, 1024, 8>},
      {"batch C8 T512 L8 push", launch_columns_batch<8, 512, 8, true>, nullptr, batch_config<8, 512, 8, true>},
      {"batch C16 T256 L8 push", launch_columns_batch<16, 256, 8, true>, nullptr, batch_config<16, 256, 8, true>},
      {"batch C16 T512 L8 push", launch_columns_batch<16, 512, 8, true>, nullptr, batch_config<16, 512, 8, true>},
  };
  const std::vector<Shape> column3_shapes = {{2048, 32},  {2048, 128}, {2880, 32},  {2048, 256}, {2048, 512},
                                             {2048, 768}, {2880, 512}, {4096, 1024}, {8192, 1024}};
  if (wanted("columns3")) run_layout("columns3", false, column3_shapes, column3_variants, pool, pool_bytes, base);

  // Fourth round (session 6): the 256-thread batch tiles of columns3 on the mid shapes that v7 does
  // not take or where ember is still near torch (ember bench at 2943f31, torch vs ember us: 2304x2048
  // 6.33 vs 6.67, 512x2048 3.68 vs 3.84, 2304x9216 13.15 vs 13.58, 2880x5760 11.38 vs 11.59,
  // 2048x1792 5.96 vs 6.05, 2048x4096 7.31 vs 7.38), next to v7's two configurations.
  const std::vector<Variant> column4_variants = {
      {"ember columns (v4/v5)", launch_ember_columns},
      {"batch C16 T512 L8 push", launch_columns_batch<16, 512, 8, true>, nullptr, batch_config<16, 512, 8, true>},
      {"batch C4 T1024 L8", launch_columns_batch<4, 1024, 8>, nullptr, batch_config<4, 1024, 8>},
      {"batch C4 T256 L4 push", launch_columns_batch<4, 256, 4, true>, nullptr, batch_config<4, 256, 4, true>},
      {"batch C4 T256 L8 push", launch_columns_batch<4, 256, 8, true>, nullptr, batch_config<4, 256, 8, true>},
      {"batch C8 T256 L8 push", launch_columns_batch<8, 256, 8, true>, nullptr, batch_config<8, 256, 8, true>},
      {"batch C16 T256 L8 push", launch_columns_batch<16, 256, 8, true>, nullptr, batch_config<16, 256, 8, true>},
      {"batch C16 T256 L4 push", launch_columns_batch<16, 256, 4, true>, nullptr, batch_config<16, 256, 4, true>},
      {"batch C32 T256 L8 push", launch_columns_batch<32, 256, 8, true>, nullptr, batch_config<32, 256, 8, true>},
  };
  const std::vector<Shape> column4_shapes = {{2304, 2048}, {512, 2048},  {2304, 9216}, {2880, 5760}, {2048, 1792},
                                             {2048, 4096}, {768, 2048},  {2880, 2880}, {2880, 4096}, {3584, 2048},
                                             {2048, 2048}, {2048, 6144}, {2048, 7168}, {2048, 8192}, {1792, 2048}};
  if (wanted("columns4")) run_layout("columns4", false, column4_shapes, column4_variants, pool, pool_bytes, base);

  // Fifth round (prepared in session 6, not run yet): the same tiles on the 100-134 MB columns
  // shapes, where ember (v4's split-K kernel) reads at 3.75-3.94 TB/s and #4 asks for 3.9 (ember
  // bench at 1584362, us: 4096x14336 30.49, 3584x14336 27.15, 14336x4096 30.74, 14336x3584 27.41,
  // 8192x8192 34.06), and 28672x8192 (470 MB, 109.13 us) for the long-K end.
  const std::vector<Shape> column5_shapes = {{4096, 14336}, {3584, 14336}, {14336, 4096},
                                             {14336, 3584}, {8192, 8192},  {28672, 8192}};
  if (wanted("columns5")) run_layout("columns5", false, column5_shapes, column4_variants, pool, pool_bytes, base);

  // Sixth round (session 8, not run yet): the 100-135 MB columns shapes with both sides >= 3584,
  // which every columns kernel reads at 3.7-3.94 TB/s, the rows layout at 4.05-4.1 (#4 asks for
  // 3.9): the row-tile kernel (whole row segments of 7-16 KB per block) at about one and two waves
  // of resident blocks, next to ember's v4/v5 kernel and the batch tiles v9/v11 took. Also timed as
  // the decode bench times (x20: 20 launches per graph).
  const auto column4_variant = [&](const std::string& name) {
    for (const Variant& v : column4_variants)
      if (v.name == name) return v;
    std::fprintf(stderr, "no columns4 variant %s\n", name.c_str());
    std::exit(1);
  };
  const std::vector<Variant> column6_variants = {
      column4_variant("ember columns (v4/v5)"),
      column4_variant("batch C16 T512 L8 push"),
      column4_variant("batch C16 T256 L8 push"),
      {"rowtile L8 1wave", launch_columns_rowtile<8, 1>, nullptr, rowtile_config<8, 1>},
      {"rowtile L8 2wave", launch_columns_rowtile<8, 2>, nullptr, rowtile_config<8, 2>},
      {"rowtile L4 1wave", launch_columns_rowtile<4, 1>, nullptr, rowtile_config<4, 1>},
      {"rowtile L4 2wave", launch_columns_rowtile<4, 2>, nullptr, rowtile_config<4, 2>},
      {"rowtile L8 1wave c4", launch_columns_rowtile<8, 1, 4>, nullptr, rowtile_config<8, 1, 4>},
      {"rowtile L8 1wave c8", launch_columns_rowtile<8, 1, 8>, nullptr, rowtile_config<8, 1, 8>},
      {"rowtile L8 2wave c8", launch_columns_rowtile<8, 2, 8>, nullptr, rowtile_config<8, 2, 8>},
  };
  const std::vector<Shape> column6_shapes = {{14336, 4096}, {14336, 3584}, {3584, 14336}, {4096, 14336}, {8192, 8192}};
  if (wanted("columns6")) run_layout("columns6", false, column6_shapes, column6_variants, pool, pool_bytes, base, true);

  // Seventh round (session 8, not run yet): the same shapes, where the best columns kernels take
  // 26.41 us x20 on 14336x3584 ("batch C16 T512 L8 push": 224 blocks on 264 resident slots) and
  // 29.99 on 14336x4096 (ember), against ~25.6 and ~29.0 for a pure streaming read of the bytes:
  // is the tail of unevenly loaded SMs the gap? The batch kernel in the best-filling cluster of any
  // size ("balanced"), and the stream-K kernel (every resident block the same rows), next to
  // ember's kernel and the best batch tile.
  const std::vector<Variant> column7_variants = {
      column4_variant("ember columns (v4/v5)"),
      column4_variant("batch C16 T512 L8 push"),
      {"balanced C16 T512 L8", launch_columns_balanced<16, 512, 8>, nullptr, balanced_config<16, 512, 8>},
      {"balanced C16 T256 L8", launch_columns_balanced<16, 256, 8>, nullptr, balanced_config<16, 256, 8>},
      {"balanced C8 T256 L8", launch_columns_balanced<8, 256, 8>, nullptr, balanced_config<8, 256, 8>},
      {"balanced C32 T256 L8", launch_columns_balanced<32, 256, 8>, nullptr, balanced_config<32, 256, 8>},
      {"streamk L8", launch_columns_streamk<8>, nullptr, streamk_config<8>},
      {"streamk L4", launch_columns_streamk<4>, nullptr, streamk_config<4>},
      {"streamk L8 2/SM", launch_columns_streamk<8, 2>, nullptr, streamk_config<8, 2>},
  };
  const std::vector<Shape> column7_shapes = {{14336, 3584}, {14336, 4096}, {3584, 14336}, {4096, 14336}, {8192, 8192}};
  if (wanted("columns7")) run_layout("columns7", false, column7_shapes, column7_variants, pool, pool_bytes, base, true);
  // harness (session 7): ember's decode bench times the same kernels 0.5-1.4 us slower per call
  // than this probe (rows 3584x14336: "unpred L4" 25.4 us here, ember 26.8 in bench/decode_bench).
  // The two harnesses differ in the copies (here >= 400 MB in one pool, launched once each; the
  // bench 4x the L2 in separate allocations, 20 launches cycling through them). This section times
  // one kernel per shape under each combination, to find which difference costs the time.
  if (wanted("harness")) {
    std::printf("\nharness: one kernel, four ways of rotating its weights\n%-34s %13s %9s %8s\n", "setup", "K x N", "us", "TB/s");
    struct Case {
      Shape s;
      bool rows;
      Launch launch;
    };
    const std::vector<Case> cases = {
        {{3584, 14336}, true, [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<4, false>, 1, p, w, st); }},
        {{4096, 14336}, true, [](const Problem& p, const bf16* w, cudaStream_t st) { launch_warp_rows(rows_unpred_kernel<4, false>, 1, p, w, st); }},
        {{14336, 3584}, false, launch_ember_columns},
    };
    for (const Case& c : cases) {
      Problem p = base;
      p.s = c.s;
      const size_t bytes = p.bytes();
      p.stride = (bytes + 255) / 256 * 256 / sizeof(bf16);
      p.w0 = pool;
      fill_bf16_kernel<<<4 * p.sms, 256>>>(pool, static_cast<size_t>(c.s.k) * c.s.n, 12345u);
      fill_bf16_kernel<<<64, 256>>>(const_cast<bf16*>(p.x), c.s.k, 777u);
      const int pool_copies = static_cast<int>(std::max<size_t>(2, ((size_t{400} << 20) + bytes - 1) / bytes));
      const int bench_copies = static_cast<int>(std::max<size_t>(1, ((size_t{240} << 20) + bytes - 1) / bytes));
      for (int i = 1; i < pool_copies; ++i) CHECK(cudaMemcpy(pool + i * p.stride, pool, bytes, cudaMemcpyDeviceToDevice));
      std::vector<bf16*> separate(bench_copies);
      for (bf16*& w : separate) {
        CHECK(cudaMalloc(&w, bytes));
        CHECK(cudaMemcpy(w, pool, bytes, cudaMemcpyDeviceToDevice));
      }
      const auto run = [&](const char* setup, int copies, int launches, bool in_pool) {
        const float us = time_graph([&](cudaStream_t st) {
          for (int i = 0; i < launches; ++i) c.launch(p, in_pool ? p.w(i % copies) : separate[i % copies], st);
        }, launches);
        std::printf("%-34s %6dx%-6d %9.2f %8.2f\n", setup, c.s.k, c.s.n, us, bytes / us / 1e6);
      };
      run("pool, 400 MB copies, each once", pool_copies, pool_copies, true);
      run("pool, 400 MB copies, 20 launches", pool_copies, 20, true);
      run("pool, 4xL2 copies, 20 launches", bench_copies, 20, true);
      run("separate, 4xL2 copies, 20 launches", bench_copies, 20, false);
      run("separate, 4xL2 copies, each once", bench_copies, bench_copies, false);
      for (bf16* w : separate) CHECK(cudaFree(w));
    }
  }
  CHECK(cudaFree(pool));
  CHECK(cudaFree(const_cast<bf16*>(base.x)));
  CHECK(cudaFree(base.y));
  CHECK(cudaFree(base.accum));
  CHECK(cudaFree(base.tickets));
  return 0;
}
