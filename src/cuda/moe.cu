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
//   gate_up_decode_kernel / down_decode_kernel   the decode layer at T = 1: no permutation at
//                       all. Block y of the first kernel is pair y (or the shared expert); one warp
//                       per intermediate channel streams its gate and up rows with 16-byte loads and
//                       writes silu(gate) * up. In the second, one warp per output channel walks all
//                       of the token's pairs (k distinct experts, each read once) and writes the
//                       weighted sum directly: the combine costs nothing.
//   gate_up_experts_kernel / down_experts_kernel   the decode layer at T > 1. Run per (token,
//                       expert) pair, the kernels above would read an expert chosen by several
//                       tokens once per token (64 pairs over 128 experts hit only ~50 distinct
//                       experts, 128 pairs ~80); these read each distinct expert once and apply it
//                       to all of its pairs, still without a permutation. (At T = 1 the k pairs are
//                       k distinct experts: nothing to share, so T = 1 keeps the tuned kernels.) The router's last block lists the
//                       distinct experts and each one's pair slots (ByExpert). Block y of gate_up is
//                       distinct expert y (or the shared expert); a warp streams one channel's gate
//                       and up rows once per group of 4 or 8 of the expert's pairs, keeping a sum
//                       per pair in registers. In down, one warp per output channel walks the
//                       distinct experts with loads batched across them and adds weight * (row . h)
//                       into its tokens' sums in shared memory.
//   router_decode_kernel   the decode router: one warp per expert computes the logits, the
//                       last block to finish routes every token (route_token, as route_kernel) and,
//                       at T > 1, builds the by-expert table.
// A decode layer is 3 kernels: router_decode, then gate_up and down (at T = 1 the bulk-copy
// kernels, or the per-pair kernels where those cannot run; the by-expert kernels at T > 1), with
// programmatic dependent launches between them.
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
//       fresh global load consumed at once, a chain of L2 round trips per batch. At T = 8..16 the
//       per-pair kernels lost to torch (T=16 bf16: 507 us, torch 390 us; docs/PERF.md).
//   v3.1: a token's x row and h rows are staged in shared memory once per block (x before the
//       wait for the router, overlapping it). Layer T=1: 38.6 us bf16, 31.9 us FP8; ncu: router
//       8.7 us, gate_up 22 us (2.7 TB/s, achieved occupancy 63%), down 14 us (1.8 TB/s).
//   v4: T > 1 reads each distinct expert once (gate_up_experts / down_experts above); down
//       stages all of h in shared memory when it fits (~41 KB). Not measured yet.
//   v5: T = 1 on sm_90 streams the weight rows into shared memory with bulk copies (gate_up_bulk
//       / down_bulk below); the router loads each token's x chunks as one batch (v3 loaded them
//       one dependent L2 round trip at a time). The v3.1 kernels remain for rows that are not
//       16-byte multiples, stages that do not fit, and below sm_90. Not measured yet. (this)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "backend.h"
#include "cuda/grouped_mm.h"
#include "cuda/bulk_copy.cuh"
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
// The decode path takes at most this many (token, expert) pairs: the router's last block groups
// them by expert with one thread per pair.
constexpr int kMaxDecodePairs = kRouterWarps * 32;

// The decode path's pairs grouped by expert (used at T > 1), in one int32 buffer of
// 2 + 2 * cap + pairs elements, cap = min(E, pairs): `count` distinct experts, their ids in
// ascending order in experts[0, count), and expert a's pair slots (t * k + j), ascending, in
// slots[starts[a], starts[a + 1]).
struct ByExpert {
  int32_t* count = nullptr;    // [1]
  int32_t* experts = nullptr;  // [cap]
  int32_t* starts = nullptr;   // [cap + 1]
  int32_t* slots = nullptr;    // [pairs]
};

// Fills `table` from ids [pairs] (pairs <= kMaxDecodePairs); every thread of the block calls it.
// Thread p owns pair p and counts, over all pairs, those of lower experts (`below`: where its
// expert's slots start), those of its expert before it (its rank there) and the distinct experts
// below it: positions without a sort, two passes over 128 values in shared memory.
__device__ void group_pairs_by_expert(const int32_t* ids, int pairs, const ByExpert& table) {
  __shared__ int32_t pair_expert[kMaxDecodePairs];
  __shared__ bool first_of_expert[kMaxDecodePairs];
  const int p = threadIdx.x;
  const bool valid = p < pairs;
  const int32_t e = valid ? ids[p] : -1;
  pair_expert[p] = e;
  __syncthreads();
  int below = 0, rank = 0, same = 0;
  for (int q = 0; valid && q < pairs; ++q) {
    const int32_t eq = pair_expert[q];
    below += eq < e;
    same += eq == e;
    rank += eq == e && q < p;
  }
  first_of_expert[p] = valid && rank == 0;
  __syncthreads();
  if (!valid) return;
  int distinct_below = 0;
  for (int q = 0; q < pairs; ++q) distinct_below += first_of_expert[q] && pair_expert[q] < e;
  table.slots[below + rank] = p;
  if (rank == 0) {
    table.experts[distinct_below] = e;
    table.starts[distinct_below] = below;
    if (below + same == pairs) {  // the highest expert closes the table
      *table.count = distinct_below + 1;
      table.starts[distinct_below + 1] = pairs;
    }
  }
}

template <int EPL, class X>
__global__ void __launch_bounds__(kRouterWarps * 32) router_decode_kernel(RouteArgs a, const X* __restrict__ router, int64_t r_es,
                                                                         float* __restrict__ logits, unsigned* __restrict__ ticket,
                                                                         ByExpert by_expert) {
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
  if (by_expert.count) {
    __syncthreads();  // every token's ids are written (this block's global writes are visible to it after the barrier)
    group_pairs_by_expert(a.ids, static_cast<int>(a.tokens) * a.k, by_expert);
  }
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
  // T > 1: the pairs by expert, and gate_up's block rows for them, min(E, pairs) (the shared
  // expert's row follows).
  ByExpert by_expert;
  int expert_slots = 0;
  bool h_staged = false;  // T > 1: down stages all of h in shared memory
};

constexpr int kDecodeThreads = 256, kDecodeWarps = kDecodeThreads / 32;
// 16-byte loads in flight per lane and weight row: 2 for 16-bit weights, 4 for FP8 (8-byte
// loads), 1 for f32 (32-byte loads).
template <class WT> constexpr int kRowLoads = sizeof(WT) == 1 ? 4 : (sizeof(WT) == 2 ? 2 : 1);
constexpr int kMaxDecodeTopK = 32;  // the down kernel keeps a token's pairs in shared memory
// Dynamic shared memory of a decode kernel (a row of x, or a token's rows of h), below the 48 KB
// a launch gets without opting in, leaving room for the static arrays.
constexpr size_t kDecodeSmemMax = 46 * 1024;

// The block copies n elements from global to shared memory (16-byte aligned rows), 8 at a time:
// the compute loops then read activations with shared loads instead of a chain of dependent
// L2 round trips (v3 read x and h straight from global memory inside each batch).
template <class T> __device__ void stage_row(const T* src, T* dst, int64_t n) {
  // One load per iteration: unrolling four (loads before stores) pushed the down kernel to 128
  // registers with spills (2: 161 registers), 1 leaves it at 111 (ptxas, sm_90a).
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
  const int64_t chunks = hidden / 8;
  const bool blocks = gs.kind == WeightScale::Block128;
  float g = 0.f, u = 0.f;
  for (int64_t c0 = lane; c0 < chunks; c0 += L * 32) {
    gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int64_t c = c0 + l * 32;
      const bool in = c < chunks;
      gr[l] = in ? gmm::load_raw8(g_row + c * 8) : gmm::Raw8<WT>{};
      ur[l] = in ? gmm::load_raw8(u_row + c * 8) : gmm::Raw8<WT>{};
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int64_t c = c0 + l * 32;
      if (c >= chunks) break;
      float gf[8], uf[8], xf[8];
      load8(x + c * 8, xf);  // x is in shared memory
      gmm::unpack8(gr[l], gf);
      gmm::unpack8(ur[l], uf);
      float dg = gmm::dot8(xf, gf, 0.f), du = gmm::dot8(xf, uf, 0.f);
      if (blocks) {
        dg *= block_scale(gs, e, i, c * 8);
        du *= block_scale(us, e, i, c * 8);
      }
      g += dg;
      u += du;
    }
  }
  for (int64_t kk = chunks * 8 + lane; kk < hidden; kk += 32) {
    const float xv = to_f(x[kk]);
    g = fmaf(xv, to_f(g_row[kk]) * block_scale(gs, e, i, kk), g);
    u = fmaf(xv, to_f(u_row[kk]) * block_scale(us, e, i, kk), u);
  }
  g = warp_sum(g) * column_scale(gs, e, i);
  u = warp_sum(u) * column_scale(us, e, i);
  if (lane == 0) *h_out = from_f<T>(silu_f(g) * u);
}

// Six blocks per SM (<= 40 registers): Qwen3-30B-A3B's T = 1 grid (8 pairs x 96 blocks) then
// runs as one wave; at 4 blocks per SM (61 registers) it took 1.45 waves.
template <class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads, 6) gate_up_decode_kernel(DecodeArgs a) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  T* x = reinterpret_cast<T*>(decode_smem);  // [hidden]: the slot's token row of x
  dependents_may_launch();  // the down kernel's blocks may start (and wait) while this runs
  const int64_t slot = blockIdx.y, pairs = a.tokens * a.k;
  // x is the router's input, complete before the router started, so it is staged while the
  // router may still run; ids and weights are the router's output, read after the wait.
  stage_row(static_cast<const T*>(a.x) + (slot < pairs ? slot / a.k : slot - pairs) * a.x_ts, x, a.hidden);
  wait_for_previous_kernel();
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

// One warp per output channel n: sum over the token's pairs j of weights[j] * (down_e[n] . h_j),
// plus the shared expert. The lane's work is the flattened (pair, chunk) list; it computes a
// batch of 8 addresses (4 for f32) from the pairs' experts (kept in shared memory) and issues
// all their weight loads before converting any. The token's rows of h (k x I, plus the shared
// expert's) are staged in shared memory first.
template <class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads) down_decode_kernel(DecodeArgs a) {
  constexpr int L = sizeof(WT) == 4 ? 4 : 8;
  extern __shared__ __align__(16) unsigned char decode_smem[];
  T* h_t = reinterpret_cast<T*>(decode_smem);  // [k (+ 1 shared), h_rs]
  __shared__ float pair_weight[kMaxDecodeTopK];
  __shared__ int64_t pair_expert[kMaxDecodeTopK];
  wait_for_previous_kernel();  // h comes from gate_up (and ids, weights from the router before it)
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kDecodeWarps + threadIdx.x / 32;
  const int chunks = static_cast<int>(a.inter / 8);
  const int64_t pairs = a.tokens * a.k;
  const bool blocks = a.down_scale.kind == WeightScale::Block128;
  const int work = a.k * chunks;
  for (int64_t t = 0; t < a.tokens; ++t) {
    __syncthreads();  // the previous token's pair table is no longer read
    for (int j = threadIdx.x; j < a.k; j += kDecodeThreads) {
      const int64_t e = a.ids[t * a.k + j];
      pair_expert[j] = e;
      pair_weight[j] = a.weights[t * a.k + j];
    }
    stage_row(static_cast<const T*>(a.h) + t * a.k * a.h_rs, h_t, a.k * a.h_rs);  // the k rows are adjacent
    if (a.shared) stage_row(static_cast<const T*>(a.h) + (pairs + t) * a.h_rs, h_t + a.k * a.h_rs, a.s_inter);
    __syncthreads();
    if (n >= a.hidden) continue;
    // Row n of every expert's down matrix; expert e's is at e * d_es from it (an offset from the
    // kernel argument keeps the loads global ones; a pointer kept in shared memory made them generic).
    const WT* down_n = static_cast<const WT*>(a.down) + n * a.d_rs;
    float acc = 0.f;
    int j = chunks > 0 ? lane / chunks : 0, c = chunks > 0 ? lane - j * chunks : 0;
    for (int idx0 = lane; idx0 < work; idx0 += L * 32) {
      gmm::Raw8<WT> wr[L];
      int jj[L], cc[L];
#pragma unroll
      for (int l = 0; l < L; ++l) {  // addresses first (no memory dependence), then the loads
        jj[l] = j;
        cc[l] = c;
        for (c += 32; c >= chunks; c -= chunks) ++j;
      }
#pragma unroll
      for (int l = 0; l < L; ++l)
        wr[l] = idx0 + l * 32 < work ? gmm::load_raw8(down_n + pair_expert[jj[l]] * a.d_es + cc[l] * 8) : gmm::Raw8<WT>{};
#pragma unroll
      for (int l = 0; l < L; ++l) {
        if (idx0 + l * 32 >= work) break;
        float wf[8], hf[8];
        gmm::unpack8(wr[l], wf);
        load8(h_t + jj[l] * a.h_rs + cc[l] * 8, hf);
        const float d = gmm::dot8(wf, hf, 0.f);
        const int64_t e = pair_expert[jj[l]];
        const float s = pair_weight[jj[l]] * column_scale(a.down_scale, e, n) *
                        (blocks ? block_scale(a.down_scale, e, n, cc[l] * 8) : 1.f);
        acc = fmaf(d, s, acc);
      }
    }
    for (int jt = 0; jt < a.k && chunks * 8 < a.inter; ++jt) {  // the tail of I % 8 elements
      const int64_t e = pair_expert[jt];
      const WT* w = down_n + e * a.d_es;
      const T* hr = h_t + jt * a.h_rs;
      float d = 0.f;
      for (int64_t kk = chunks * 8 + lane; kk < a.inter; kk += 32) d = fmaf(to_f(w[kk]) * block_scale(a.down_scale, e, n, kk), to_f(hr[kk]), d);
      acc = fmaf(d, pair_weight[jt] * column_scale(a.down_scale, e, n), acc);
    }
    if (a.shared) {
      const T* w = static_cast<const T*>(a.s_down) + n * a.sd_rs;
      const T* hr = h_t + a.k * a.h_rs;
      const int64_t s_chunks = a.s_inter / 8;
      float d = 0.f;
      for (int64_t c0 = lane; c0 < s_chunks; c0 += 2 * 32) {
        gmm::Raw8<T> wr[2];
#pragma unroll
        for (int l = 0; l < 2; ++l) wr[l] = c0 + l * 32 < s_chunks ? gmm::load_raw8(w + (c0 + l * 32) * 8) : gmm::Raw8<T>{};
#pragma unroll
        for (int l = 0; l < 2; ++l) {
          if (c0 + l * 32 >= s_chunks) break;
          float wf[8], hf[8];
          gmm::unpack8(wr[l], wf);
          load8(hr + (c0 + l * 32) * 8, hf);
          d = gmm::dot8(wf, hf, d);
        }
      }
      for (int64_t kk = s_chunks * 8 + lane; kk < a.s_inter; kk += 32) d = fmaf(to_f(w[kk]), to_f(hr[kk]), d);
      acc = fmaf(d, a.sg ? a.sg[t] : 1.f, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) static_cast<T*>(a.out)[t * a.o_ts + n] = from_f<T>(acc);
  }
}

// ---- fused decode at T > 1: each distinct expert read once -----------------------------------------
// Pair q of the expert a warp works on: its token and its row of h (slot t * k + j, or pairs + t
// for the shared expert).
struct PairRef {
  int token, row;
};

// A warp keeps the sums of a group of an expert's pairs in registers, indexed by unrolled loops
// only (a runtime index would put them in local memory). gate_up streams its two rows once per
// group, so the group is as large as registers allow: 4 pairs while T <= 4 (every expert in one
// pass, <= 64 registers: 4 blocks per SM), else 8 (every expert up to T = 8 in one pass, 78
// registers: 3 blocks per SM). down keeps its batch of weights in registers for all groups, so
// small groups cost only unpacking again; 2 keeps it at ~100 registers with 8 loads in flight.
template <int P> constexpr int kGateUpBlocksPerSm = P <= 4 ? 4 : 3;
constexpr int kDownPairs = 2;

// One warp, intermediate channel i of expert e: h[row(q), i] = silu(x[token(q)] . g_row) *
// (x[token(q)] . u_row) for the expert's `count` pairs. Per group of pairs the two rows stream
// once, L raw loads per row in flight per lane, each chunk applied to every pair of the group;
// the x rows (a few KB, read by all the block's warps) come from L1.
template <int P, class T, class WT, class Pairs>
__device__ __forceinline__ void gate_up_pairs(const T* x, int64_t x_ts, const WT* g_row, const WT* u_row, int64_t hidden,
                                              const WeightScale& gs, const WeightScale& us, int64_t e, int64_t i, int count,
                                              Pairs pair, T* h, int64_t h_rs) {
  constexpr int L = kRowLoads<WT>;
  const int lane = threadIdx.x % 32;
  const int64_t chunks = hidden / 8;
  const bool blocks = gs.kind == WeightScale::Block128;
  for (int q0 = 0; q0 < count; q0 += P) {
    const int m = min(P, count - q0);  // pairs in this group, the same on every lane
    float g[P], u[P];
#pragma unroll
    for (int p = 0; p < P; ++p) g[p] = u[p] = 0.f;
    for (int64_t c0 = lane; c0 < chunks; c0 += L * 32) {
      gmm::Raw8<WT> gr[L], ur[L];
#pragma unroll
      for (int l = 0; l < L; ++l) {
        const int64_t c = c0 + l * 32;
        const bool in = c < chunks;
        gr[l] = in ? gmm::load_raw8(g_row + c * 8) : gmm::Raw8<WT>{};
        ur[l] = in ? gmm::load_raw8(u_row + c * 8) : gmm::Raw8<WT>{};
      }
#pragma unroll
      for (int l = 0; l < L; ++l) {
        const int64_t c = c0 + l * 32;
        if (c >= chunks) break;
        float gf[8], uf[8];
        gmm::unpack8(gr[l], gf);
        gmm::unpack8(ur[l], uf);
        const float bg = blocks ? block_scale(gs, e, i, c * 8) : 1.f, bu = blocks ? block_scale(us, e, i, c * 8) : 1.f;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (p < m) {
            float xf[8];
            load8(x + pair(q0 + p).token * x_ts + c * 8, xf);
            g[p] = fmaf(gmm::dot8(xf, gf, 0.f), bg, g[p]);
            u[p] = fmaf(gmm::dot8(xf, uf, 0.f), bu, u[p]);
          }
        }
      }
    }
    for (int64_t kk = chunks * 8 + lane; kk < hidden; kk += 32) {  // the tail of H % 8 elements
      const float gw = to_f(g_row[kk]) * block_scale(gs, e, i, kk), uw = to_f(u_row[kk]) * block_scale(us, e, i, kk);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (p < m) {
          const float xv = to_f(x[pair(q0 + p).token * x_ts + kk]);
          g[p] = fmaf(xv, gw, g[p]);
          u[p] = fmaf(xv, uw, u[p]);
        }
      }
    }
    const float cg = column_scale(gs, e, i), cu = column_scale(us, e, i);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p < m) {
        const float gv = warp_sum(g[p]) * cg, uv = warp_sum(u[p]) * cu;
        if (lane == 0) h[pair(q0 + p).row * h_rs + i] = from_f<T>(silu_f(gv) * uv);
      }
    }
  }
}

// Block (x, y): intermediate channels 8x..8x+7 of distinct expert y, for all of its pairs (blocks
// past the distinct count leave at once), or of the shared expert for all tokens when y is
// expert_slots. P pairs per pass (kGateUpBlocksPerSm above).
template <int P, class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads, kGateUpBlocksPerSm<P>) gate_up_experts_kernel(DecodeArgs a) {
  __shared__ int32_t pair_token[kMaxDecodePairs], pair_row[kMaxDecodePairs];
  dependents_may_launch();  // the down kernel's blocks may start (and wait) while this runs
  wait_for_previous_kernel();  // the by-expert table comes from the router kernel
  const int y = blockIdx.y, tokens = static_cast<int>(a.tokens), pairs = tokens * a.k;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDecodeWarps + threadIdx.x / 32;
  const T* x = static_cast<const T*>(a.x);
  T* h = static_cast<T*>(a.h);
  if (y == a.expert_slots) {  // the shared expert: pair t is token t, its h row pairs + t
    if (i < a.s_inter) {
      const T* g = static_cast<const T*>(a.s_gate) + i * a.s_rs;
      const T* u = static_cast<const T*>(a.s_up) + i * a.s_rs;
      gate_up_pairs<P, T, T>(x, a.x_ts, g, u, a.hidden, WeightScale{}, WeightScale{}, 0, i, tokens,
                          [&](int q) { return PairRef{q, pairs + q}; }, h, a.h_rs);
    }
    return;
  }
  if (y >= *a.by_expert.count) return;  // the whole block: fewer distinct experts than rows
  const int64_t e = a.by_expert.experts[y];
  const int first = a.by_expert.starts[y], count = a.by_expert.starts[y + 1] - first;
  for (int q = threadIdx.x; q < count; q += kDecodeThreads) {
    const int slot = a.by_expert.slots[first + q];
    pair_token[q] = slot / a.k;
    pair_row[q] = slot;
  }
  __syncthreads();
  if (i >= a.inter) return;
  const WT* g = static_cast<const WT*>(a.gate) + e * a.gu_es + i * a.gate_rs;
  const WT* u = static_cast<const WT*>(a.up) + e * a.gu_es + i * a.up_rs;
  gate_up_pairs<P, T, WT>(x, a.x_ts, g, u, a.hidden, a.gate_scale, a.up_scale, e, i, count,
                       [&](int q) { return PairRef{pair_token[q], pair_row[q]}; }, h, a.h_rs);
}

// One warp, output channel n of the shared expert: sum[t] += sg[t] * (row . h[pairs + t]) for
// every token, the row streamed once in batches of L raw loads per lane (one batch for Is <= 2048
// in 16-bit types), each batch reduced per token.
template <class T>
__device__ __forceinline__ void shared_expert_down(const T* row, int64_t len, int tokens, int pairs, const float* sg, const T* h,
                                                   int64_t h_rs, float* sum) {
  constexpr int L = sizeof(T) == 4 ? 4 : 8, P = kDownPairs;
  const int lane = threadIdx.x % 32;
  const int64_t chunks = len / 8;
  for (int64_t b0 = 0; b0 < chunks; b0 += L * 32) {  // the same trip count on every lane: the sums shuffle
    gmm::Raw8<T> wr[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int64_t c = b0 + lane + l * 32;
      wr[l] = c < chunks ? gmm::load_raw8(row + c * 8) : gmm::Raw8<T>{};
    }
    for (int t0 = 0; t0 < tokens; t0 += P) {
      const int m = min(P, tokens - t0);
      float d[P];
#pragma unroll
      for (int p = 0; p < P; ++p) d[p] = 0.f;
#pragma unroll
      for (int l = 0; l < L; ++l) {
        const int64_t c = b0 + lane + l * 32;
        if (c >= chunks) break;
        float wf[8];
        gmm::unpack8(wr[l], wf);
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (p < m) {
            float hf[8];
            load8(h + (pairs + t0 + p) * h_rs + c * 8, hf);
            d[p] = gmm::dot8(wf, hf, d[p]);
          }
        }
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (p < m) {
          const float v = warp_sum(d[p]);
          if (lane == 0) sum[t0 + p] += v * (sg ? sg[t0 + p] : 1.f);
        }
      }
    }
  }
  for (int t = 0; t < tokens && chunks * 8 < len; ++t) {  // the tail of Is % 8 elements
    const T* hr = h + (pairs + t) * h_rs;
    float d = 0.f;
    for (int64_t kk = chunks * 8 + lane; kk < len; kk += 32) d = fmaf(to_f(row[kk]), to_f(hr[kk]), d);
    d = warp_sum(d);
    if (lane == 0) sum[t] += d * (sg ? sg[t] : 1.f);
  }
}

// down_experts_kernel's static shared memory: the pairs in by-expert order, the distinct experts,
// and each warp's per-token sums.
struct DownExpertsTables {
  int32_t pair_token[kMaxDecodePairs], pair_row[kMaxDecodePairs];
  float pair_weight[kMaxDecodePairs];
  int32_t expert_id[kMaxDecodePairs], expert_start[kMaxDecodePairs + 1];
  float token_sum[kDecodeWarps][kMaxDecodePairs];
};
// down_experts_kernel's dynamic shared memory (the staged h) at most: its static tables take more
// than the 2 KB kDecodeSmemMax leaves of the 48 KB a launch gets without opting in.
constexpr size_t kDownExpertsSmemMax = std::min(kDecodeSmemMax, 48 * 1024 - sizeof(DownExpertsTables));

// One warp per output channel n: out[t, n] = sum over the distinct experts e and their pairs
// (t, j) of weights[t, j] * (down_e[n] . h[t * k + j]), plus the shared expert. Each distinct
// expert's row n is read once, for all of its pairs. The warp's work is the list of (expert,
// step) entries, step s of expert a being chunk lane + 32 * s of its row: a batch of L entries
// holds the same experts on every lane, so it can be loaded in one go (several small experts per
// batch, as v3 batched pairs) and still be reduced per pair by shuffles. Token sums live in
// shared memory, one row per warp (a token's index is only known at run time). Every warp reads
// all of h (a pair's row once per expert batch and pair group), so when it fits (h_staged) the
// block stages h in shared memory first, like v3.1 at T = 1; else the block's warps walk the same
// experts in the same order and the h rows they read hit L1. Two blocks per SM (<= 128
// registers, ~100 used): H = 2048 gives 256 blocks, one wave on 132 SMs.
template <class T, class WT>
__global__ void __launch_bounds__(kDecodeThreads, 2) down_experts_kernel(DecodeArgs a) {
  constexpr int L = sizeof(WT) == 4 ? 4 : 8, P = kDownPairs;
  extern __shared__ __align__(16) unsigned char decode_smem[];
  __shared__ DownExpertsTables tables;
  auto& pair_token = tables.pair_token;
  auto& pair_row = tables.pair_row;
  auto& pair_weight = tables.pair_weight;
  auto& expert_id = tables.expert_id;
  auto& expert_start = tables.expert_start;
  wait_for_previous_kernel();  // h comes from gate_up (and the table, weights from the router before it)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tokens = static_cast<int>(a.tokens), pairs = tokens * a.k;
  const int distinct = *a.by_expert.count;
  // h is [pairs (+ tokens), h_rs], contiguous; staged whole, its rows keep their indices.
  T* h_staged = reinterpret_cast<T*>(decode_smem);
  if (a.h_staged) stage_row(static_cast<const T*>(a.h), h_staged, (pairs + (a.shared ? tokens : 0)) * a.h_rs);
  for (int q = threadIdx.x; q < pairs; q += kDecodeThreads) {  // pairs in by-expert order
    const int slot = a.by_expert.slots[q];
    pair_token[q] = slot / a.k;
    pair_row[q] = slot;
    pair_weight[q] = a.weights[slot];
  }
  for (int j = threadIdx.x; j <= distinct; j += kDecodeThreads) {
    expert_start[j] = a.by_expert.starts[j];
    if (j < distinct) expert_id[j] = a.by_expert.experts[j];
  }
  float* sum = tables.token_sum[warp];
  for (int t = lane; t < tokens; t += 32) sum[t] = 0.f;
  __syncthreads();
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kDecodeWarps + warp;
  if (n >= a.hidden) return;
  // One pointer for both cases (its loads are generic): the kernel has registers to spare at
  // two blocks per SM, and a second copy of the loops would double its code.
  const T* h = a.h_staged ? h_staged : static_cast<const T*>(a.h);
  // Row n of every expert's down matrix; expert e's is at e * d_es from it.
  const WT* down_n = static_cast<const WT*>(a.down) + n * a.d_rs;
  const int chunks = static_cast<int>(a.inter / 8), steps = (chunks + 31) / 32;
  const bool blocks = a.down_scale.kind == WeightScale::Block128;
  int next_expert = 0, next_step = 0;  // the entry after the current batch
  for (int entry = 0; entry < distinct * steps; entry += L) {
    int ea[L], ec[L];  // each entry's expert index (the same on every lane) and chunk (this lane's)
#pragma unroll
    for (int l = 0; l < L; ++l) {  // addresses first (no memory dependence), then the loads
      ea[l] = next_expert;
      ec[l] = lane + 32 * next_step;
      if (++next_step == steps) {
        next_step = 0;
        ++next_expert;
      }
    }
    gmm::Raw8<WT> wr[L];
#pragma unroll
    for (int l = 0; l < L; ++l)
      wr[l] = ea[l] < distinct && ec[l] < chunks ? gmm::load_raw8(down_n + expert_id[ea[l]] * a.d_es + ec[l] * 8) : gmm::Raw8<WT>{};
    const int batch_end = min(ea[L - 1] + 1, distinct);
    for (int ax = ea[0]; ax < batch_end; ++ax) {  // the experts of this batch
      const int64_t e = expert_id[ax];
      const int first = expert_start[ax], count = expert_start[ax + 1] - first;
      const float cs = column_scale(a.down_scale, e, n);
      for (int q0 = first; q0 < first + count; q0 += P) {
        const int m = min(P, first + count - q0);  // pairs in this group, the same on every lane
        float d[P];
#pragma unroll
        for (int p = 0; p < P; ++p) d[p] = 0.f;
#pragma unroll
        for (int l = 0; l < L; ++l) {
          if (ea[l] != ax || ec[l] >= chunks) continue;
          float wf[8];
          gmm::unpack8(wr[l], wf);
          const float bs = blocks ? block_scale(a.down_scale, e, n, ec[l] * 8) : 1.f;
#pragma unroll
          for (int p = 0; p < P; ++p) {
            if (p < m) {
              float hf[8];
              load8(h + pair_row[q0 + p] * a.h_rs + ec[l] * 8, hf);
              d[p] = fmaf(gmm::dot8(wf, hf, 0.f), bs, d[p]);
            }
          }
        }
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (p < m) {
            const float v = warp_sum(d[p]);
            if (lane == 0) sum[pair_token[q0 + p]] += v * pair_weight[q0 + p] * cs;
          }
        }
      }
    }
  }
  if (chunks * 8 < a.inter) {  // the tail of I % 8 elements, per pair
    for (int ax = 0; ax < distinct; ++ax) {
      const int64_t e = expert_id[ax];
      const WT* w = down_n + e * a.d_es;
      const float cs = column_scale(a.down_scale, e, n);
      for (int q = expert_start[ax]; q < expert_start[ax + 1]; ++q) {
        const T* hr = h + pair_row[q] * a.h_rs;
        float d = 0.f;
        for (int64_t kk = chunks * 8 + lane; kk < a.inter; kk += 32)
          d = fmaf(to_f(w[kk]) * block_scale(a.down_scale, e, n, kk), to_f(hr[kk]), d);
        d = warp_sum(d);
        if (lane == 0) sum[pair_token[q]] += d * pair_weight[q] * cs;
      }
    }
  }
  if (a.shared)
    shared_expert_down<T>(static_cast<const T*>(a.s_down) + n * a.sd_rs, a.s_inter, tokens, pairs, a.sg, h, a.h_rs, sum);
  __syncwarp();  // lane 0 wrote the sums
  T* out = static_cast<T*>(a.out) + n;
  for (int t = lane; t < tokens; t += 32) out[t * a.o_ts] = from_f<T>(sum[t]);
}

// ---- T = 1 decode through the bulk-copy engine (sm_90) ---------------------------------------------
// v5: the chosen experts' weight rows stream into shared memory by cp.async.bulk (the TMA's 1D
// copies, counted on an mbarrier) in stages of whole rows, up to kBulkMaxStages stages in flight
// per block, one block per SM walking a static list of work items. The bytes in flight no longer
// depend on registers (v3.1 kept 2 KB per warp in flight: gate_up 2.7 TB/s, 22 us; down 1.8 TB/s,
// 14 us under ncu), and DRAM sees whole rows (2-4 KB) per request.
//   gate_up_bulk_kernel  item = 8 channels of one slot (a pair, or the token's shared expert):
//                        their 8 gate and 8 up rows; warp w computes channel w from shared memory.
//   down_bulk_kernel     item = R consecutive outputs: rows n0..n0+R-1 of each pair's expert
//                        (and of the shared expert); warps take the (row, pair) products, then
//                        thread r adds its output's products in pair order (deterministic). Its
//                        weights depend on the router only, so a block issues its first stages
//                        BEFORE waiting for gate_up (gate_up lets it launch only after gate_up's
//                        own wait for the router: the expert ids are final by then).
constexpr int kBulkWarps = 8, kBulkThreads = kBulkWarps * 32, kBulkMaxStages = 4;
constexpr int kBulkMaxRows = 8;                 // outputs per down item
constexpr size_t kBulkSmemMax = 220 * 1024;     // of the 227 KB of shared memory a block may opt in to
constexpr size_t kBulkStageTarget = 48 * 1024;  // bytes per down stage, about

constexpr size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

// The shared-memory plan of the bulk kernels, computed once on the host and passed in.
struct BulkPlan {
  int stages = 0;
  int64_t items = 0;
  size_t act_bytes = 0;    // activations at the start: x (gate_up) or h (down), 128-byte multiple
  size_t row_bytes = 0;    // one expert weight row in a stage (16-byte multiple)
  size_t s_row_bytes = 0;  // one shared-expert weight row
  size_t stage_bytes = 0;
  int rows = kBulkWarps;   // channels (gate_up) or outputs (down) per item
  size_t smem() const { return act_bytes + stages * stage_bytes; }
};

template <class T, class WT>
__global__ void __launch_bounds__(kBulkThreads, 1) gate_up_bulk_kernel(DecodeArgs a, BulkPlan p) {
  extern __shared__ __align__(128) unsigned char bulk_smem[];
  __shared__ __align__(8) uint64_t full[kBulkMaxStages];
  T* x = reinterpret_cast<T*>(bulk_smem);  // [hidden]: the token's row
  unsigned char* stage0 = bulk_smem + p.act_bytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x < p.stages) mbarrier_init(&full[threadIdx.x]);
  stage_row(static_cast<const T*>(a.x), x, a.hidden);  // x is ready before the router ran
  wait_for_previous_kernel();                            // ids: the router's output
  dependents_may_launch();  // after the wait: down reads the ids before its own wait
  __syncthreads();
  const int64_t pairs = a.k, per_pair = (a.inter + kBulkWarps - 1) / kBulkWarps;
  // Item -> (slot, first channel, channels, expert or -1 for the shared expert).
  const auto item_of = [&](int64_t item, int64_t& slot, int64_t& c0, int& nc, int64_t& e) {
    if (item < pairs * per_pair) {
      slot = item / per_pair;
      c0 = item % per_pair * kBulkWarps;
      nc = static_cast<int>(min(int64_t{kBulkWarps}, a.inter - c0));
      e = a.ids[slot];
    } else {
      slot = pairs;
      c0 = (item - pairs * per_pair) * kBulkWarps;
      nc = static_cast<int>(min(int64_t{kBulkWarps}, a.s_inter - c0));
      e = -1;
    }
  };
  // Warp 0 issues item j's copies into stage j % stages: row r of gate to row r, of up to row 8 + r.
  const auto issue = [&](int64_t j) {
    int64_t slot, c0, e;
    int nc;
    item_of(blockIdx.x + j * gridDim.x, slot, c0, nc, e);
    unsigned char* stage = stage0 + (j % p.stages) * p.stage_bytes;
    uint64_t* bar = &full[j % p.stages];
    const size_t row_bytes = e >= 0 ? a.hidden * sizeof(WT) : a.hidden * sizeof(T);
    if (lane == 0) mbarrier_expect_bytes(bar, static_cast<unsigned>(2 * nc * row_bytes));
    __syncwarp();
    if (lane < 2 * kBulkWarps && lane % kBulkWarps < nc) {
      const int r = lane % kBulkWarps;
      const bool up = lane >= kBulkWarps;
      const unsigned char* src;
      if (e >= 0) {
        src = reinterpret_cast<const unsigned char*>(static_cast<const WT*>(up ? a.up : a.gate) + e * a.gu_es +
                                                     (c0 + r) * (up ? a.up_rs : a.gate_rs));
      } else {
        src = reinterpret_cast<const unsigned char*>(static_cast<const T*>(up ? a.s_up : a.s_gate) + (c0 + r) * a.s_rs);
      }
      bulk_load(stage + lane * p.row_bytes, src, static_cast<unsigned>(row_bytes), bar);
    }
  };
  const int64_t my_items = p.items > blockIdx.x ? (p.items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (warp == 0)
    for (int64_t j = 0; j < min(int64_t{p.stages}, my_items); ++j) issue(j);
  for (int64_t j = 0; j < my_items; ++j) {
    mbarrier_wait(&full[j % p.stages], static_cast<unsigned>(j / p.stages) & 1u);
    int64_t slot, c0, e;
    int nc;
    item_of(blockIdx.x + j * gridDim.x, slot, c0, nc, e);
    const unsigned char* stage = stage0 + (j % p.stages) * p.stage_bytes;
    if (warp < nc) {
      T* h = static_cast<T*>(a.h) + slot * a.h_rs + c0 + warp;
      if (e >= 0) {
        gate_up_channel<T, WT>(x, reinterpret_cast<const WT*>(stage + warp * p.row_bytes),
                               reinterpret_cast<const WT*>(stage + (kBulkWarps + warp) * p.row_bytes), a.hidden, a.gate_scale,
                               a.up_scale, e, c0 + warp, h);
      } else {
        gate_up_channel<T, T>(x, reinterpret_cast<const T*>(stage + warp * p.row_bytes),
                              reinterpret_cast<const T*>(stage + (kBulkWarps + warp) * p.row_bytes), a.hidden, WeightScale{},
                              WeightScale{}, 0, c0 + warp, h);
      }
    }
    __syncthreads();  // the stage is read: refill it
    if (warp == 0 && j + p.stages < my_items) issue(j + p.stages);
  }
}

// One warp: (w . h) over n elements in shared memory, lanes striding chunks of 8, times the
// weight's block scales where it has them.
template <class T, class WT>
__device__ __forceinline__ float shared_row_dot(const WT* w, const T* h, int64_t n, const WeightScale& s, int64_t e, int64_t row) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = n / 8;
  const bool blocks = s.kind == WeightScale::Block128;
  float d = 0.f;
  for (int64_t c = lane; c < chunks; c += 32) {
    float wf[8], hf[8];
    load8(w + c * 8, wf);
    load8(h + c * 8, hf);
    const float part = gmm::dot8(wf, hf, 0.f);
    d += blocks ? part * block_scale(s, e, row, c * 8) : part;
  }
  for (int64_t i = chunks * 8 + lane; i < n; i += 32) d = fmaf(to_f(w[i]) * block_scale(s, e, row, i), to_f(h[i]), d);
  return warp_sum(d);
}

template <class T, class WT>
__global__ void __launch_bounds__(kBulkThreads, 1) down_bulk_kernel(DecodeArgs a, BulkPlan p) {
  extern __shared__ __align__(128) unsigned char bulk_smem[];
  __shared__ __align__(8) uint64_t full[kBulkMaxStages];
  __shared__ float pair_weight[kMaxDecodeTopK + 1];
  __shared__ int64_t pair_expert[kMaxDecodeTopK];
  __shared__ float product[2][kBulkMaxRows][kMaxDecodeTopK + 1];  // double-buffered by item
  T* h = reinterpret_cast<T*>(bulk_smem);  // [k (+ 1 shared), h_rs]: the token's rows of h
  unsigned char* stage0 = bulk_smem + p.act_bytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k = a.k, sources = k + (a.shared ? 1 : 0);
  // ids and weights are final: gate_up let this kernel launch only after its wait for the router.
  for (int j = threadIdx.x; j < k; j += kBulkThreads) {
    pair_expert[j] = __ldcg(a.ids + j);
    pair_weight[j] = __ldcg(a.weights + j);
  }
  if (threadIdx.x == 0 && a.shared) pair_weight[k] = a.sg ? __ldcg(a.sg) : 1.f;
  if (threadIdx.x < p.stages) mbarrier_init(&full[threadIdx.x]);
  __syncthreads();
  // Item j: outputs n0 .. n0 + nr - 1; its stage holds row r of source s at (s * rows + r) * row size
  // (experts' rows first, then the shared expert's).
  const auto outputs_of = [&](int64_t j, int64_t& n0, int& nr) {
    n0 = (blockIdx.x + j * gridDim.x) * p.rows;
    nr = static_cast<int>(min(int64_t{p.rows}, a.hidden - n0));
  };
  const auto row_in_stage = [&](int s, int r) {
    return s < k ? (s * p.rows + r) * p.row_bytes : k * p.rows * p.row_bytes + r * p.s_row_bytes;
  };
  const auto issue = [&](int64_t j) {
    int64_t n0;
    int nr;
    outputs_of(j, n0, nr);
    unsigned char* stage = stage0 + (j % p.stages) * p.stage_bytes;
    uint64_t* bar = &full[j % p.stages];
    const size_t w_bytes = a.inter * sizeof(WT), s_bytes = a.s_inter * sizeof(T);
    if (lane == 0) mbarrier_expect_bytes(bar, static_cast<unsigned>(nr * (k * w_bytes + (a.shared ? s_bytes : 0))));
    __syncwarp();
    for (int q = lane; q < sources * nr; q += 32) {
      const int s = q / nr, r = q % nr;
      if (s < k) {
        const WT* src = static_cast<const WT*>(a.down) + pair_expert[s] * a.d_es + (n0 + r) * a.d_rs;
        bulk_load(stage + row_in_stage(s, r), src, static_cast<unsigned>(w_bytes), bar);
      } else {
        const T* src = static_cast<const T*>(a.s_down) + (n0 + r) * a.sd_rs;
        bulk_load(stage + row_in_stage(s, r), src, static_cast<unsigned>(s_bytes), bar);
      }
    }
  };
  const int64_t my_items = p.items > blockIdx.x ? (p.items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (warp == 0)
    for (int64_t j = 0; j < min(int64_t{p.stages}, my_items); ++j) issue(j);  // before the wait: weights only
  wait_for_previous_kernel();  // h: gate_up's output
  stage_row(static_cast<const T*>(a.h), h, sources * a.h_rs);  // slots 0..k-1 and k (shared) are adjacent at T = 1
  __syncthreads();
  for (int64_t j = 0; j < my_items; ++j) {
    mbarrier_wait(&full[j % p.stages], static_cast<unsigned>(j / p.stages) & 1u);
    int64_t n0;
    int nr;
    outputs_of(j, n0, nr);
    const unsigned char* stage = stage0 + (j % p.stages) * p.stage_bytes;
    float(*prod)[kMaxDecodeTopK + 1] = product[j % 2];
    for (int q = warp; q < sources * nr; q += kBulkWarps) {
      const int s = q / nr, r = q % nr;
      if (s < k) {
        const int64_t e = pair_expert[s];
        const float d = shared_row_dot<T, WT>(reinterpret_cast<const WT*>(stage + row_in_stage(s, r)), h + s * a.h_rs, a.inter,
                                              a.down_scale, e, n0 + r);
        if (lane == 0) prod[r][s] = d * pair_weight[s] * column_scale(a.down_scale, e, n0 + r);
      } else {
        const float d = shared_row_dot<T, T>(reinterpret_cast<const T*>(stage + row_in_stage(s, r)), h + k * a.h_rs, a.s_inter,
                                             WeightScale{}, 0, n0 + r);
        if (lane == 0) prod[r][s] = d * pair_weight[k];
      }
    }
    __syncthreads();  // the stage is read and the products are in
    if (warp == 0 && j + p.stages < my_items) issue(j + p.stages);
    if (threadIdx.x >= 32 && threadIdx.x < 32 + nr) {  // warp 1 adds (warp 0 issues)
      const int r = threadIdx.x - 32;
      float sum = 0.f;
      for (int s = 0; s < sources; ++s) sum += prod[r][s];
      static_cast<T*>(a.out)[n0 + r] = from_f<T>(sum);
    }
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
// grouped products) so benchmarks can compare them on one shape; decode-rows forces the decode
// path without the bulk-copy kernels (T = 1 on sm_90). Unset, the layer picks by size.
enum class MoePath { Auto, Decode, DecodeRows, Grouped };
MoePath forced_moe_path() {
  const char* value = std::getenv("EMBER_MOE_PATH");
  if (value == nullptr || *value == '\0') return MoePath::Auto;
  const std::string v = value;
  if (v == "decode-rows") return MoePath::DecodeRows;
  if (v == "decode") return MoePath::Decode;
  if (v == "grouped") return MoePath::Grouped;
  fail("moe_layer", "EMBER_MOE_PATH: expected decode, decode-rows or grouped, got {}", v);
}

// The bulk kernels' shared-memory plans for a T = 1 decode layer, or nullopt where they cannot
// run: below sm_90 (or fast paths disabled), weight rows that are not 16-byte multiples, or
// fewer than two stages fitting.
struct BulkPlans {
  BulkPlan gate_up, down;
};
std::optional<BulkPlans> bulk_plans(int device, size_t x_size, size_t w_size, int64_t hidden, int64_t inter, int k, bool shared,
                                    int64_t s_inter, int64_t h_rs) {
  if (!fast_paths_enabled(device, 90) || device_properties(device).sharedMemPerBlockOptin < kBulkSmemMax) return std::nullopt;
  const auto multiple16 = [](size_t bytes) { return bytes % 16 == 0; };
  if (!multiple16(hidden * w_size) || !multiple16(inter * w_size) ||
      (shared && (!multiple16(hidden * x_size) || !multiple16(s_inter * x_size))))
    return std::nullopt;
  BulkPlans plans;
  BulkPlan& g = plans.gate_up;
  g.act_bytes = round_up(hidden * x_size, 128);
  g.row_bytes = hidden * std::max(w_size, shared ? x_size : 0);
  g.stage_bytes = 2 * kBulkWarps * g.row_bytes;
  g.stages = static_cast<int>(std::min<size_t>(kBulkMaxStages, (kBulkSmemMax - std::min(kBulkSmemMax, g.act_bytes)) / g.stage_bytes));
  g.items = k * ((inter + kBulkWarps - 1) / kBulkWarps) + (shared ? (s_inter + kBulkWarps - 1) / kBulkWarps : 0);
  BulkPlan& d = plans.down;
  d.act_bytes = round_up((k + (shared ? 1 : 0)) * h_rs * x_size, 128);
  d.row_bytes = inter * w_size;
  d.s_row_bytes = shared ? s_inter * x_size : 0;
  const size_t per_output = k * d.row_bytes + d.s_row_bytes;
  d.rows = static_cast<int>(std::clamp<size_t>(kBulkStageTarget / per_output, 1, kBulkMaxRows));
  d.stage_bytes = d.rows * per_output;
  d.stages = static_cast<int>(std::min<size_t>(kBulkMaxStages, (kBulkSmemMax - std::min(kBulkSmemMax, d.act_bytes)) / d.stage_bytes));
  d.items = (hidden + d.rows - 1) / d.rows;
  if (g.stages < 2 || d.stages < 2 || k > kMaxDecodeTopK) return std::nullopt;
  return plans;
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

/// Launches a bulk kernel: one block per SM (or per item), its plan's shared memory.
template <class Kernel> void launch_bulk(Kernel kernel, const DecodeArgs& a, const BulkPlan& plan, int device, cudaStream_t stream) {
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem())));
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(plan.items, device_properties(device).multiProcessorCount));
  launch_dependent(kernel, blocks, kBulkThreads, plan.smem(), stream, /*pdl=*/true, a, plan);
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
  // The T = 1 decode kernels stage the token's row of x (gate_up) and its rows of h (down) in
  // shared memory; the T > 1 kernels stage h only when it fits and else read it from global memory.
  const int64_t h_rs = round8(std::max(inter, s_inter));
  const auto x_row_bytes = static_cast<size_t>(hidden) * x.itemsize();
  const auto h_rows_bytes = static_cast<size_t>((k + (shared ? 1 : 0)) * h_rs) * x.itemsize();
  const bool decode_fits = pairs <= kMaxDecodePairs && k <= kMaxDecodeTopK &&
                      (t > 1 || (x_row_bytes <= kDecodeSmemMax && h_rows_bytes <= kDecodeSmemMax)) &&
                      rows_aligned(x, x.stride(0)) && rows_aligned(router_weight, router_weight.stride(0)) &&
                      rows_aligned(experts.gate, experts.gate.stride(1)) &&
                      rows_aligned(experts.up, experts.up.stride(1)) && rows_aligned(experts.down, experts.down.stride(1)) &&
                      (experts.gate.stride(0) * static_cast<int64_t>(experts.gate.itemsize())) % 16 == 0 &&
                      (experts.down.stride(0) * static_cast<int64_t>(experts.down.itemsize())) % 16 == 0 &&
                      experts.gate.stride(0) == experts.up.stride(0) &&
                      (!shared || (rows_aligned(s_gate, s_gate.stride(0)) && rows_aligned(options.shared->down, options.shared->down.stride(0))));

  const MoePath forced = forced_moe_path();
  EMBER_CHECK((forced != MoePath::Decode && forced != MoePath::DecodeRows) || decode_fits, "moe_layer",
              "EMBER_MOE_PATH=decode: expected at most {} (token, expert) pairs, top_k <= {}, 16-byte aligned rows and (T = 1) "
              "a row of x and a token's rows of h of at most {} bytes each, got {} pairs, top_k {}, {} and {} bytes",
              kMaxDecodePairs, kMaxDecodeTopK, kDecodeSmemMax, pairs, k, x_row_bytes, h_rows_bytes);
  // The rule comes from the v3 decode kernels, which read one expert matrix per (token, expert)
  // pair while the grouped path reads one per distinct expert: once pairs outnumber the experts,
  // reuse won. Measured on the H200 (docs/PERF.md, both paths forced): LFM2-8B (E = 32, top-4) at
  // T = 16 grouped 230 us vs decode 580 us; Qwen3-30B (E = 128, top-8) at T = 8 decode 261 us vs
  // grouped 281 us. The v4 kernels (T > 1) read each distinct expert once too; the rule stays
  // until they are measured.
  const bool decode = forced == MoePath::Auto ? decode_fits && pairs <= e : forced == MoePath::Decode || forced == MoePath::DecodeRows;
  // T > 1 on the decode path: the router also groups the pairs by expert for the v4 kernels.
  const bool by_expert = decode && t > 1;
  const int64_t expert_slots = std::min(e, pairs);
  const Tensor by_expert_table = by_expert ? empty({2 + 2 * expert_slots + pairs}, kInt32, dev) : Tensor();
  ByExpert table;
  if (by_expert) {
    int32_t* p = by_expert_table.data_ptr<int32_t>();
    table.count = p;
    table.experts = p + 1;
    table.starts = p + 1 + expert_slots;
    table.slots = p + 2 + 2 * expert_slots;
  }

  // Router: logits [T, E] f32 = x @ router^T (f32 accumulate and output), then routing.
  const Tensor logits = empty({t, e}, kFloat32, dev);
  const Tensor weights = empty({t, k}, kFloat32, dev), ids = empty({t, k}, kInt32, dev);
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
              ra, static_cast<const X*>(router_weight.raw_data()), router_weight.stride(0), logits.data_ptr<float>(), ticket, table);
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
    a.by_expert = table; a.expert_slots = static_cast<int>(expert_slots);
    // gate_up's blocks: channels along x; along y the pairs then the tokens' shared expert (T = 1),
    // or the distinct-expert rows then one shared-expert row (T > 1).
    const auto channel_blocks = static_cast<unsigned>((std::max(inter, s_inter) + kDecodeWarps - 1) / kDecodeWarps);
    const dim3 gu_grid(channel_blocks, static_cast<unsigned>(by_expert ? expert_slots + (shared ? 1 : 0) : slots));
    const auto down_blocks = static_cast<unsigned>((hidden + kDecodeWarps - 1) / kDecodeWarps);
    // T > 1: down stages all of h in shared memory when it fits (T = 2..3 for Qwen3-30B bf16).
    const auto h_bytes = static_cast<size_t>(slots * h_rs) * x.itemsize();
    a.h_staged = h_bytes <= kDownExpertsSmemMax;
    const bool pdl = fast_paths_enabled(device, 90);
    // T = 1 on sm_90: the bulk-copy kernels where their shared-memory plan fits.
    const std::optional<BulkPlans> bulk =
        t == 1 && forced != MoePath::DecodeRows && x.dtype() != kFloat64
            ? bulk_plans(device, x.itemsize(), experts.gate.itemsize(), hidden, inter, k, shared, s_inter, h_rs)
            : std::nullopt;
    with_float(x.dtype(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_same_v<T, double>) {
        const auto launch = [&](auto* w_tag) {
          using WT = std::remove_pointer_t<decltype(w_tag)>;
          if (by_expert) {
            launch_dependent(t <= 4 ? gate_up_experts_kernel<4, T, WT> : gate_up_experts_kernel<8, T, WT>, gu_grid, kDecodeThreads, 0,
                             stream, pdl, a);
            launch_dependent(down_experts_kernel<T, WT>, down_blocks, kDecodeThreads, a.h_staged ? h_bytes : 0, stream, pdl, a);
          } else if (bulk) {
            launch_bulk(gate_up_bulk_kernel<T, WT>, a, bulk->gate_up, device, stream);
            launch_bulk(down_bulk_kernel<T, WT>, a, bulk->down, device, stream);
          } else {
            launch_dependent(gate_up_decode_kernel<T, WT>, gu_grid, kDecodeThreads, x_row_bytes, stream, pdl, a);
            launch_dependent(down_decode_kernel<T, WT>, down_blocks, kDecodeThreads, h_rows_bytes, stream, pdl, a);
          }
        };
        if (fp8) launch(static_cast<E4m3*>(nullptr));
        else launch(static_cast<T*>(nullptr));
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
