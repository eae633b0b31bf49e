// Why does the MoE decode gate_up (Qwen3-30B-A3B, T = 1: 8 experts' gate and up rows, 50 MB of
// bf16) reach only ~56% of DRAM bandwidth under ncu, whether it streams with register loads
// (v3.1, 22 us) or with bulk copies into shared memory (v5, 19 us)? A standalone probe (no
// ember): the same bytes read by kernels that differ in one thing each, timed as a CUDA graph of
// launches that each pick 8 other experts of 128 (the 805 MB gate_up tensor, so every launch
// reads from HBM), median of 5 replays:
//   stream L    the 16 chosen matrices (3 MB each, contiguous) as one list of 16-byte chunks,
//               grid-stride, L loads in flight per thread, XOR only: the bound for this data.
//   rows L W C  the decode kernel's layout: block (x, y) = channels of pair y, W warps per block,
//               each warp one channel: its gate and up rows with L loads per row in flight per
//               lane; C = 1 adds the bf16 dot products with x (shared memory), C = 0 XORs only;
//               "6/SM" compiles it under v3.3's launch bounds (256 threads, 6 blocks: 40 registers).
//   down S      the down product (25 MB: row n of the 8 experts' [H, I] matrices per output n,
//               1.5 KB each): 8 warps per block, S warps per output splitting its 8 experts
//               (S = 1 is v3.1's layout: 256 blocks, ~2 per SM), 8 loads in flight per lane, h
//               (8 x 768) in shared memory, partial sums added in shared memory.
//   chain       the layer's three kernels back to back as ember launches them: a router (one
//               warp per expert row, the last block picks the top 8 into ids), gate_up (rows L2
//               W8 at 6/SM, experts from ids) and down (S1 or S8, experts from ids), with and
//               without programmatic dependent launch.
//   fused       the same layer as ONE cooperative kernel (every block resident), phases split by
//               grid barriers, each warp's first down row requested before the barrier that
//               waits for h: what the chain's kernel boundaries cost; bf16 and FP8 experts (e4m3,
//               128x128 block scales: 37.5 MB per layer), next to the chain with the same item
//               code ("chain fp8/bf16 ... PDL"). Not measured yet.
// Prints one line per variant: microseconds per launch and TB/s over the bytes it reads.
//
// Measured (H200, 2026-11-30, session 5): stream 12.3-13.6 us (the floor: 3.7-4.1 TB/s); rows
// L2 W8 at 6/SM 13.5-13.7 us, the best of the rows variants within 1 us; down S1 8.4 us with the
// experts in the kernel parameters but 13.1 us with them in shared memory (ember's down reads
// them from there: ptxas then gives it 32 registers and interleaves each LDS -> LDG -> dot8, a
// few loads in flight per lane), S8 (one warp per expert row of an output) 8.0 us either way;
// router 3.8 us; chain router + gate_up 17.8 us; 3 kernels with S1 32.4 us (PDL 34.2), with S8
// 27.3 us (PDL 26.4). ncu on the same kernels reports ~2 us more per kernel than this timing
// (router 5.8, rows 15.7-16.0, down S1 15.1-15.5 us).
//
// Build and run on the GPU machine (no CMake needed):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/moe_probe.cu -o /tmp/moe_probe && /tmp/moe_probe
// ("/tmp/moe_probe fp8down": only session 8's FP8 down access patterns, described above them;
// "/tmp/moe_probe prefetch [coresident]": session 10's down-weight requests during gate_up, see
// chain_gate_up_kernel's DOWN_PREFETCH and coresident_down_kernel; results in src/cuda/moe.cu's
// versions list)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <random>
#include <string>

#include "probe_bf16.cuh"
#include "probe_timing.cuh"

constexpr int kExperts = 128, kTopK = 8, kInter = 768, kHidden = 2048;
constexpr size_t kRowBytes = kHidden * 2;                      // one bf16 row of gate or up
constexpr size_t kMatrixBytes = kInter * kRowBytes;            // 3 MB
constexpr size_t kExpertBytes = 2 * kMatrixBytes;              // gate then up: [2I, H]
constexpr size_t kLaunchBytes = kTopK * kExpertBytes;          // 50 MB read per launch

struct Chosen {
  int experts[kTopK];
};

// stream: the chosen experts' matrices (gate_up's by default: 16 matrices) as one list of 16-byte
// chunks, kChunksPerExpert per expert.
template <int L, size_t kChunksPerExpert = kExpertBytes / 16>
__global__ void __launch_bounds__(256) stream_kernel(const uint4* __restrict__ w, Chosen c, unsigned* __restrict__ out) {
  const size_t total = kTopK * kChunksPerExpert, stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i0 = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < total; i0 += L * stride) {
    uint4 v[L];
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const size_t i = i0 + u * stride;
      v[u] = i < total ? w[c.experts[i / kChunksPerExpert] * kChunksPerExpert + i % kChunksPerExpert] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < L; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads; practically never true
}

// Programmatic dependent launch (the chain section): the next kernel's blocks may start once every
// block of this one has triggered; wait blocks until the previous kernel finished (a no-op when
// the kernel was launched without the attribute).
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// rows: block (x, y) = W channels of pair y; warp w = channel x * W + w: its gate and up rows.
// With `ids` (the chain), pair y's expert is ids[y], read after waiting for the router.
template <int L, int W, bool COMPUTE, int MIN_BLOCKS = 1>
__global__ void __launch_bounds__(W * 32, MIN_BLOCKS) rows_kernel(const uint4* __restrict__ w, const uint4* __restrict__ x_global, Chosen c,
                                                      float* __restrict__ h, const int* __restrict__ ids) {
  __shared__ uint4 x[kHidden / 8];
  pdl_trigger();
  for (int i = threadIdx.x; i < kHidden / 8; i += W * 32) x[i] = x_global[i];
  pdl_wait();
  const int expert = ids ? ids[blockIdx.y] : c.experts[blockIdx.y];
  __syncthreads();
  const int lane = threadIdx.x % 32, channel = blockIdx.x * W + threadIdx.x / 32;
  if (channel >= kInter) return;
  constexpr int kChunks = kHidden / 8;  // 16-byte chunks per row
  const uint4* g = w + (expert * kExpertBytes + channel * kRowBytes) / 16;
  const uint4* u = g + kMatrixBytes / 16;
  float gs = 0.f, us = 0.f;
  unsigned acc = 0;
  for (int c0 = lane; c0 < kChunks; c0 += L * 32) {
    uint4 gv[L], uv[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      gv[l] = g[c0 + l * 32];  // kChunks is a multiple of L * 32 for L <= 8
      uv[l] = u[c0 + l * 32];
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      if constexpr (COMPUTE) {
        const uint4 xv = x[c0 + l * 32];
        gs = dot8(gv[l], xv, gs);
        us = dot8(uv[l], xv, us);
      } else {
        acc ^= gv[l].x ^ gv[l].y ^ gv[l].z ^ gv[l].w ^ uv[l].x ^ uv[l].y ^ uv[l].z ^ uv[l].w;
      }
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    gs += __shfl_xor_sync(0xffffffffu, gs, off);
    us += __shfl_xor_sync(0xffffffffu, us, off);
    acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  }
  if (lane == 0) h[blockIdx.y * kInter + channel] = COMPUTE ? gs / (1.f + __expf(-gs)) * us : static_cast<float>(acc);
}

constexpr size_t kDownRowBytes = kInter * 2, kDownExpertBytes = kHidden * kDownRowBytes;  // [H, I] bf16
constexpr size_t kDownBytes = kTopK * kDownExpertBytes;                                       // 25 MB per launch

// down: 8 warps per block, S warps per output n, part p of them takes experts p * 8 / S onward.
// With `ids` (the chain): the experts are ids[0..7], read after waiting for gate_up.
template <int S>
__global__ void __launch_bounds__(256) down_kernel(const uint4* __restrict__ w, const uint4* __restrict__ h_global, Chosen c,
                                                   float* __restrict__ out, const int* __restrict__ ids) {
  constexpr int kOutputs = 8 / S, kExpertsPerPart = kTopK / S, kChunks = kInter / 8, L = 8;
  __shared__ uint4 h[kTopK * kChunks];  // 12 KB
  __shared__ float partial[8];
  __shared__ int experts[kTopK];
  pdl_wait();
  if (threadIdx.x < kTopK) experts[threadIdx.x] = ids ? ids[threadIdx.x] : c.experts[threadIdx.x];
  for (int i = threadIdx.x; i < kTopK * kChunks; i += 256) h[i] = h_global[i];
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, part = warp % S;
  const int n = blockIdx.x * kOutputs + warp / S;
  float acc = 0.f;
  constexpr int kWork = kExpertsPerPart * kChunks;
  for (int i0 = lane; i0 < kWork; i0 += L * 32) {
    uint4 v[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int i = i0 + l * 32, j = part * kExpertsPerPart + i / kChunks;
      v[l] = i < kWork ? w[(experts[j] * kDownExpertBytes + n * kDownRowBytes) / 16 + i % kChunks] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int i = i0 + l * 32;
      if (i < kWork) acc = dot8(v[l], h[(part * kExpertsPerPart + i / kChunks) * kChunks + i % kChunks], acc);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (threadIdx.x < kOutputs) {
    float sum = 0.f;
    for (int p = 0; p < S; ++p) sum += partial[threadIdx.x * S + p];
    out[blockIdx.x * kOutputs + threadIdx.x] = sum;
  }
}

// One warp: x . router row e (4 KB, 8 loads in flight per lane), reduced over the warp.
__device__ __forceinline__ float router_logit(const uint4* __restrict__ r, const uint4* x, int e) {
  const int lane = threadIdx.x % 32;
  constexpr int kChunks = kHidden / 8;
  uint4 v[8];
#pragma unroll
  for (int l = 0; l < 8; ++l) v[l] = r[e * kChunks + lane + l * 32];
  float acc = 0.f;
#pragma unroll
  for (int l = 0; l < 8; ++l) acc = dot8(v[l], x[lane + l * 32], acc);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

// One warp: the top 8 of the E logits (8 rounds of a warp max), shifted by `salt` so that every
// launch reads other experts, into ids[0..7]. L2 loads: the logits come from other blocks.
__device__ __forceinline__ void warp_top8(const float* logits, int salt, int* ids) {
  const int lane = threadIdx.x % 32;
  float mine[kExperts / 32];
#pragma unroll
  for (int i = 0; i < kExperts / 32; ++i) mine[i] = __ldcg(logits + lane + 32 * i);
  for (int j = 0; j < kTopK; ++j) {
    float best = -INFINITY;
    int best_i = 0;
#pragma unroll
    for (int i = 0; i < kExperts / 32; ++i)
      if (mine[i] > best) { best = mine[i]; best_i = i; }
    const unsigned key = __float_as_uint(best) ^ (best < 0.f ? 0xffffffffu : 0x80000000u);  // orders like the floats
    const unsigned winner_lane = __ffs(__ballot_sync(0xffffffffu, key == __reduce_max_sync(0xffffffffu, key))) - 1;
    if (lane == static_cast<int>(winner_lane)) {
      ids[j] = (lane + 32 * best_i + salt) % kExperts;
      mine[best_i] = -INFINITY;
    }
  }
}

// The chain's router: warp e computes logit e, then the last block to finish picks the top 8.
constexpr int kRouterBlocks = kExperts / 4;
__global__ void __launch_bounds__(128) router_kernel(const uint4* __restrict__ r, const uint4* __restrict__ x, int salt,
                                                     float* __restrict__ logits, unsigned* __restrict__ ticket, int* __restrict__ ids) {
  pdl_trigger();
  const int e = blockIdx.x * 4 + threadIdx.x / 32;
  const float logit = router_logit(r, x, e);
  if (threadIdx.x % 32 == 0) logits[e] = logit;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  warp_top8(logits, salt, ids);
  if (threadIdx.x == 0) *ticket = 0;
}

// fused: the whole T = 1 layer as ONE cooperative kernel (every block resident), its phases split
// by grid barriers: the router's logits (one warp per expert); barrier; every block picks the top
// 8 itself (one warp, from L2); gate_up (one warp per (pair, channel) item, h to global as bf16);
// then every warp issues its first down row's loads (the weights need only the ids) BEFORE the
// second barrier (down needs all of h); barrier; down (one warp per (pair, output) row,
// atomicAdd into out, zeroed in the first phase). The question it answers: how much of the
// three-kernel chain's time is the launch, ramp and drain between kernels that one kernel, with
// its down loads in flight across the barrier, avoids.
struct GridBarrier {
  unsigned count, generation;
};
__device__ void grid_barrier(GridBarrier* b) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* generation = &b->generation;
    const unsigned gen = *generation;
    __threadfence();  // this block's writes before its arrival
    if (atomicAdd(&b->count, 1u) == gridDim.x - 1) {
      atomicExch(&b->count, 0u);
      __threadfence();
      atomicAdd(&b->generation, 1u);
    } else {
      while (*generation == gen) {}
    }
    __threadfence();  // the other blocks' writes after the release
  }
  __syncthreads();
}

constexpr int kFusedThreads = 256, kFusedWarps = kFusedThreads / 32;

// FP8 experts (e4m3, 128x128 block scales, as FP8 checkpoints ship them): half the bytes of bf16.
// A 16-byte weight chunk holds kElems<FP8> elements; its x (or h) is kElems / 8 bf16 chunks.
template <bool FP8> constexpr int kElems = FP8 ? 16 : 8;
template <bool FP8> constexpr size_t kGateUpExpertBytes = 2 * kInter * kHidden * (FP8 ? 1 : 2);
template <bool FP8> constexpr size_t kDownExpertBytesOf = size_t{kHidden} * kInter * (FP8 ? 1 : 2);
constexpr int kScaleBlock = 128;  // [E, 2I / 128, H / 128] for gate_up, [E, H / 128, I / 128] for down

// 16 e4m3 weights (one chunk) dotted with 16 bf16 values (two chunks), added to acc.
__device__ __forceinline__ float dot16_e4m3(const uint4& w, const uint4& x0, const uint4& x1, float acc) {
  const uint32_t xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  float2 f[8];
  e4m3x16_to_float2(w, f);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    acc = fmaf(f[j].x, __uint_as_float(xs[j] << 16), acc);
    acc = fmaf(f[j].y, __uint_as_float(xs[j] & 0xFFFF0000u), acc);
  }
  return acc;
}

// Weight chunk c (of kElems<FP8> elements) of a row dotted with the matching chunks of x (bf16,
// shared or global memory), scaled by its 128-element block scale for FP8.
template <bool FP8>
__device__ __forceinline__ float chunk_dot(const uint4& w, const uint4* x, int c, const float* scales, float acc) {
  if constexpr (FP8) return fmaf(dot16_e4m3(w, x[2 * c], x[2 * c + 1], 0.f), scales[c * 16 / kScaleBlock], acc);
  else return dot8(w, x[c], acc);
}

// One warp: silu(x . gate row) * (x . up row) of channel i of expert e; 2 chunks per row in flight.
template <bool FP8>
__device__ __forceinline__ float gate_up_item(const uint4* gate_up_w, const float* scales, const uint4* x, int e, int i) {
  constexpr int kChunks = kHidden / kElems<FP8>, L = 2, kScaleCols = kHidden / kScaleBlock;
  const int lane = threadIdx.x % 32;
  const uint4* g = gate_up_w + (e * kGateUpExpertBytes<FP8> + static_cast<size_t>(i) * kChunks * 16) / 16;
  const uint4* u = g + kInter * kChunks;
  const float* g_scales = scales + (e * (2 * kInter / kScaleBlock) + i / kScaleBlock) * kScaleCols;
  const float* u_scales = scales + (e * (2 * kInter / kScaleBlock) + (kInter + i) / kScaleBlock) * kScaleCols;
  float gs = 0.f, us = 0.f;
  for (int c0 = lane; c0 < kChunks; c0 += L * 32) {
    uint4 gv[L], uv[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      gv[l] = g[c0 + l * 32];
      uv[l] = u[c0 + l * 32];
    }
#pragma unroll
    for (int l = 0; l < L; ++l) {
      gs = chunk_dot<FP8>(gv[l], x, c0 + l * 32, g_scales, gs);
      us = chunk_dot<FP8>(uv[l], x, c0 + l * 32, u_scales, us);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    gs += __shfl_xor_sync(0xffffffffu, gs, off);
    us += __shfl_xor_sync(0xffffffffu, us, off);
  }
  return gs / (1.f + __expf(-gs)) * us;
}

// One warp's down row (expert e, output n): kDownRowLoads chunks per lane, the last predicated.
template <bool FP8> constexpr int kDownRowChunks = kInter / kElems<FP8>;
template <bool FP8> constexpr int kDownRowLoads = (kDownRowChunks<FP8> + 31) / 32;
template <bool FP8> __device__ __forceinline__ void load_down_row(const uint4* down_w, int e, int n, uint4 (&v)[kDownRowLoads<FP8>]) {
  const int lane = threadIdx.x % 32;
  const uint4* row = down_w + (e * kDownExpertBytesOf<FP8> + static_cast<size_t>(n) * kDownRowChunks<FP8> * 16) / 16;
#pragma unroll
  for (int l = 0; l < kDownRowLoads<FP8>; ++l)
    v[l] = lane + l * 32 < kDownRowChunks<FP8> ? row[lane + l * 32] : make_uint4(0, 0, 0, 0);
}
// The row's dot product with h (bf16, global: another block wrote it), summed over the warp.
template <bool FP8>
__device__ __forceinline__ float down_row_dot(const uint4 (&v)[kDownRowLoads<FP8>], const uint4* h_row, const float* scales, int e, int n) {
  const int lane = threadIdx.x % 32;
  const float* row_scales = scales + (e * (kHidden / kScaleBlock) + n / kScaleBlock) * (kInter / kScaleBlock);
  uint4 hv[kDownRowLoads<FP8> * kElems<FP8> / 8];
#pragma unroll
  for (int l = 0; l < kDownRowLoads<FP8>; ++l)
#pragma unroll
    for (int k = 0; k < kElems<FP8> / 8; ++k) {
      const int c = lane + l * 32;
      hv[l * (kElems<FP8> / 8) + k] = c < kDownRowChunks<FP8> ? __ldcg(h_row + c * (kElems<FP8> / 8) + k) : make_uint4(0, 0, 0, 0);
    }
  float acc = 0.f;
#pragma unroll
  for (int l = 0; l < kDownRowLoads<FP8>; ++l) {
    const int c = lane + l * 32;
    if (c >= kDownRowChunks<FP8>) break;
    if constexpr (FP8) acc = fmaf(dot16_e4m3(v[l], hv[2 * l], hv[2 * l + 1], 0.f), row_scales[c * 16 / kScaleBlock], acc);
    else acc = dot8(v[l], hv[l], acc);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

template <int MIN_BLOCKS, bool FP8>
__global__ void __launch_bounds__(kFusedThreads, MIN_BLOCKS) fused_kernel(const uint4* __restrict__ gate_up_w, const float* __restrict__ gate_up_scales,
                                                                          const uint4* __restrict__ down_w, const float* __restrict__ down_scales,
                                                                          const uint4* __restrict__ router_w, const uint4* __restrict__ x_global,
                                                                          int salt, float* logits, __nv_bfloat16* h, float* out, GridBarrier* barrier) {
  __shared__ uint4 x[kHidden / 8];
  __shared__ int ids[kTopK];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gw = blockIdx.x * kFusedWarps + warp, warps = gridDim.x * kFusedWarps;
  for (int i = threadIdx.x; i < kHidden / 8; i += kFusedThreads) x[i] = x_global[i];
  for (int i = blockIdx.x * kFusedThreads + threadIdx.x; i < kHidden; i += gridDim.x * kFusedThreads) out[i] = 0.f;
  __syncthreads();
  if (gw < kExperts) {
    const float logit = router_logit(router_w, x, gw);
    if (lane == 0) logits[gw] = logit;
  }
  grid_barrier(barrier);
  if (warp == 0) warp_top8(logits, salt, ids);
  __syncthreads();
  // gate_up: item q = (pair q / I, channel q % I).
  for (int q = gw; q < kTopK * kInter; q += warps) {
    const float v = gate_up_item<FP8>(gate_up_w, gate_up_scales, x, ids[q / kInter], q % kInter);
    if (lane == 0) h[q] = __float2bfloat16(v);
  }
  // down: item d = (pair d % 8, output d / 8), one row; the first item's loads go out before the
  // barrier that waits for h.
  uint4 v[kDownRowLoads<FP8>];
  if (gw < kTopK * kHidden) load_down_row<FP8>(down_w, ids[gw % kTopK], gw / kTopK, v);
  grid_barrier(barrier);
  const uint4* h_rows = reinterpret_cast<const uint4*>(h);
  for (int d = gw; d < kTopK * kHidden; d += warps) {
    const int j = d % kTopK, n = d / kTopK;
    if (d != gw) load_down_row<FP8>(down_w, ids[j], n, v);
    const float acc = down_row_dot<FP8>(v, h_rows + j * (kInter / 8), down_scales, ids[j], n);
    if (lane == 0) atomicAdd(out + n, acc);
  }
}

// The FP8 chain's gate_up and down (the bf16 chain uses rows_kernel and down_kernel<8>): the same
// items as the fused kernel, one launch each, experts from the router's ids after the wait.
// gate_up: block (x, y) = 8 channels of pair y, 6 blocks per SM as ember's bf16 gate_up.
// DOWN_PREFETCH (the "prefetch" section, session 10): block (x, y) also requests slice x of pair
// y's down matrix into the L2 (4 KB cp.async.bulk.prefetch.L2 pieces, one per thread), so down
// reads it from there: 0 never, 1 right after the wait (with its own loads), 2 after its items.
template <int kDownSliceBytes> __device__ __forceinline__ void prefetch_down_slice(const uint4* down_slice) {
  if (threadIdx.x < kDownSliceBytes / 4096)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 4096;" ::"l"(down_slice + threadIdx.x * 256) : "memory");
}
// LATE_TRIGGER (the "coresident" section): trigger the dependents after the wait for the router,
// as ember's gate_up does, so the down kernel may read the router's ids at its start.
template <bool FP8, int DOWN_PREFETCH = 0, bool LATE_TRIGGER = false>
__global__ void __launch_bounds__(256, 6) chain_gate_up_kernel(const uint4* __restrict__ gate_up_w, const float* __restrict__ scales,
                                                               const uint4* __restrict__ x_global, const int* __restrict__ ids,
                                                               __nv_bfloat16* __restrict__ h, const uint4* __restrict__ down_w = nullptr) {
  constexpr int kDownSliceBytes = static_cast<int>(kDownExpertBytesOf<FP8> / (kInter / 8));
  __shared__ uint4 x[kHidden / 8];
  if (!LATE_TRIGGER) pdl_trigger();
  for (int i = threadIdx.x; i < kHidden / 8; i += 256) x[i] = x_global[i];
  pdl_wait();
  if (LATE_TRIGGER) pdl_trigger();
  const int e = ids[blockIdx.y];
  const uint4* down_slice = down_w + (e * kDownExpertBytesOf<FP8> + blockIdx.x * size_t{kDownSliceBytes}) / 16;
  if constexpr (DOWN_PREFETCH == 1) prefetch_down_slice<kDownSliceBytes>(down_slice);
  __syncthreads();
  const int i = blockIdx.x * 8 + threadIdx.x / 32;
  const float v = gate_up_item<FP8>(gate_up_w, scales, x, e, i);
  if (threadIdx.x % 32 == 0) h[blockIdx.y * kInter + i] = __float2bfloat16(v);
  if constexpr (DOWN_PREFETCH == 2) prefetch_down_slice<kDownSliceBytes>(down_slice);
}
// down: block n = output n, warp j = pair j's row; the block adds the 8 in shared memory.
template <bool FP8>
__global__ void __launch_bounds__(256) chain_down_kernel(const uint4* __restrict__ down_w, const float* __restrict__ scales,
                                                         const __nv_bfloat16* __restrict__ h, const int* __restrict__ ids, float* __restrict__ out) {
  __shared__ float partial[kTopK];
  pdl_wait();
  const int j = threadIdx.x / 32, e = ids[j], n = blockIdx.x;
  uint4 v[kDownRowLoads<FP8>];
  load_down_row<FP8>(down_w, e, n, v);
  const float acc = down_row_dot<FP8>(v, reinterpret_cast<const uint4*>(h) + j * (kInter / 8), scales, e, n);
  if (threadIdx.x % 32 == 0) partial[j] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int k = 0; k < kTopK; ++k) sum += partial[k];
    out[n] = sum;
  }
}

// ---- coresident (session 10): down's weights in flight while gate_up streams ---------------------
// The chain's down kernel can only start reading once gate_up's blocks leave the SMs. Here gate_up
// triggers its dependents after its own wait (the router's ids are final), and the down kernel is
// ONE block per SM (128 threads, 32 registers: it fits beside gate_up's 6 blocks of 256 threads at
// 40 registers) that requests its whole share of the 8 experts' down rows (OUTPUTS rows each,
// contiguous) into shared memory with cp.async.bulk as soon as it starts (EARLY) or only after its
// wait for gate_up (not EARLY: the same kernel without the overlap), then waits for gate_up, stages
// h and computes its outputs from shared memory.
template <bool FP8, int OUTPUTS> constexpr uint32_t kCoSliceBytes = OUTPUTS * kInter * (FP8 ? 1 : 2);  // one expert's rows
template <bool FP8, int OUTPUTS, bool EARLY>
__global__ void __launch_bounds__(128, 16) coresident_down_kernel(const uint4* __restrict__ down_w, const float* __restrict__ scales,
                                                                  const __nv_bfloat16* __restrict__ h, const int* __restrict__ ids,
                                                                  float* __restrict__ out) {
  extern __shared__ __align__(128) uint4 rows[];  // [expert j][output o][row chunks]
  __shared__ uint4 hs[kTopK * kInter / 8];          // the 8 pairs' h rows, bf16
  __shared__ __align__(8) uint64_t bar;
  constexpr uint32_t kRowBytes = kInter * (FP8 ? 1 : 2), kSlice = kCoSliceBytes<FP8, OUTPUTS>;
  const int n0 = blockIdx.x * OUTPUTS;
  const auto bar_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const auto request = [&] {
    if (threadIdx.x != 0) return;
    asm volatile(
        "mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
        "fence.mbarrier_init.release.cluster;\n\t"
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(kTopK * kSlice)
        : "memory");
    for (int j = 0; j < kTopK; ++j) {
      const char* src = reinterpret_cast<const char*>(down_w) + __ldcg(ids + j) * kDownExpertBytesOf<FP8> + size_t{kRowBytes} * n0;
      const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(reinterpret_cast<char*>(rows) + j * kSlice));
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
                   "r"(kSlice), "r"(bar_addr)
                   : "memory");
    }
  };
  if (EARLY) request();
  pdl_wait();
  if (!EARLY) request();
  for (int i = threadIdx.x; i < kTopK * kInter / 8; i += 128) hs[i] = __ldcg(reinterpret_cast<const uint4*>(h) + i);
  if (threadIdx.x == 0) {
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{\n\t.reg .pred p;\n\t"
          "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
          "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar_addr) : "memory");
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  constexpr int kChunks = kRowBytes / 16;  // 16-byte chunks per row: 48 FP8, 96 bf16
  for (int o = warp; o < OUTPUTS; o += 4) {
    float acc = 0.f;
    for (int j = 0; j < kTopK; ++j) {
      const uint4* row = rows + (j * kSlice + o * kRowBytes) / 16;
      const float* row_scales = scales + (__ldcg(ids + j) * (kHidden / kScaleBlock) + (n0 + o) / kScaleBlock) * (kInter / kScaleBlock);
      for (int c = lane; c < kChunks; c += 32) {
        if constexpr (FP8) acc = fmaf(dot16_e4m3(row[c], hs[j * kInter / 8 + 2 * c], hs[j * kInter / 8 + 2 * c + 1], 0.f),
                                      row_scales[c * 16 / kScaleBlock], acc);
        else acc = dot8(row[c], hs[j * kInter / 8 + c], acc);
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) out[n0 + o] = acc;
  }
}

// ---- fp8down (session 8): why ember's down_mma_kernel reads FP8 at ~26% of DRAM bandwidth -------
// ncu put ember's FP8 down (12.6 MB at T = 1: 8 experts' [2048, 768] e4m3 rows) at 9.5-10.2 us,
// gate_up_mma at 11.6-12.7 us for twice the bytes. These kernels read the same bytes in three
// patterns, XOR only (no h, no mma), one launch per choice of 8 experts:
//   mma pattern   ember's: 512 blocks of 4 warps, block o = outputs 4o..4o+3 of the 8 experts, warp
//                 w a quarter of each row; thread (g, q) loads 16-byte chunk q of each 64-byte step
//                 of expert g's 4 rows (a warp instruction: 8 rows x 64 bytes), 12 loads per
//                 lane issued together. "ids" reads the experts from global memory first (a
//                 dependent L2 load, as ember reads the router's ids), else from the parameters.
//   row pattern   the same blocks and bytes, but thread t of the block loads chunks t, t + 128, ...
//                 of the block's 8 contiguous 3 KB regions (a warp instruction: 512 contiguous
//                 bytes of one expert's rows).
//   stream        the 8 matrices as one list of 16-byte chunks, grid-stride, L loads per thread
//                 (stream_kernel with the FP8 down matrix size).
// If the row pattern is much faster than the mma pattern, the 64-byte pieces cost DRAM efficiency
// and the mma kernels should stage rows through shared memory (or ldmatrix); if both are as slow,
// the one wave's latency chain is the limit.
// Measured (H200, session 8, graph timing): mma pattern 4.21 us (2.99 TB/s), with ids 4.23, row
// pattern 4.41, stream L4 at 2/4/8 blocks per SM 4.92/4.42/4.16. The access pattern and the ids
// cost nothing: ember's down_mma (9.5-10.2 us under ncu, ~2 us of which ncu adds) loses its time
// after the weights arrive (the wait for gate_up, h's L2 round trip, the conversions, the block
// reduction), not in how it reads them.
constexpr size_t kFp8DownRowChunks = kInter / 16;                                    // 48 per row
constexpr size_t kFp8DownExpertChunks = kHidden * kFp8DownRowChunks;                // 1.5 MB per expert
template <bool IDS>
__global__ void __launch_bounds__(128, 4) fp8_down_mma_pattern(const uint4* __restrict__ down, Chosen c, const int* __restrict__ ids,
                                                                unsigned* __restrict__ out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * 4, s0 = warp * 3;  // 12 steps of 64 bytes per row, 3 per warp
  const int e = IDS ? __ldcg(ids + g) : c.experts[g];
  const uint4* base = down + e * kFp8DownExpertChunks + static_cast<size_t>(n0) * kFp8DownRowChunks + q;
  uint4 v[4][3];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int l = 0; l < 3; ++l) v[r][l] = base[r * kFp8DownRowChunks + 4 * (s0 + l)];
  unsigned acc = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int l = 0; l < 3; ++l) acc ^= v[r][l].x ^ v[r][l].y ^ v[r][l].z ^ v[r][l].w;
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads; practically never true
}

__global__ void __launch_bounds__(128, 4) fp8_down_row_pattern(const uint4* __restrict__ down, Chosen c, unsigned* __restrict__ out) {
  constexpr int kRegion = 4 * kFp8DownRowChunks;  // one expert's 4 rows: 192 chunks, 3 KB
  const int n0 = blockIdx.x * 4;
  uint4 v[12];
#pragma unroll
  for (int i = 0; i < 12; ++i) {
    const int idx = threadIdx.x + 128 * i, region = idx / kRegion;
    v[i] = down[c.experts[region] * kFp8DownExpertChunks + static_cast<size_t>(n0) * kFp8DownRowChunks + idx % kRegion];
  }
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < 12; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  if (acc == 0x12345678u) out[0] = acc;
}

// launch with `smem` bytes of dynamic shared memory and the programmatic-serialization attribute
// when `pdl`.
template <class... Params, class... Args>
void launch_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, bool pdl, Args... args) {
  launch_smem(kernel, grid, block, 0, s, pdl, args...);
}

// Times `launch(stream, chosen)` over the choices (one launch each: other experts, and together
// far more bytes than the L2).
template <class Launch> float time_choices(Launch launch, const std::vector<Chosen>& choices) {
  return time_graph([&](cudaStream_t stream) { for (const Chosen& c : choices) launch(stream, c); }, static_cast<int>(choices.size()));
}

void report(const char* name, float us, size_t bytes = kLaunchBytes) {
  std::printf("%-22s %8.2f us %6.2f TB/s\n", name, us, bytes / us / 1e6);
}

void run_fp8_down(const uint4* down, const std::vector<Chosen>& choices, unsigned* out, int sms);

// Arguments: "fp8down" or "prefetch" runs only that section (sessions 8, 10); none: every section.
int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const bool only_fp8_down = argc > 1 && std::string(argv[1]) == "fp8down";
  const bool only_prefetch = argc > 1 && std::string(argv[1]) == "prefetch";
  uint4 *w = nullptr, *x = nullptr;
  float* h = nullptr;
  CHECK(cudaMalloc(&w, kExperts * kExpertBytes));
  CHECK(cudaMemset(w, 0x3c, kExperts * kExpertBytes));  // small bf16 values
  CHECK(cudaMalloc(&x, kHidden * 2));
  CHECK(cudaMemset(x, 0x3c, kHidden * 2));
  CHECK(cudaMalloc(&h, kTopK * kInter * sizeof(float)));  // gate_up's [8, I] or down's [H] outputs
  uint4* down = nullptr;
  CHECK(cudaMalloc(&down, kExperts * kDownExpertBytes));
  CHECK(cudaMemset(down, 0x3c, kExperts * kDownExpertBytes));
  std::mt19937 rng(0);
  std::vector<Chosen> choices(32);  // 32 launches x 50 MB: 1.6 GB per replay, far above the L2
  for (Chosen& c : choices) {
    std::vector<int> all(kExperts);
    for (int e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + kTopK, c.experts);
  }
  const auto out = reinterpret_cast<unsigned*>(h);
  if (only_fp8_down) {
    std::printf("%s, %d SMs\n", prop.name, sms);
    run_fp8_down(down, choices, out, sms);
    return 0;
  }
  std::printf("%s, %d SMs; Qwen3-30B-A3B gate_up at T = 1: %zu MB per launch\n", prop.name, sms, kLaunchBytes >> 20);
  if (!only_prefetch) {  // the sections before session 10
  for (int blocks_per_sm : {4, 8, 16}) {
    char name[64];
    std::snprintf(name, sizeof name, "stream L4 %d/SM", blocks_per_sm);
    report(name, time_choices([&](cudaStream_t s, const Chosen& c) { stream_kernel<4><<<blocks_per_sm * sms, 256, 0, s>>>(w, c, out); }, choices));
    std::snprintf(name, sizeof name, "stream L8 %d/SM", blocks_per_sm);
    report(name, time_choices([&](cudaStream_t s, const Chosen& c) { stream_kernel<8><<<blocks_per_sm * sms, 256, 0, s>>>(w, c, out); }, choices));
  }
  const auto rows = [&](auto kernel, int warps, const char* name) {
    const dim3 grid((kInter + warps - 1) / warps, kTopK);
    report(name, time_choices([&](cudaStream_t s, const Chosen& c) { kernel<<<grid, warps * 32, 0, s>>>(w, x, c, h, nullptr); }, choices));
  };
  rows(rows_kernel<2, 8, true>, 8, "rows L2 W8 compute");
  rows(rows_kernel<2, 8, true, 6>, 8, "rows L2 W8 cmp 6/SM");  // v3.3's launch bounds (40 registers)
  rows(rows_kernel<2, 8, false>, 8, "rows L2 W8 xor");
  rows(rows_kernel<4, 8, true>, 8, "rows L4 W8 compute");
  rows(rows_kernel<4, 8, false>, 8, "rows L4 W8 xor");
  rows(rows_kernel<8, 8, false>, 8, "rows L8 W8 xor");
  rows(rows_kernel<8, 8, true>, 8, "rows L8 W8 compute");  // a warp's whole 8 KB requested at once
  rows(rows_kernel<8, 4, true>, 4, "rows L8 W4 compute");
  rows(rows_kernel<2, 4, true>, 4, "rows L2 W4 compute");
  rows(rows_kernel<4, 4, true>, 4, "rows L4 W4 compute");
  rows(rows_kernel<4, 16, true>, 16, "rows L4 W16 compute");
  // down: h is any 8 x 768 bf16 rows; x's buffer is too small, so the down weights' first rows serve.
  const auto down_variant = [&](auto kernel, int split, const char* name) {
    const unsigned blocks = kHidden / (8 / split);
    report(name, time_choices([&](cudaStream_t s, const Chosen& c) { kernel<<<blocks, 256, 0, s>>>(down, down, c, h, nullptr); }, choices),
           kDownBytes);
  };
  down_variant(down_kernel<1>, 1, "down S1 (v3.1 layout)");
  down_variant(down_kernel<2>, 2, "down S2");
  down_variant(down_kernel<4>, 4, "down S4");
  down_variant(down_kernel<8>, 8, "down S8");
  }
  // chain: the layer's kernels back to back as ember runs them (router -> gate_up -> down), with
  // and without programmatic dependent launch; and the parts alone, for the gaps between them.
  unsigned* ticket = nullptr;
  int* ids = nullptr;
  float* logits = nullptr;
  CHECK(cudaMalloc(&ticket, sizeof(unsigned)));
  CHECK(cudaMemset(ticket, 0, sizeof(unsigned)));
  CHECK(cudaMalloc(&ids, kTopK * sizeof(int)));
  CHECK(cudaMalloc(&logits, kExperts * sizeof(float)));
  const dim3 gate_up_grid(kInter / 8, kTopK);
  const auto router = [&](cudaStream_t s, const Chosen& c, bool pdl) {
    launch(router_kernel, kRouterBlocks, 128, s, pdl, down, x, c.experts[0], logits, ticket, ids);
  };
  const auto gate_up = [&](cudaStream_t s, const Chosen& c, bool pdl) {
    launch(rows_kernel<2, 8, true, 6>, gate_up_grid, 256, s, pdl, w, x, c, h, ids);
  };
  const auto down_part = [&](cudaStream_t s, const Chosen& c, bool pdl, int split) {
    if (split == 1) launch(down_kernel<1>, kHidden / 8, 256, s, pdl, down, down, c, h, ids);  // grids as in down_variant
    else launch(down_kernel<8>, kHidden, 256, s, pdl, down, down, c, h, ids);
  };
  if (!only_prefetch) {
  report("chain router alone", time_choices([&](cudaStream_t s, const Chosen& c) { router(s, c, false); }, choices), kExperts * kRowBytes);
  report("chain router+gate_up", time_choices([&](cudaStream_t s, const Chosen& c) { router(s, c, false); gate_up(s, c, true); }, choices));
  for (int split : {1, 8})
    for (bool pdl : {false, true}) {
      char name[64];
      std::snprintf(name, sizeof name, "chain 3 kernels S%d%s", split, pdl ? " PDL" : "");
      report(name, time_choices([&](cudaStream_t s, const Chosen& c) {
        router(s, c, false);
        gate_up(s, c, pdl);
        down_part(s, c, pdl, split);
      }, choices), kLaunchBytes + kDownBytes);
    }
  }
  // FP8 experts: the gate_up and down buffers read as e4m3 bytes (0x3c: 1.5), block scales 0.75.
  float *gate_up_scales = nullptr, *down_scales = nullptr;
  const size_t gate_up_scale_count = size_t{kExperts} * (2 * kInter / kScaleBlock) * (kHidden / kScaleBlock);
  const size_t down_scale_count = size_t{kExperts} * (kHidden / kScaleBlock) * (kInter / kScaleBlock);
  CHECK(cudaMalloc(&gate_up_scales, gate_up_scale_count * sizeof(float)));
  CHECK(cudaMemset(gate_up_scales, 0x3f, gate_up_scale_count * sizeof(float)));
  CHECK(cudaMalloc(&down_scales, down_scale_count * sizeof(float)));
  CHECK(cudaMemset(down_scales, 0x3f, down_scale_count * sizeof(float)));
  const auto bf16_h = reinterpret_cast<__nv_bfloat16*>(h);
  float* layer_out = nullptr;
  CHECK(cudaMalloc(&layer_out, kHidden * sizeof(float)));
  constexpr size_t kFp8LayerBytes = kTopK * (kGateUpExpertBytes<true> + kDownExpertBytesOf<true>);  // 37.5 MB
  if (!only_prefetch) {
  report("chain fp8 3 kernels PDL", time_choices([&](cudaStream_t s, const Chosen& c) {
    router(s, c, false);
    launch(chain_gate_up_kernel<true>, gate_up_grid, 256, s, true, w, gate_up_scales, x, ids, bf16_h, down);
    launch(chain_down_kernel<true>, kHidden, 256, s, true, down, down_scales, bf16_h, ids, layer_out);
  }, choices), kFp8LayerBytes);
  report("chain bf16 items PDL", time_choices([&](cudaStream_t s, const Chosen& c) {  // the same kernels, bf16
    router(s, c, false);
    launch(chain_gate_up_kernel<false>, gate_up_grid, 256, s, true, w, gate_up_scales, x, ids, bf16_h, down);
    launch(chain_down_kernel<false>, kHidden, 256, s, true, down, down_scales, bf16_h, ids, layer_out);
  }, choices), kLaunchBytes + kDownBytes);
  }
  if (only_prefetch) {
    // prefetch: the FP8 and bf16 chains above with gate_up's blocks requesting down's rows into
    // the L2 (chain_gate_up_kernel's DOWN_PREFETCH), each in one graph with the plain chain.
    const auto chain_variant = [&](auto gate_up_kernel, auto down_kernel, const char* name, size_t bytes) {
      report(name, time_choices([&](cudaStream_t s, const Chosen& c) {
        router(s, c, false);
        launch(gate_up_kernel, gate_up_grid, 256, s, true, w, gate_up_scales, x, ids, bf16_h, down);
        launch(down_kernel, kHidden, 256, s, true, down, down_scales, bf16_h, ids, layer_out);
      }, choices), bytes);
    };
    if (argc > 2 && std::string(argv[2]) == "coresident") {
      const auto co = [&](auto gate_up_kernel, auto down_kernel, int outputs, uint32_t smem, const char* name, size_t bytes) {
        CHECK(cudaFuncSetAttribute(down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        report(name, time_choices([&](cudaStream_t s, const Chosen& c) {
          router(s, c, false);
          launch(gate_up_kernel, gate_up_grid, 256, s, true, w, gate_up_scales, x, ids, bf16_h, down);
          launch_smem(down_kernel, kHidden / outputs, 128, smem, s, true, down, down_scales, bf16_h, ids, layer_out);
        }, choices), bytes);
      };
      for (int round = 0; round < 2; ++round) {
        chain_variant(chain_gate_up_kernel<true, 0, true>, chain_down_kernel<true>, "fp8 chain late trigger", kFp8LayerBytes);
        co(chain_gate_up_kernel<true, 0, true>, coresident_down_kernel<true, 16, true>, 16, kTopK * kCoSliceBytes<true, 16>,
           "fp8 coresident early", kFp8LayerBytes);
        co(chain_gate_up_kernel<true, 0, true>, coresident_down_kernel<true, 16, false>, 16, kTopK * kCoSliceBytes<true, 16>,
           "fp8 coresident late", kFp8LayerBytes);
        co(chain_gate_up_kernel<true, 0, true>, coresident_down_kernel<true, 8, true>, 8, kTopK * kCoSliceBytes<true, 8>,
           "fp8 co 8 early", kFp8LayerBytes);
        chain_variant(chain_gate_up_kernel<false, 0, true>, chain_down_kernel<false>, "bf16 chain late trigger", kLaunchBytes + kDownBytes);
        co(chain_gate_up_kernel<false, 0, true>, coresident_down_kernel<false, 8, true>, 8, kTopK * kCoSliceBytes<false, 8>,
           "bf16 co 8 early", kLaunchBytes + kDownBytes);
        co(chain_gate_up_kernel<false, 0, true>, coresident_down_kernel<false, 8, false>, 8, kTopK * kCoSliceBytes<false, 8>,
           "bf16 co 8 late", kLaunchBytes + kDownBytes);
        co(chain_gate_up_kernel<false, 0, true>, coresident_down_kernel<false, 4, true>, 4, kTopK * kCoSliceBytes<false, 4>,
           "bf16 co 4 early", kLaunchBytes + kDownBytes);
      }
      return 0;
    }
    for (int round = 0; round < 2; ++round) {
      chain_variant(chain_gate_up_kernel<true, 0>, chain_down_kernel<true>, "fp8 chain", kFp8LayerBytes);
      chain_variant(chain_gate_up_kernel<true, 1>, chain_down_kernel<true>, "fp8 prefetch start", kFp8LayerBytes);
      chain_variant(chain_gate_up_kernel<true, 2>, chain_down_kernel<true>, "fp8 prefetch end", kFp8LayerBytes);
      chain_variant(chain_gate_up_kernel<false, 0>, chain_down_kernel<false>, "bf16 chain", kLaunchBytes + kDownBytes);
      chain_variant(chain_gate_up_kernel<false, 1>, chain_down_kernel<false>, "bf16 prefetch start", kLaunchBytes + kDownBytes);
      chain_variant(chain_gate_up_kernel<false, 2>, chain_down_kernel<false>, "bf16 prefetch end", kLaunchBytes + kDownBytes);
    }
    return 0;
  }
  // fused: one cooperative launch per layer, as many blocks as fit (MIN_BLOCKS per SM requested).
  GridBarrier* barrier = nullptr;
  CHECK(cudaMalloc(&barrier, sizeof(GridBarrier)));
  CHECK(cudaMemset(barrier, 0, sizeof(GridBarrier)));
  const auto fused = [&](auto kernel, const char* name, size_t bytes) {
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedThreads, 0));
    cudaLaunchAttribute cooperative{};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    char label[64];
    std::snprintf(label, sizeof label, "%s (%d/SM)", name, per_sm);
    report(label, time_choices([&](cudaStream_t s, const Chosen& c) {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(per_sm * sms);
      config.blockDim = dim3(kFusedThreads);
      config.stream = s;
      config.attrs = &cooperative;
      config.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<const uint4*>(w), static_cast<const float*>(gate_up_scales),
                               static_cast<const uint4*>(down), static_cast<const float*>(down_scales), static_cast<const uint4*>(down),
                               static_cast<const uint4*>(x), c.experts[0], logits, bf16_h, layer_out, barrier));
    }, choices), bytes);
  };
  fused(fused_kernel<6, false>, "fused bf16", kLaunchBytes + kDownBytes);
  fused(fused_kernel<4, false>, "fused bf16", kLaunchBytes + kDownBytes);
  fused(fused_kernel<6, true>, "fused fp8", kFp8LayerBytes);
  fused(fused_kernel<4, true>, "fused fp8", kFp8LayerBytes);
  CHECK(cudaFree(barrier));
  CHECK(cudaFree(layer_out));
  CHECK(cudaFree(gate_up_scales));
  CHECK(cudaFree(down_scales));
  CHECK(cudaFree(ticket));
  CHECK(cudaFree(ids));
  CHECK(cudaFree(logits));
  CHECK(cudaFree(down));
  CHECK(cudaFree(w));
  CHECK(cudaFree(x));
  CHECK(cudaFree(h));
  return 0;
}

void run_fp8_down(const uint4* down, const std::vector<Chosen>& choices, unsigned* out, int sms) {
  constexpr size_t kBytes = kTopK * kFp8DownExpertChunks * 16;
  std::printf("fp8down: Qwen3-30B-A3B FP8 down at T = 1, %.1f MB per launch\n", kBytes / 1e6);
  int* ids = nullptr;  // each choice's experts, for the "ids" variant
  CHECK(cudaMalloc(&ids, choices.size() * kTopK * sizeof(int)));
  for (size_t i = 0; i < choices.size(); ++i)
    CHECK(cudaMemcpy(ids + i * kTopK, choices[i].experts, kTopK * sizeof(int), cudaMemcpyHostToDevice));
  const unsigned blocks = kHidden / 4;
  report("mma pattern", time_choices([&](cudaStream_t s, const Chosen& c) { fp8_down_mma_pattern<false><<<blocks, 128, 0, s>>>(down, c, nullptr, out); }, choices), kBytes);
  size_t next = 0;  // the choices come in order: each launch reads its own ids
  report("mma pattern ids", time_choices([&](cudaStream_t s, const Chosen& c) {
    fp8_down_mma_pattern<true><<<blocks, 128, 0, s>>>(down, c, ids + (next++ % choices.size()) * kTopK, out);
  }, choices), kBytes);
  report("row pattern", time_choices([&](cudaStream_t s, const Chosen& c) { fp8_down_row_pattern<<<blocks, 128, 0, s>>>(down, c, out); }, choices), kBytes);
  for (int per_sm : {2, 4, 8}) {
    char name[48];
    std::snprintf(name, sizeof name, "stream L4 %d/SM", per_sm);
    report(name, time_choices([&](cudaStream_t s, const Chosen& c) { stream_kernel<4, kFp8DownExpertChunks><<<per_sm * sms, 256, 0, s>>>(down, c, out); }, choices), kBytes);
  }
  CHECK(cudaFree(ids));
}
