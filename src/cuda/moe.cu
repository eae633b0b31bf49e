// Mixture of experts on CUDA, without a single device-to-host read (the whole layer can be
// captured in a CUDA graph and replayed with different routing):
//   route_kernel        one warp per token: softmax/sigmoid scores, top-k by k rounds of warp
//                       arg-max (ties to the lower expert), renormalisation, routed scaling, and
//                       the shared expert's sigmoid gate (x . gate) when there is one.
//   permute_kernel      one block: stable counting sort of the (token, slot) pairs by expert
//                       (histogram, scan, then per chunk of 256 pairs: rank inside each warp by
//                       __match_any_sync, plus the same expert's count in earlier warps).
//   gather / silu_mul / combine   the prefill glue around grouped_mm (src/cuda/grouped_mm.cu);
//                       combine is the weighted un-permute as a gather (deterministic, no atomics).
//   gate_up_decode_kernel / down_decode_kernel   the decode layer: no permutation at all. Block
//                       y of the first kernel is pair y (or the shared expert of a token); one warp
//                       per intermediate channel streams its gate and up rows with 16-byte loads and
//                       writes silu(gate) * up. In the second, block (g, t) owns two consecutive
//                       outputs of token t, one warp per pair streams those two rows of its expert
//                       against the pair's row of h, and the block adds the weighted sums and
//                       writes them directly: the combine costs nothing.
//   router_decode_kernel   the decode router: one warp per expert computes the logits, the
//                       last block to finish routes every token (route_token, as route_kernel).
// A decode layer is 3 kernels: router_decode, gate_up, down.
// Versions, H200, Qwen3-30B-A3B layer at T=1 bf16 (ncu durations, normal clocks):
//   v1: router product 6.6 us, route (32 candidates per lane for any E) 20.5 us, gate_up
//       18.7 us (58% of HBM bandwidth), down 19.2 us (27%, a 64-bit division per load): layer
//       61 us in the graph-replay benchmark.
//   v2: candidates per lane from E (4 for E <= 128), router + route fused, down steps its
//       (pair, chunk) without division: layer 46.5 us (bf16). ncu: router 14 us, gate_up
//       19.3 us (56% of HBM), down 16.6 us (32%). The SASS showed why: the router and down loops
//       had ONE 16-byte load in flight per lane (each load converted before the next was
//       issued, branches between them), and gate_up at 61 registers fit 4 blocks per SM, so its
//       768 blocks ran as 1.45 waves.
//   v3: every loop loads a batch raw (Raw8) before converting any (router 8 loads per lane,
//       gate_up 2 per row, down 8), gate_up capped at 40 registers (6 blocks per SM: one wave),
//       the top-k by warp max/min reductions of an unsigned order key, and gate_up and down
//       launched as programmatic dependents (sm_90) so their launch overlaps the kernel before.
//       Layer T=1: 41.7 us bf16, 35.2 us FP8 (43.1 / 36.0 without the dependent launches);
//       ncu still gives gate_up ~21 us and down ~20 us, far from HBM speed. Likely cause, from
//       the SASS: after each batch of weight loads, every chunk's x (gate_up) or h (down) was a
//       fresh global load consumed at once, a chain of L2 round trips per batch.
//   v3.1: a token's x row and h rows are staged in shared memory once per block (x before the
//       wait for the router, overlapping it). Layer T=1: 38.6 us bf16, 31.9 us FP8; ncu: router
//       8.7 us, gate_up 22 us (2.7 TB/s, achieved occupancy 63%), down 14 us (1.8 TB/s).
//   v3.2: the router loads each token's x chunks as one batch (v3 loaded them one dependent L2
//       round trip at a time): router 6.0 us; layer T=1 37.0 us bf16, 30.3 us FP8.
//   v3.3: at T > 1 gate_up runs its pair blocks in expert order (the router's last block sorts
//       the pair slots by expert), so pairs sharing an expert read its rows back to back, the
//       later ones from L2 (64 pairs over 128 experts hit ~52 distinct experts, 128 pairs ~82).
//       Measured (9c9be22): Qwen3-30B bf16 T=16 386 -> 368 us, LFM2 T=8 232 -> 223 us; T=2..8
//       of Qwen3-30B and FP8 unchanged within the run-to-run spread (~3%).
//       Its SASS (sm_90a) shows what limits gate_up: under the 40-register cap ptxas issues the
//       second pair of row loads only after the first pair is consumed, so a lane has 2 of its 4
//       bf16 loads in flight (FP8: 2, then 6 of 8). Branch moe-gate-up-loads restructures the
//       loop so a batch's loads all issue first; bench/moe_probe.cu measures the same layout with
//       and without the cap.
//   v4 (session 5; bench/moe_probe.cu's chain section measured the structure first): down as
//       one warp per (pair, 2 consecutive outputs), block (outputs, token), its first batch of
//       weight loads issued before waiting for gate_up (gate_up triggers its dependents after its
//       own wait, so the router's ids are final); gate_up's loop in whole unpredicated batches
//       (branch moe-gate-up-loads) and FP8 gate_up at 4 blocks per SM. Qwen3-30B-A3B (H200,
//       torch in the same run): T=1 bf16 37.1 -> 28.5 us, FP8 30.4 -> 22.8; T=8 202 -> 150 /
//       168 -> 117; T=16 368 -> 270 / 323 -> 224. ncu at T=1 FP8: gate_up 13.4 us (DRAM 39%),
//       down 9.8 us (27%): both still far from HBM speed. (this)
//   Rejected, measured at 11ca45d (code on branch moe-dedup-decode and in that commit):
//   - v4, T > 1 reading each distinct expert once (the router's last block grouped the pairs by
//     expert; gate_up kept 4 or 8 pairs' sums per channel in registers, down walked the distinct
//     experts per output): slower than the per-pair kernels everywhere from T = 4 (Qwen3-30B
//     bf16 T=4 143 vs 112 us, T=8 276 vs 208, T=16 494 vs 397): per-lane sums for many pairs and
//     the walks over the table cost more than the ~20% of expert bytes they saved.
//   - v5, T = 1 weight rows streamed into shared memory with cp.async.bulk (the TMA's 1D
//     copies), 3-4 stages of 48-64 KB per SM, one block per SM: gate_up 19.3 us (DRAM 56%, the
//     same share as v3.1's register loads), down 22 us (v3.1: 14); layer 42.1 us bf16, 46.0
//     FP8. One block per SM consuming a stage between refills did not keep more bytes in flight
//     than 6 blocks of register loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "backend.h"
#include "cuda/grouped_mm.h"
#include "cuda/moe_elements.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace {

using gmm::block_scale;
using gmm::column_scale;
using gmm::E4m3;
using gmm::from_f;
using gmm::load8;
using gmm::to_f;
using gmm::WeightScale;

__device__ __forceinline__ float silu_f(float g) { return g / (1.f + expf(-g)); }
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Programmatic dependent launch (sm_90+): a kernel launched with the attribute (launch_dependent
// below) may start while the previous kernel on the stream still runs, once that kernel's blocks
// have all called dependents_may_launch; it must call wait_for_previous_kernel before reading
// what that kernel wrote (the wait returns when the previous grid has completed and its memory is
// visible). This hides the launch and ramp between the three decode kernels. Without the
// attribute, or below sm_90, both are no-ops.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// ---- routing ------------------------------------------------------------------------------------
constexpr int kRouteWarps = 4;
constexpr int kMaxPerLane = 32;  // E <= 1024

struct RouteArgs {
  const void* logits = nullptr;
  int64_t l_ts = 0, l_es = 1;
  const float* bias = nullptr;  // [E] contiguous f32 or nullptr
  int64_t tokens = 0, experts = 0;
  int k = 1;
  bool softmax = true, norm = true;
  float eps = 0, scaling = 1;
  float* weights = nullptr;  // [T, k]
  int32_t* ids = nullptr;
  // The shared expert's gate: sg[t] = sigmoid(x[t] . gate), when sg is not null.
  const void* x = nullptr;
  int64_t x_ts = 0, hidden = 0;
  const void* gate = nullptr;
  float* sg = nullptr;
};

// Selection order as an unsigned key: larger keys first, NaN after every number, 0 for none
// (ties go to the lower expert). -0 counts as +0, as in a float comparison.
__device__ __forceinline__ uint32_t order_key(float k) {
  if (isnan(k)) return 1u;
  const uint32_t u = __float_as_uint(k + 0.f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // -inf gives 0x007FFFFF > 1
}

// One warp routes token t: scores, top-k, weights, and the shared expert's gate. EPL: experts
// per lane (E <= 32 * EPL), so E = 128 keeps 4 candidates per lane in registers instead of 32.
// Logits are read with __ldcg: in the fused decode kernel other blocks have just written them.
template <int EPL, class L, class X> __device__ void route_token(const RouteArgs& a, int64_t t, int lane) {
  const int E = static_cast<int>(a.experts);
  const L* row = static_cast<const L*>(a.logits) + t * a.l_ts;
  float score[EPL], key[EPL];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane + 32 * i;
    score[i] = e < E ? to_f(__ldcg(row + e * a.l_es)) : -INFINITY;
    mx = fmaxf(mx, score[i]);
  }
  if (a.softmax) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      score[i] = lane + 32 * i < E ? expf(score[i] - mx) : 0.f;
      sum += score[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] /= sum;
  } else {
#pragma unroll
    for (int i = 0; i < EPL; ++i) score[i] = 1.f / (1.f + expf(-score[i]));
  }
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane + 32 * i;
    key[i] = score[i] + (a.bias && e < E ? a.bias[e] : 0.f);
  }
  // k rounds: each lane's best remaining candidate (lowest expert first on equal keys), then the
  // warp's best by two hardware reductions, max of the order key then min of the expert id,
  // and the winner's score from its lane (v2 compared (key, expert) pairs over 5 shuffle steps
  // of 4 shuffles each, ~20 warp ops per round instead of 3).
  uint32_t taken = 0;
  float chosen_score = 0.f, total = 0.f;
  int chosen_id = 0;
  for (int j = 0; j < a.k; ++j) {
    uint32_t best_key = 0;  // 0: no candidate left on this lane
    int best_e = INT_MAX;
    float best_score = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = lane + 32 * i;
      const uint32_t ok = order_key(key[i]);
      if (e < E && !((taken >> i) & 1u) && ok > best_key) {
        best_key = ok;
        best_e = e;
        best_score = score[i];
      }
    }
    const uint32_t top = __reduce_max_sync(0xffffffffu, best_key);
    const int winner = static_cast<int>(__reduce_min_sync(0xffffffffu, best_key == top ? static_cast<uint32_t>(best_e) : UINT_MAX));
    const float s = __shfl_sync(0xffffffffu, best_score, winner % 32);
    if (winner % 32 == lane) taken |= 1u << (winner / 32);
    if (lane == j) {
      chosen_score = s;
      chosen_id = winner;
    }
    total += s;
  }
  const float norm = a.norm ? 1.f / (total + a.eps) : 1.f;
  if (lane < a.k) {
    a.weights[t * a.k + lane] = chosen_score * norm * a.scaling;
    a.ids[t * a.k + lane] = chosen_id;
  }
  if (a.sg) {
    const X* xr = static_cast<const X*>(a.x) + t * a.x_ts;
    const X* g = static_cast<const X*>(a.gate);
    float d = 0.f;
    for (int64_t h = lane; h < a.hidden; h += 32) d = fmaf(to_f(xr[h]), to_f(g[h]), d);
    d = warp_sum(d);
    if (lane == 0) a.sg[t] = 1.f / (1.f + expf(-d));
  }
}

template <int EPL, class L, class X>
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(RouteArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
  if (t < a.tokens) route_token<EPL, L, X>(a, t, threadIdx.x % 32);
}

/// Calls f(std::integral_constant<int, EPL>) with the experts-per-lane bucket for E <= 1024.
template <class F> void with_experts_per_lane(int64_t experts, F&& f) {
  if (experts <= 128) f(std::integral_constant<int, 4>{});
  else if (experts <= 256) f(std::integral_constant<int, 8>{});
  else f(std::integral_constant<int, kMaxPerLane>{});
}

// The decode router: logits [T, E] f32 = x @ router^T, one warp per expert, then the last block
// to finish (ticket in the stream's zeroed scratch) routes every token. Each lane issues all of
// its row's loads (up to kRouterLoads 16-byte loads) before converting any: the router weight is
// small (512 KB for E = 128, H = 2048), so one memory round trip, not bandwidth, decides.
constexpr int kRouterWarps = 4, kRouterRows = 4, kRouterLoads = 8;

// order[r] = the r-th pair slot (t * k + j) by (expert, slot): a stable sort of the pairs by
// expert, one thread per pair (pairs <= the block's threads), ranks counted over the ids in
// shared memory. The block's threads wrote the ids; the barrier makes them visible.
// The decode path's (token, expert) pairs at most: the router's last block orders them by
// expert with one thread per pair.
constexpr int kMaxDecodePairs = kRouterWarps * 32;
__device__ void order_pairs_by_expert(const int32_t* ids, int pairs, int32_t* order) {
  __shared__ int32_t pair_expert[kMaxDecodePairs];
  __syncthreads();
  const int p = threadIdx.x;
  if (p < pairs) pair_expert[p] = ids[p];
  __syncthreads();
  if (p >= pairs) return;
  const int32_t e = pair_expert[p];
  int rank = 0;
  for (int q = 0; q < pairs; ++q) rank += pair_expert[q] < e || (pair_expert[q] == e && q < p);
  order[rank] = p;
}

template <int EPL, class X>
__global__ void __launch_bounds__(kRouterWarps * 32) router_decode_kernel(RouteArgs a, const X* __restrict__ router, int64_t r_es,
                                                                         float* __restrict__ logits, unsigned* __restrict__ ticket,
                                                                         int32_t* __restrict__ order) {
  dependents_may_launch();  // gate_up's blocks may start (and wait) while this runs
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp;
  const X* x = static_cast<const X*>(a.x);
  if (e < a.experts) {
    const X* w = router + e * r_es;
    const int64_t chunks = a.hidden / 8;
    float acc[kRouterRows];
    for (int64_t t0 = 0; t0 < a.tokens; t0 += kRouterRows) {
      const int nr = static_cast<int>(min(int64_t{kRouterRows}, a.tokens - t0));
#pragma unroll
      for (int r = 0; r < kRouterRows; ++r) acc[r] = 0.f;
      for (int64_t c0 = lane; c0 < chunks; c0 += kRouterLoads * 32) {
        gmm::Raw8<X> wr[kRouterLoads];
#pragma unroll
        for (int u = 0; u < kRouterLoads; ++u) {
          const int64_t c = c0 + u * 32;
          wr[u] = c < chunks ? gmm::load_raw8(w + c * 8) : gmm::Raw8<X>{};
        }
        // Each token row's chunks are loaded as a batch too (raw, before any is used): v3 loaded
        // them one at a time inside the product, one dependent L2 round trip per chunk.
#pragma unroll
        for (int r = 0; r < kRouterRows; ++r) {
          if (r >= nr) break;
          gmm::Raw8<X> xr[kRouterLoads];
#pragma unroll
          for (int u = 0; u < kRouterLoads; ++u) {
            const int64_t c = c0 + u * 32;
            xr[u] = c < chunks ? gmm::load_raw8(x + (t0 + r) * a.x_ts + c * 8) : gmm::Raw8<X>{};
          }
#pragma unroll
          for (int u = 0; u < kRouterLoads; ++u) {
            float wf[8], xf[8];
            gmm::unpack8(wr[u], wf);
            gmm::unpack8(xr[u], xf);
            acc[r] = gmm::dot8(xf, wf, acc[r]);  // chunks past the row are zeros
          }
        }
      }
      for (int64_t h = chunks * 8 + lane; h < a.hidden; h += 32) {
        const float wv = to_f(w[h]);
#pragma unroll
        for (int r = 0; r < kRouterRows; ++r)
          if (r < nr) acc[r] = fmaf(to_f(x[(t0 + r) * a.x_ts + h]), wv, acc[r]);
      }
#pragma unroll
      for (int r = 0; r < kRouterRows; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && r < nr) logits[(t0 + r) * a.experts + e] = v;
      }
    }
  }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int64_t t = warp; t < a.tokens; t += kRouterWarps) route_token<EPL, float, X>(a, t, lane);
  if (order) order_pairs_by_expert(a.ids, static_cast<int>(a.tokens * a.k), order);
  if (threadIdx.x == 0) *ticket = 0;  // zero again for the next launch on this stream
}

// ---- permutation ----------------------------------------------------------------------------------
constexpr int kPermuteThreads = 256, kPermuteWarps = kPermuteThreads / 32, kMaxBuckets = 1025;

template <class I>
__global__ void __launch_bounds__(kPermuteThreads) permute_kernel(const I* __restrict__ ids, int64_t pairs, int k, int experts,
                                                                  int32_t* __restrict__ order, int32_t* __restrict__ inverse,
                                                                  int32_t* __restrict__ tokens, int32_t* __restrict__ counts,
                                                                  int32_t* __restrict__ offsets) {
  __shared__ int count[kMaxBuckets], next[kMaxBuckets], warp_count[kPermuteWarps][kMaxBuckets], partial[kPermuteThreads];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int buckets = experts + 1;  // the last bucket takes ids outside [0, E), after every group
  const auto bucket = [&](int64_t p) {
    const int64_t v = ids[p];
    return v >= 0 && v < experts ? static_cast<int>(v) : experts;
  };
  for (int b = tid; b < buckets; b += kPermuteThreads) {
    count[b] = 0;
    for (int w = 0; w < kPermuteWarps; ++w) warp_count[w][b] = 0;
  }
  __syncthreads();
  for (int64_t p = tid; p < pairs; p += kPermuteThreads) atomicAdd(&count[bucket(p)], 1);
  __syncthreads();
  // Exclusive scan of the bucket counts: each thread sums a run of buckets, then the runs scan.
  const int per = (buckets + kPermuteThreads - 1) / kPermuteThreads;
  const int b0 = min(tid * per, buckets), b1 = min(b0 + per, buckets);
  int run = 0;
  for (int b = b0; b < b1; ++b) run += count[b];
  partial[tid] = run;
  __syncthreads();
  for (int d = 1; d < kPermuteThreads; d *= 2) {
    const int other = tid >= d ? partial[tid - d] : 0;
    __syncthreads();
    partial[tid] += other;
    __syncthreads();
  }
  int start = partial[tid] - run;
  for (int b = b0; b < b1; ++b) {
    next[b] = start;
    start += count[b];
    if (b < experts) {
      counts[b] = count[b];
      offsets[b] = start;
    }
  }
  __syncthreads();
  for (int64_t chunk = 0; chunk < pairs; chunk += kPermuteThreads) {
    const int64_t p = chunk + tid;
    const bool valid = p < pairs;
    const int b = valid ? bucket(p) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const bool leader = __ffs(peers) - 1 == lane;
    if (valid && leader) warp_count[warp][b] = __popc(peers);
    __syncthreads();
    if (valid) {
      int pos = next[b] + rank;
      for (int w = 0; w < warp; ++w) pos += warp_count[w][b];
      order[pos] = static_cast<int32_t>(p);
      inverse[p] = pos;
      tokens[pos] = static_cast<int32_t>(p / k);
    }
    __syncthreads();
    if (valid && leader) {
      atomicAdd(&next[b], __popc(peers));
      warp_count[warp][b] = 0;
    }
    __syncthreads();
  }
}

// ---- prefill glue ---------------------------------------------------------------------------------
template <class T>
__global__ void gather_rows_kernel(const T* __restrict__ x, int64_t x_rs, const int32_t* __restrict__ rows, int64_t n_rows, int64_t h,
                                   T* __restrict__ out, int64_t o_rs) {
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const T* src = x + static_cast<int64_t>(rows[r]) * x_rs;
    T* dst = out + r * o_rs;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) dst[c] = src[c];
  }
}

template <class T>
__global__ void silu_mul_kernel(const T* __restrict__ g, const T* __restrict__ u, int64_t in_rs, int64_t rows, int64_t cols,
                                T* __restrict__ out, int64_t o_rs) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[r * o_rs + c] = from_f<T>(silu_f(to_f(g[r * in_rs + c])) * to_f(u[r * in_rs + c]));
  }
}

// out[t, c] = sum_j w[t, j] * y[inverse[t*k + j], c] (+ sg[t] * ys[t, c]); an inverse entry out of
// range is reported through the device error word and skipped.
template <class T, class W>
__global__ void combine_kernel(const T* __restrict__ y, int64_t y_rs, int64_t y_rows, const int32_t* __restrict__ inverse,
                               const W* __restrict__ w, int64_t w_ts, int64_t w_ks, int64_t tokens, int k, int64_t h,
                               const T* __restrict__ ys, int64_t ys_rs, const float* __restrict__ sg, T* __restrict__ out,
                               int64_t o_rs, DeviceError* err) {
  const int64_t total = tokens * h;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float acc = 0.f;
    for (int j = 0; j < k; ++j) {
      const int64_t pos = inverse[t * k + j];
      if (pos < 0 || pos >= y_rows) {
        if (atomicCAS(&err->code, kNoDeviceError, kIndexOutOfRange) == kNoDeviceError) {
          err->value = pos;
          err->bound = y_rows;
        }
        continue;
      }
      acc = fmaf(to_f(w[t * w_ts + j * w_ks]), to_f(y[pos * y_rs + c]), acc);
    }
    if (ys) acc = fmaf(sg ? sg[t] : 1.f, to_f(ys[t * ys_rs + c]), acc);
    out[t * o_rs + c] = from_f<T>(acc);
  }
}

// ---- fused decode ---------------------------------------------------------------------------------
struct DecodeArgs {
  const void* x = nullptr;
  int64_t x_ts = 0, tokens = 0, hidden = 0, inter = 0;
  int k = 1;
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  const int32_t* order = nullptr;  // T > 1: gate_up's pair blocks in expert order (else identity)
  const void *gate = nullptr, *up = nullptr;  // [E, I, H], unit stride along H
  int64_t gu_es = 0, gate_rs = 0, up_rs = 0;
  WeightScale gate_scale, up_scale;
  const void* down = nullptr;  // [E, H, I], unit stride along I
  int64_t d_es = 0, d_rs = 0;
  WeightScale down_scale;
  bool shared = false;
  const void *s_gate = nullptr, *s_up = nullptr;  // [Is, H] each, x's dtype
  int64_t s_rs = 0, s_inter = 0;
  const void* s_down = nullptr;  // [H, Is]
  int64_t sd_rs = 0;
  const float* sg = nullptr;  // [T] shared gate, or nullptr (weight 1)
  void* h = nullptr;          // [pairs (+ tokens), h_rs]
  int64_t h_rs = 0;
  void* out = nullptr;
  int64_t o_ts = 0;
};

constexpr int kDecodeThreads = 256, kDecodeWarps = kDecodeThreads / 32;
// 16-byte loads in flight per lane and weight row: 2 for 16-bit weights, 4 for FP8 (8-byte
// loads), 1 for f32 (32-byte loads).
template <class WT> constexpr int kRowLoads = sizeof(WT) == 1 ? 4 : (sizeof(WT) == 2 ? 2 : 1);
// Dynamic shared memory of the gate_up kernel (a row of x), below the 48 KB a launch gets
// without opting in.
constexpr size_t kDecodeSmemMax = 46 * 1024;

// The block copies n elements from global to shared memory (16-byte aligned rows), 8 at a time:
// the compute loops then read activations with shared loads instead of a chain of dependent
// L2 round trips (v3 read x and h straight from global memory inside each batch).
template <class T> __device__ void stage_row(const T* src, T* dst, int64_t n) {
  // One load per iteration: unrolling four (loads before stores) pushed v3's down kernel, which
  // staged h with it, to 128 registers with spills (2: 161 registers), 1 left it at 111.
  const int64_t chunks = n / 8;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) *reinterpret_cast<gmm::Raw8<T>*>(dst + c * 8) = gmm::load_raw8(src + c * 8);
  for (int64_t i = chunks * 8 + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// One warp: h = silu(x . gate_row) * (x . up_row) for one intermediate channel i of expert e.
// Each lane issues L chunks of both rows before converting any.
template <class T, class WT>
__device__ __forceinline__ void gate_up_channel(const T* x, const WT* g_row, const WT* u_row, int64_t hidden, const WeightScale& gs,
                                                const WeightScale& us, int64_t e, int64_t i, T* h_out) {
  constexpr int L = kRowLoads<WT>;
  const int lane = threadIdx.x % 32;
  // Under the 40-register cap, v3.3's SASS issues the second pair of row loads only after the
  // first pair is consumed (bf16: 2 of its 4 loads in flight; FP8: 2, then 6 of 8). Here: 32-bit
  // chunk indices, block scales only for FP8 weights (the only ones that have them) as a row
  // pointer and a stride, and whole batches without predicates: the SASS now issues all 2 * L
  // loads of a batch before the first use (bf16 no spill in the loop; FP8 at 4 blocks per SM
  // none either).
  const int chunks = static_cast<int>(hidden / 8);
  const bool blocks = sizeof(WT) == 1 && gs.kind == WeightScale::Block128;
  // This row's block scales (one per 128 columns) as two pointers and two strides: the whole
  // WeightScale pair kept live through the loop spilled to local memory (SASS, FP8 weights).
  const float* g_scales = blocks ? gs.ptr + gmm::block_scale_offset(e, i, 0, gs.s0, gs.s1, gs.s2) : nullptr;
  const float* u_scales = blocks ? us.ptr + gmm::block_scale_offset(e, i, 0, us.s0, us.s1, us.s2) : nullptr;
  const int64_t g_step = gs.s2, u_step = us.s2;
  float g = 0.f, u = 0.f;
  // Adds chunk c of both rows (loaded raw) times x's chunk c (in shared memory).
  const auto add_chunk = [&](const gmm::Raw8<WT>& g_raw, const gmm::Raw8<WT>& u_raw, int c) {
    float gf[8], uf[8], xf[8];
    load8(x + c * 8, xf);
    gmm::unpack8(g_raw, gf);
    gmm::unpack8(u_raw, uf);
    float dg = gmm::dot8(xf, gf, 0.f), du = gmm::dot8(xf, uf, 0.f);
    if (blocks) {
      dg *= g_scales[c / (gmm::kScaleBlock / 8) * g_step];
      du *= u_scales[c / (gmm::kScaleBlock / 8) * u_step];
    }
    g += dg;
    u += du;
  };
  // Whole batches of L chunks per lane first (no predicates, so every load of a batch is issued
  // before the first is used), then one predicated batch for the rest.
  const int batched = chunks / (L * 32) * (L * 32);
  for (int c0 = lane; c0 < batched; c0 += L * 32) {
    gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      gr[l] = gmm::load_raw8(g_row + (c0 + l * 32) * 8);
      ur[l] = gmm::load_raw8(u_row + (c0 + l * 32) * 8);
    }
#pragma unroll
    for (int l = 0; l < L; ++l) add_chunk(gr[l], ur[l], c0 + l * 32);
  }
  for (int c0 = batched + lane; c0 < chunks; c0 += L * 32) {
    gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      const bool in = c < chunks;
      gr[l] = in ? gmm::load_raw8(g_row + c * 8) : gmm::Raw8<WT>{};
      ur[l] = in ? gmm::load_raw8(u_row + c * 8) : gmm::Raw8<WT>{};
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      if (c >= chunks) break;
      add_chunk(gr[l], ur[l], c);
    }
  }
  for (int64_t kk = int64_t{chunks} * 8 + lane; kk < hidden; kk += 32) {
    const float xv = to_f(x[kk]);
    g = fmaf(xv, to_f(g_row[kk]) * block_scale(gs, e, i, kk), g);
    u = fmaf(xv, to_f(u_row[kk]) * block_scale(us, e, i, kk), u);
  }
  g = warp_sum(g) * column_scale(gs, e, i);
  u = warp_sum(u) * column_scale(us, e, i);
  if (lane == 0) *h_out = from_f<T>(silu_f(g) * u);
}

// Six blocks per SM (<= 40 registers): Qwen3-30B-A3B's T = 1 grid (8 pairs x 96 blocks) then
// runs as one wave; at 4 blocks per SM (61 registers) it took 1.45 waves. FP8 weights: under 40
// registers ptxas spilled the loop's state to local memory and issued 4 of a batch's 8 loads
// before the first use; at 4 blocks per SM (64 registers, no spills, all 8 first) Qwen3-30B's
// T = 1 layer went from 27.4 to 22.8 us and T = 8 from 149 to 117 us (H200, 5187fbe).
template <class WT> constexpr int kGateUpBlocksPerSm = sizeof(WT) == 1 ? 4 : 6;
template <class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads, kGateUpBlocksPerSm<WT>) gate_up_decode_kernel(DecodeArgs a) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  T* x = reinterpret_cast<T*>(decode_smem);  // [hidden]: the slot's token row of x
  const int64_t pairs = a.tokens * a.k;
  int64_t slot = blockIdx.y;
  const auto stage_x = [&] { stage_row(static_cast<const T*>(a.x) + (slot < pairs ? slot / a.k : slot - pairs) * a.x_ts, x, a.hidden); };
  // x is the router's input, complete before the router started, so at T = 1 it is staged while
  // the router may still run; ids, weights and the order are the router's output, read after the
  // wait. At T > 1 the pair blocks go in expert order: pairs of one expert run back to back and
  // the later ones read its rows from L2 (v3.2 read a shared expert's rows once per pair).
  if (!a.order) stage_x();
  wait_for_previous_kernel();
  // The down kernel's blocks may start now: they read the router's outputs before their own wait.
  dependents_may_launch();
  if (a.order) {
    if (slot < pairs) slot = a.order[slot];
    stage_x();
  }
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDecodeWarps + threadIdx.x / 32;
  T* h = static_cast<T*>(a.h) + slot * a.h_rs + i;
  if (slot < pairs) {
    if (i >= a.inter) return;
    const int64_t e = a.ids[slot];
    const WT* g = static_cast<const WT*>(a.gate) + e * a.gu_es + i * a.gate_rs;
    const WT* u = static_cast<const WT*>(a.up) + e * a.gu_es + i * a.up_rs;
    gate_up_channel<T, WT>(x, g, u, a.hidden, a.gate_scale, a.up_scale, e, i, h);
  } else {  // the shared expert of token slot - pairs
    if (i >= a.s_inter) return;
    const T* g = static_cast<const T*>(a.s_gate) + i * a.s_rs;
    const T* u = static_cast<const T*>(a.s_up) + i * a.s_rs;
    gate_up_channel<T, T>(x, g, u, a.hidden, WeightScale{}, WeightScale{}, 0, i, h);
  }
}

// Down: block (g, t) computes outputs n0 = g * O .. n0 + O - 1 of token t. Warp w takes the
// token's pairs w, w + warps, ... (the shared expert is pair k); for each it streams the O down
// rows (consecutive in memory) and dots them with the pair's row of h. A lane issues all O * L
// weight loads of a batch, then the batch's L loads of h (shared by the O rows; from L2), before
// using any. The router's outputs (ids, weights, the shared gate) and the weights are inputs of
// gate_up too, so a warp issues its first batch of weight loads before waiting for gate_up (which
// triggers its dependents only after its own wait for the router): the first reads overlap
// gate_up's tail, and only h waits. The block adds the warps' sums in shared memory.
// (v3.3 had one warp per output walk all of its pairs, experts looked up in shared memory: ptxas
// gave it 32 registers and a few loads in flight per lane, 13 us for 25 MB in bench/moe_probe.cu
// against 8 us for one warp per row.)
constexpr int kDownMaxWarps = 16;
template <class WT> constexpr int kDownLoads = sizeof(WT) == 4 ? 2 : 3;    // chunks per row and batch
constexpr int kDownOutputs = 2;  // consecutive output rows per warp (O)

// dots[i] = sum over row i (i < valid_rows <= O, `rows_rs` apart from w) of w . h, `len`
// elements, times the row's 128-element block scales when `block_scales` is given (one per 128
// elements, `scale_step` apart; the O rows share them: O divides 128). When `wait`, waits for the
// previous kernel (h's writer) after issuing the first batch of weight loads.
template <int O, class T, class WT>
__device__ __forceinline__ void down_rows(const WT* w, int64_t rows_rs, int valid_rows, const T* h, int64_t len, const float* block_scales,
                                          int64_t scale_step, bool wait, float (&dots)[O]) {
  constexpr int L = kDownLoads<WT>;
  const int lane = threadIdx.x % 32;
  const int chunks = static_cast<int>(len / 8);
#pragma unroll
  for (int i = 0; i < O; ++i) dots[i] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += L * 32) {
    gmm::Raw8<WT> wr[O][L];
    gmm::Raw8<T> hr[L];
#pragma unroll
    for (int i = 0; i < O; ++i)
#pragma unroll
      for (int l = 0; l < L; ++l)
        wr[i][l] = i < valid_rows && c0 + l * 32 < chunks ? gmm::load_raw8(w + i * rows_rs + (c0 + l * 32) * 8) : gmm::Raw8<WT>{};
    if (wait && c0 == lane) wait_for_previous_kernel();
#pragma unroll
    for (int l = 0; l < L; ++l) hr[l] = c0 + l * 32 < chunks ? gmm::load_raw8(h + (c0 + l * 32) * 8) : gmm::Raw8<T>{};
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int c = c0 + l * 32;
      if (c >= chunks) break;
      float hf[8];
      gmm::unpack8(hr[l], hf);
      const float scale = block_scales ? block_scales[c / (gmm::kScaleBlock / 8) * scale_step] : 1.f;
#pragma unroll
      for (int i = 0; i < O; ++i) {
        float wf[8];
        gmm::unpack8(wr[i][l], wf);
        dots[i] = fmaf(gmm::dot8(wf, hf, 0.f), scale, dots[i]);
      }
    }
  }
  if (wait && chunks <= lane) wait_for_previous_kernel();  // the loop above did not run for this lane
#pragma unroll 1  // the len % 8 tail (none for the models' sizes): unrolled, it took ~60 registers
  for (int64_t kk = int64_t{chunks} * 8 + lane; kk < len; kk += 32) {
    const float hv = to_f(h[kk]), scale = block_scales ? block_scales[kk / gmm::kScaleBlock * scale_step] : 1.f;
#pragma unroll
    for (int i = 0; i < O; ++i)
      if (i < valid_rows) dots[i] = fmaf(to_f(w[i * rows_rs + kk]) * scale, hv, dots[i]);
  }
}

template <class T, class WT>
__global__ void __launch_bounds__(kDownMaxWarps * 32, 2) down_decode_kernel(DecodeArgs a) {
  constexpr int O = kDownOutputs;
  __shared__ float partial[kDownMaxWarps][O];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * O, t = blockIdx.y, pairs = a.tokens * a.k;
  const int valid = static_cast<int>(min(int64_t{O}, a.hidden - n0));
  float acc[O] = {}, dots[O];
  for (int j = warp; j < a.k + (a.shared ? 1 : 0); j += warps) {
    const bool first = j == warp;
    if (j < a.k) {
      // ids and weights were final before gate_up's blocks triggered this launch; L2 loads
      // (__ldcg) so that no earlier layer's values can come from this SM's L1.
      const int64_t pair = t * a.k + j, e = __ldcg(a.ids + pair);
      const WeightScale& ds = a.down_scale;
      const bool blocks = ds.kind == WeightScale::Block128;
      const float* scales = blocks ? ds.ptr + gmm::block_scale_offset(e, n0, 0, ds.s0, ds.s1, ds.s2) : nullptr;
      down_rows<O>(static_cast<const WT*>(a.down) + e * a.d_es + n0 * a.d_rs, a.d_rs, valid, static_cast<const T*>(a.h) + pair * a.h_rs,
                   a.inter, scales, ds.s2, first, dots);
      const float weight = __ldcg(a.weights + pair);
#pragma unroll
      for (int i = 0; i < O; ++i) acc[i] = fmaf(dots[i], weight * column_scale(ds, e, n0 + i), acc[i]);
    } else {  // the shared expert
      down_rows<O>(static_cast<const T*>(a.s_down) + n0 * a.sd_rs, a.sd_rs, valid, static_cast<const T*>(a.h) + (pairs + t) * a.h_rs,
                   a.s_inter, static_cast<const float*>(nullptr), 0, first, dots);
      const float gate = a.sg ? __ldcg(a.sg + t) : 1.f;
#pragma unroll
      for (int i = 0; i < O; ++i) acc[i] = fmaf(dots[i], gate, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < O; ++i) {
    const float v = warp_sum(acc[i]);
    if (lane == 0) partial[warp][i] = v;
  }
  __syncthreads();
  if (threadIdx.x < valid) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += partial[w][threadIdx.x];
    static_cast<T*>(a.out)[t * a.o_ts + n0 + threadIdx.x] = from_f<T>(sum);
  }
}

// ---- host -----------------------------------------------------------------------------------------
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool rows_aligned(const Tensor& t, int64_t row_stride) {
  return aligned16(t.raw_data()) && (row_stride * static_cast<int64_t>(t.itemsize())) % 16 == 0;
}
int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 65535)); }

// EMBER_MOE_PATH=decode|grouped forces the decode kernels or the grouped path (permutation +
// grouped products) so benchmarks can compare them on one shape; unset, the layer picks by size.
enum class MoePath { Auto, Decode, Grouped };
MoePath forced_moe_path() {
  const char* value = std::getenv("EMBER_MOE_PATH");
  if (value == nullptr || *value == '\0') return MoePath::Auto;
  const std::string v = value;
  if (v == "decode") return MoePath::Decode;
  if (v == "grouped") return MoePath::Grouped;
  fail("moe_layer", "EMBER_MOE_PATH: expected decode or grouped, got {}", v);
}

/// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when `pdl`
/// (the kernel must call wait_for_previous_kernel before reading the previous kernel's output).
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                      const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Calls f(T*) with the kernel element type of a float dtype.
template <class F> void with_float(DType d, F&& f) {
  switch (d) {
    case kFloat32: f(static_cast<float*>(nullptr)); break;
    case kFloat16: f(static_cast<__half*>(nullptr)); break;
    case kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case kFloat64: f(static_cast<double*>(nullptr)); break;
    default: fail("moe", "CUDA element type: expected float32, float16, bfloat16 or float64, got {}", name(d));
  }
}

Tensor f32_contiguous(const Tensor& t) {
  if (!t.defined()) return t;
  const Tensor f = t.dtype() == kFloat32 ? t : t.to(kFloat32);
  return f.contiguous();
}

void launch_route(const RouteArgs& args, DType logits_type, DType x_type, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((args.tokens + kRouteWarps - 1) / kRouteWarps);
  with_experts_per_lane(args.experts, [&](auto epl) {
    with_float(logits_type, [&](auto* l_tag) {
      using L = std::remove_pointer_t<decltype(l_tag)>;
      with_float(x_type, [&](auto* x_tag) {
        using X = std::remove_pointer_t<decltype(x_tag)>;
        if constexpr (!std::is_same_v<X, double>) route_kernel<decltype(epl)::value, L, X><<<blocks, kRouteWarps * 32, 0, stream>>>(args);
      });
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void launch_permute(const Tensor& ids, const Tensor& order, const Tensor& inverse, const Tensor& tokens, const Tensor& counts,
                    const Tensor& offsets, cudaStream_t stream) {
  const Tensor c = ids.contiguous();
  const int64_t pairs = c.numel();
  const int k = static_cast<int>(ids.size(1)), experts = static_cast<int>(counts.size(0));
  if (c.dtype() == kInt32) {
    permute_kernel<int32_t><<<1, kPermuteThreads, 0, stream>>>(c.data_ptr<int32_t>(), pairs, k, experts, order.data_ptr<int32_t>(),
                                                              inverse.data_ptr<int32_t>(), tokens.data_ptr<int32_t>(),
                                                              counts.data_ptr<int32_t>(), offsets.data_ptr<int32_t>());
  } else {
    permute_kernel<int64_t><<<1, kPermuteThreads, 0, stream>>>(c.data_ptr<int64_t>(), pairs, k, experts, order.data_ptr<int32_t>(),
                                                              inverse.data_ptr<int32_t>(), tokens.data_ptr<int32_t>(),
                                                              counts.data_ptr<int32_t>(), offsets.data_ptr<int32_t>());
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

// out [rows, n] = a [rows, k] @ w^T for w [G, n, k] (unit stride along k), grouped by offs (or one group).
void rows_product(const Tensor& a, const Tensor& w, const Tensor& w_scale, const int32_t* offs, const Tensor& out, int device) {
  gmm::RowsProblem p;
  p.a = a.raw_data(); p.a_rs = a.stride(0); p.a_ks = a.stride(1); p.a_type = a.dtype();
  p.b = w.raw_data(); p.b_gs = w.stride(0); p.b_ks = w.stride(2); p.b_ns = w.stride(1); p.b_type = w.dtype();
  p.scale_b = gmm::weight_scale(w_scale, w.size(1));
  p.offs = offs; p.groups = w.size(0); p.rows = a.size(0); p.n = w.size(1); p.k = w.size(2);
  p.out = out.raw_data(); p.o_rs = out.stride(0); p.o_ns = out.stride(1); p.out_type = out.dtype();
  gmm::run_rows(p, device);
}

template <class T>
void launch_silu_mul(const Tensor& gu, int64_t inter, const Tensor& h, cudaStream_t stream) {
  const int64_t rows = gu.size(0);
  const T* g = static_cast<const T*>(gu.raw_data());
  silu_mul_kernel<T><<<blocks_for(rows * inter, 256), 256, 0, stream>>>(g, g + inter, gu.stride(0), rows, inter,
                                                                        static_cast<T*>(h.raw_data()), h.stride(0));
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_route(const Tensor& logits, const Tensor& expert_bias, const MoeRouteOptions& options, const Tensor& weights,
               const Tensor& ids) {
  const int device = logits.device().index;
  const Tensor bias = f32_contiguous(expert_bias);
  RouteArgs a;
  a.logits = logits.raw_data(); a.l_ts = logits.stride(0); a.l_es = logits.stride(1);
  a.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  a.tokens = logits.size(0); a.experts = logits.size(1); a.k = static_cast<int>(options.top_k);
  a.softmax = options.scoring == MoeScoring::Softmax; a.norm = options.norm_topk;
  a.eps = static_cast<float>(options.norm_eps); a.scaling = static_cast<float>(options.routed_scaling);
  a.weights = weights.data_ptr<float>(); a.ids = ids.data_ptr<int32_t>();
  launch_route(a, logits.dtype(), kFloat32, current_raw_stream(device));
}

void moe_permute(const Tensor& expert_ids, const Tensor& order, const Tensor& inverse, const Tensor& tokens, const Tensor& counts,
                 const Tensor& offsets) {
  if (expert_ids.numel() == 0) {  // no pairs: every group empty
    fill(counts, Scalar(0));
    fill(offsets, Scalar(0));
    return;
  }
  launch_permute(expert_ids, order, inverse, tokens, counts, offsets, current_raw_stream(expert_ids.device().index));
}

void moe_unpermute(const Tensor& y, const Tensor& inverse, const Tensor& weights, const Tensor& out) {
  const int device = y.device().index;
  cudaStream_t stream = current_raw_stream(device);
  const Tensor inv = inverse.contiguous();
  const int64_t t = weights.size(0), h = y.size(1);
  const int k = static_cast<int>(weights.size(1));
  with_float(y.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_float(weights.dtype(), [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      if constexpr (!std::is_same_v<T, double>) {
        combine_kernel<T, W><<<blocks_for(t * h, 256), 256, 0, stream>>>(
            static_cast<const T*>(y.raw_data()), y.stride(0), y.size(0), inv.data_ptr<int32_t>(), static_cast<const W*>(weights.raw_data()),
            weights.stride(0), weights.stride(1), t, k, h, nullptr, 0, nullptr, static_cast<T*>(out.raw_data()), out.stride(0),
            device_error_word(device));
      }
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void moe_layer(const Tensor& x, const Tensor& router_weight, const MoeExperts& experts, const MoeLayerOptions& options,
               const Tensor& out) {
  const int device = x.device().index;
  cudaStream_t stream = current_raw_stream(device);
  const Device dev = x.device();
  const int64_t t = x.size(0), hidden = x.size(1), e = router_weight.size(0), inter = experts.down.size(2);
  const int k = static_cast<int>(options.route.top_k);
  const int64_t pairs = t * k;
  const bool shared = options.shared.has_value();
  const int64_t s_inter = shared ? options.shared->down.size(1) : 0;
  const bool shared_gate = shared && options.shared->gate.defined();

  const Tensor s_gate = shared ? options.shared->gate_up.narrow(0, 0, s_inter) : Tensor();
  const Tensor s_up = shared ? options.shared->gate_up.narrow(0, s_inter, s_inter) : Tensor();
  const bool fp8 = experts.gate.dtype() == kFloat8_e4m3fn;
  // The gate_up kernel stages a token's row of x in shared memory; h's rows are 16-byte aligned.
  const int64_t h_rs = round8(std::max(inter, s_inter));
  const auto x_row_bytes = static_cast<size_t>(hidden) * x.itemsize();
  const bool decode_fits = pairs <= kMaxDecodePairs && x_row_bytes <= kDecodeSmemMax &&
                      rows_aligned(x, x.stride(0)) && rows_aligned(router_weight, router_weight.stride(0)) &&
                      rows_aligned(experts.gate, experts.gate.stride(1)) &&
                      rows_aligned(experts.up, experts.up.stride(1)) && rows_aligned(experts.down, experts.down.stride(1)) &&
                      (experts.gate.stride(0) * static_cast<int64_t>(experts.gate.itemsize())) % 16 == 0 &&
                      (experts.down.stride(0) * static_cast<int64_t>(experts.down.itemsize())) % 16 == 0 &&
                      experts.gate.stride(0) == experts.up.stride(0) &&
                      (!shared || (rows_aligned(s_gate, s_gate.stride(0)) && rows_aligned(options.shared->down, options.shared->down.stride(0))));

  const MoePath forced = forced_moe_path();
  EMBER_CHECK(forced != MoePath::Decode || decode_fits, "moe_layer",
              "EMBER_MOE_PATH=decode: expected at most {} (token, expert) pairs, 16-byte aligned rows and a row of x "
              "of at most {} bytes, got {} pairs and {} bytes",
              kMaxDecodePairs, kDecodeSmemMax, pairs, x_row_bytes);
  // The decode kernels read one expert matrix per (token, expert) pair, the grouped path one
  // per distinct expert: once pairs outnumber the experts, reuse wins. Measured on the H200
  // (docs/PERF.md, both paths forced): LFM2-8B (E = 32, top-4) at T = 16 grouped 230 us vs
  // decode 580 us; Qwen3-30B (E = 128, top-8) at T = 8 decode 261 us vs grouped 281 us.
  const bool decode = forced == MoePath::Auto ? decode_fits && pairs <= e : forced == MoePath::Decode;

  // Router: logits [T, E] f32 = x @ router^T (f32 accumulate and output), then routing.
  const Tensor logits = empty({t, e}, kFloat32, dev);
  const Tensor weights = empty({t, k}, kFloat32, dev), ids = empty({t, k}, kInt32, dev);
  const Tensor pair_order = decode && t > 1 ? empty({pairs}, kInt32, dev) : Tensor();  // gate_up's pair blocks by expert
  const Tensor sg = shared_gate ? empty({t}, kFloat32, dev) : Tensor();
  const Tensor bias = f32_contiguous(options.route.expert_bias.value_or(Tensor()));
  RouteArgs ra;
  ra.logits = logits.raw_data(); ra.l_ts = e; ra.l_es = 1;
  ra.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  ra.tokens = t; ra.experts = e; ra.k = k;
  ra.softmax = options.route.scoring == MoeScoring::Softmax; ra.norm = options.route.norm_topk;
  ra.eps = static_cast<float>(options.route.norm_eps); ra.scaling = static_cast<float>(options.route.routed_scaling);
  ra.weights = weights.data_ptr<float>(); ra.ids = ids.data_ptr<int32_t>();
  ra.x = x.raw_data(); ra.x_ts = x.stride(0); ra.hidden = hidden;
  if (shared_gate) {
    ra.gate = options.shared->gate.raw_data();
    ra.sg = sg.data_ptr<float>();
  }
  if (decode) {
    auto* ticket = static_cast<unsigned*>(zeroed_stream_scratch(device, stream, ScratchPurpose::MoeRouter, sizeof(unsigned)));
    const auto blocks = static_cast<unsigned>((e + kRouterWarps - 1) / kRouterWarps);
    with_experts_per_lane(e, [&](auto epl) {
      with_float(x.dtype(), [&](auto* tag) {
        using X = std::remove_pointer_t<decltype(tag)>;
        if constexpr (!std::is_same_v<X, double>)
          router_decode_kernel<decltype(epl)::value, X><<<blocks, kRouterWarps * 32, 0, stream>>>(
              ra, static_cast<const X*>(router_weight.raw_data()), router_weight.stride(0), logits.data_ptr<float>(), ticket,
              t > 1 ? pair_order.data_ptr<int32_t>() : nullptr);
      });
    });
    EMBER_CUDA_CHECK_LAUNCH();
  } else {
    rows_product(x, router_weight.unsqueeze(0), Tensor(), nullptr, logits, device);
    launch_route(ra, kFloat32, x.dtype(), stream);
  }

  if (decode) {
    const int64_t slots = pairs + (shared ? t : 0);
    const Tensor h = empty({slots, h_rs}, x.dtype(), dev);
    DecodeArgs a;
    a.x = x.raw_data(); a.x_ts = x.stride(0); a.tokens = t; a.hidden = hidden; a.inter = inter; a.k = k;
    a.ids = ids.data_ptr<int32_t>(); a.weights = weights.data_ptr<float>();
    a.order = pair_order.defined() ? pair_order.data_ptr<int32_t>() : nullptr;
    a.gate = experts.gate.raw_data(); a.up = experts.up.raw_data(); a.gu_es = experts.gate.stride(0);
    a.gate_rs = experts.gate.stride(1); a.up_rs = experts.up.stride(1);
    a.gate_scale = gmm::weight_scale(experts.gate_scale, inter);
    a.up_scale = gmm::weight_scale(experts.up_scale, inter);
    a.down = experts.down.raw_data(); a.d_es = experts.down.stride(0); a.d_rs = experts.down.stride(1);
    a.down_scale = gmm::weight_scale(experts.down_scale, hidden);
    if (shared) {
      a.shared = true;
      a.s_gate = s_gate.raw_data(); a.s_up = s_up.raw_data(); a.s_rs = s_gate.stride(0); a.s_inter = s_inter;
      a.s_down = options.shared->down.raw_data(); a.sd_rs = options.shared->down.stride(0);
      a.sg = shared_gate ? sg.data_ptr<float>() : nullptr;
    }
    a.h = h.raw_data(); a.h_rs = h.stride(0);
    a.out = out.raw_data(); a.o_ts = out.stride(0);
    const dim3 gu_grid(static_cast<unsigned>((std::max(inter, s_inter) + kDecodeWarps - 1) / kDecodeWarps), static_cast<unsigned>(slots));
    const auto down_threads = static_cast<unsigned>(32 * std::min<int64_t>(k + (shared ? 1 : 0), kDownMaxWarps));
    const dim3 down_grid(static_cast<unsigned>((hidden + kDownOutputs - 1) / kDownOutputs), static_cast<unsigned>(t));
    const bool pdl = fast_paths_enabled(device, 90);
    with_float(x.dtype(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_same_v<T, double>) {
        if (fp8) {
          launch_dependent(gate_up_decode_kernel<T, E4m3>, gu_grid, kDecodeThreads, x_row_bytes, stream, pdl, a);
          launch_dependent(down_decode_kernel<T, E4m3>, down_grid, down_threads, 0, stream, pdl, a);
        } else {
          launch_dependent(gate_up_decode_kernel<T, T>, gu_grid, kDecodeThreads, x_row_bytes, stream, pdl, a);
          launch_dependent(down_decode_kernel<T, T>, down_grid, down_threads, 0, stream, pdl, a);
        }
      }
    });
    return;
  }

  // Prefill: permute, gather, grouped products, combine.
  const Tensor order = empty({pairs}, kInt32, dev), inverse = empty({pairs}, kInt32, dev), tokens = empty({pairs}, kInt32, dev);
  const Tensor counts = empty({e}, kInt32, dev), offsets = empty({e}, kInt32, dev);
  launch_permute(ids, order, inverse, tokens, counts, offsets, stream);
  const Tensor xs = empty({pairs, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
  const Tensor gu = empty({pairs, round8(2 * inter)}, x.dtype(), dev).narrow(1, 0, 2 * inter);
  const Tensor h = empty({pairs, round8(inter)}, x.dtype(), dev).narrow(1, 0, inter);
  const Tensor y = empty({pairs, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
  const int32_t* offs = offsets.data_ptr<int32_t>();
  Tensor ys;
  with_float(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_same_v<T, double>) {
      gather_rows_kernel<T><<<blocks_for(pairs, 1), 256, 0, stream>>>(static_cast<const T*>(x.raw_data()), x.stride(0),
                                                                       tokens.data_ptr<int32_t>(), pairs, hidden,
                                                                       static_cast<T*>(xs.raw_data()), xs.stride(0));
      EMBER_CUDA_CHECK_LAUNCH();
      rows_product(xs, experts.gate, experts.gate_scale, offs, gu.narrow(1, 0, inter), device);
      rows_product(xs, experts.up, experts.up_scale, offs, gu.narrow(1, inter, inter), device);
      launch_silu_mul<T>(gu, inter, h, stream);
      rows_product(h, experts.down, experts.down_scale, offs, y, device);
      if (shared) {
        const Tensor gs = empty({t, round8(2 * s_inter)}, x.dtype(), dev).narrow(1, 0, 2 * s_inter);
        const Tensor hs = empty({t, round8(s_inter)}, x.dtype(), dev).narrow(1, 0, s_inter);
        ys = empty({t, round8(hidden)}, x.dtype(), dev).narrow(1, 0, hidden);
        rows_product(x, options.shared->gate_up.unsqueeze(0), Tensor(), nullptr, gs, device);
        launch_silu_mul<T>(gs, s_inter, hs, stream);
        rows_product(hs, options.shared->down.unsqueeze(0), Tensor(), nullptr, ys, device);
      }
      combine_kernel<T, float><<<blocks_for(t * hidden, 256), 256, 0, stream>>>(
          static_cast<const T*>(y.raw_data()), y.stride(0), pairs, inverse.data_ptr<int32_t>(), weights.data_ptr<float>(), k, 1, t, k,
          hidden, ys.defined() ? static_cast<const T*>(ys.raw_data()) : nullptr, ys.defined() ? ys.stride(0) : 0,
          shared_gate ? sg.data_ptr<float>() : nullptr, static_cast<T*>(out.raw_data()), out.stride(0), device_error_word(device));
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
