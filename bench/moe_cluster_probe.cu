// Can ONE kernel run the whole Qwen3-30B-A3B MoE layer at T = 1 (router, top-8, gate_up, SiLU,
// down, weighted combine) near HBM speed? ember's decode layer is three kernels (router ->
// gate_up -> down, 28.6 us bf16 / 22.8 us FP8 at 75e82a1); the issue asks for 25 / 14 us, and a
// single kernel reading each byte once would take ~2 us + bytes / 4.35 TB/s (bench/stream_probe:
// 75 MB bf16 -> 19 us, 37.7 MB FP8 -> 10.7 us). moe_probe's "fused" kernel (grid barriers over
// a cooperative grid) was slower than the chain; this one has no grid barrier at all:
//   * clusters of 8 blocks; cluster c = (pair j, slice s of the intermediate dimension): blocks =
//     8 pairs x S slices x 8;
//   * every cluster computes the router itself (block r: experts r*E/8 ..; the 512 KB router
//     weight comes from L2 after the first cluster), exchanges the logits through distributed
//     shared memory, and every block picks the top 8 (softmax, renormalised): no dependency on
//     any other cluster;
//   * block r computes I/(8S) channels of h = silu(x.gate) * (x.up) for its slice; the cluster
//     exchanges its slice of h through distributed shared memory (one cluster barrier);
//   * block r then computes outputs r*H/8 .. of its slice's down product (W_down[e][n, slice] . h),
//     weighted, into a partial [pairs*S, H] f32 buffer; the last of the 8*S blocks that wrote an
//     output range (a ticket per range) adds them in a fixed order and writes bf16 (deterministic,
//     no float atomics), and zeroes its ticket for the next launch.
// Variants: bf16 or FP8 experts (e4m3, 128x128 block scales, as checkpoints ship them), S = 2 with
// 512 threads (128 blocks, 1 per SM) or S = 4 with 256 threads (256 blocks, 2 per SM).
// Each launch picks other experts (the chosen ids shifted by a salt), so weights come from HBM;
// the result of salt 0 is checked against a float64 host reference of the same layer.
//
// Measured (H200, 2026-11-30, session 7; every variant matches the reference, err 2.7-2.8e-3):
// the single kernel LOSES to the three-kernel chain. moe_probe's chain in the same call: bf16
// 25.6 us, FP8 22.3 us.
//   v1 (register loads, one step of down rows in flight per warp; its code is in commit f1728a5,
//      v2..v4 below share its router and top-k): bf16 S2 T512 34.2 us, S4 T256
//      43.0; FP8 S4 T256 36.0, S2 T512 47.2 (86 registers: one block per SM, and only 15 clusters
//      of 8 fit at one block per SM on the H200's GPCs: a second wave).
//   v2 (down slab by cp.async.bulk into shared memory, one block per SM): 58-79 us, again 15 of 16
//      clusters of 8 (or 30 of 32 clusters of 4) in the first wave.
//   v3 (slab prefetched into L2 by cp.async.bulk.prefetch, 2 blocks per SM allowed): bf16 38-44,
//      FP8 46-48 us. The breakdown (STOP): returning right after the top-k took 12.3 us (x alone:
//      1.4 us) with the bulk prefetches issued, 6.1 us without any, so the router phase alone
//      (16 clusters reading the same 512 KB, a cluster barrier, one warp's top-8) costs ~4.7 us
//      against the chain's 3.8 us router kernel; a few hundred small bulk operations per block
//      cost ~6 us more.
//   v4 (per-thread prefetch.global.L2, FP8 two channels per batch): bf16 32.9-39.4, FP8 40-44 us.
//      ncu (v4, no prefetch): SM active cycles 56% (FP8) / 68% (bf16) of elapsed, DRAM 20% / 46%;
//      128 blocks land on 120 SMs (two per SM on 8 of them), so those blocks run at half speed
//      and the kernel waits for them; FP8 stalls on shared memory (x as f32, 64 bytes per chunk).
// Not pursued further: the chain keeps its three kernels (src/cuda/moe.cu).
//
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/moe_cluster_probe.cu -o /tmp/moe_cluster_probe && /tmp/moe_cluster_probe
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "probe_bf16.cuh"
#include "probe_timing.cuh"

namespace cg = cooperative_groups;

constexpr int kExperts = 128, kTopK = 8, kInter = 768, kHidden = 2048, kCluster = 8, kScaleBlock = 128;

// Deterministic pseudo-random values, the same on host and device: uniform in [-1, 1).
__host__ __device__ inline float hash_uniform(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.f;
}
__host__ __device__ inline uint16_t bf16_bits(float f) {  // round to nearest even (no NaN here)
  uint32_t u;
  memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline double bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double e4m3_value(uint8_t b) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3))); }

__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = bf16_bits(hash_uniform(i, seed) * scale);
}
__global__ void fill_e4m3(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = __nv_cvt_float_to_fp8(hash_uniform(i, seed) * 4.f, __NV_SATFINITE, __NV_E4M3);
}
__global__ void fill_scales(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = (1.f + 0.5f * hash_uniform(i, seed)) * 0.005f;
}

// 16 e4m3 weights (one chunk) dotted with 16 f32 values, added to acc.
__device__ __forceinline__ float dot16_e4m3(const uint4& w, const float* x, float acc) {
  float2 f[8];
  e4m3x16_to_float2(w, f);
#pragma unroll
  for (int j = 0; j < 8; ++j) acc = fmaf(f[j].y, x[2 * j + 1], fmaf(f[j].x, x[2 * j], acc));
  return acc;
}
// 8 bf16 weights dotted with 8 f32 values.
__device__ __forceinline__ float dot8_f32(const uint4& w, const float* x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), x[2 * i], acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xFFFF0000u), x[2 * i + 1], acc);
  }
  return acc;
}
// A chunk of weights (8 bf16 or 16 e4m3) dotted with the matching f32 values.
template <bool FP8> __device__ __forceinline__ float chunk_dot(const uint4& w, const float* x, float acc) {
  if constexpr (FP8) return dot16_e4m3(w, x, acc);
  else return dot8_f32(w, x, acc);
}

struct LayerArgs {
  const uint4* x;         // [H] bf16
  const uint4* router;    // [E, H] bf16
  const uint4* gate_up;   // [E, 2I, H] bf16 or e4m3
  const float* gu_scale;  // [E, 2I/128, H/128] (FP8)
  const uint4* down;      // [E, H, I]
  const float* d_scale;   // [E, H/128, I/128] (FP8)
  int salt;
  float* partial;         // [pairs * S, H]
  int* smid;              // [blocks]: the SM each block ran on (placement check)
  unsigned* tickets;      // [8] zero
  uint16_t* out;          // [H] bf16
};

// v2: the same layer with what v1's numbers pointed to. v1's down loop had one step of rows in
// flight per warp (8 serial memory round trips per warp) and its FP8 scales were dependent loads.
// Here, as soon as the block knows its expert:
//   * one warp issues bulk copies (cp.async.bulk, the TMA's 1D copies) of the block's whole down
//     slab (kOutputs row segments) into dynamic shared memory, completing on an mbarrier: the
//     slab streams in while gate_up computes, and down reads shared memory;
//   * GU_PREFETCH: the block's gate and up rows are also requested into L2
//     (cp.async.bulk.prefetch.L2), so the whole layer is in flight at once;
//   * clusters of CL blocks (4 or 8): at one block per SM only 15 clusters of 8 fit on the H200's
//     GPCs, and FP8 S2 needs 16.
template <bool FP8, int S, int CL, int THREADS> struct Config2 {
  static constexpr int kWarps = THREADS / 32;
  static constexpr int kElems = FP8 ? 16 : 8;
  static constexpr int kSlice = kInter / S;
  static constexpr int kChannels = kSlice / CL;
  static constexpr int kChannelsPerWarp = kChannels / kWarps;
  static constexpr int kRowChunks = kHidden / kElems;
  static constexpr int kRowLoads = kRowChunks / 32;
  static constexpr int kOutputs = kHidden / CL;
  static constexpr int kOutputsPerWarp = kOutputs / kWarps;
  static constexpr int kSegChunks = kSlice / kElems;
  static constexpr int kSegBytes = kSegChunks * 16;
  static constexpr int kStepRows = 32 / std::gcd(kSegChunks, 32);
  static constexpr int kStepLoads = kStepRows * kSegChunks / 32;
  static constexpr int kSteps = kOutputsPerWarp / kStepRows;
  static constexpr int kRoutersPerBlock = kExperts / CL;
  static constexpr size_t kWeightBytes = FP8 ? 1 : 2;
  static constexpr size_t kSlabBytes = size_t{kOutputs} * kSegBytes;
  static_assert(kChannels % kWarps == 0 && kOutputs % kWarps == 0 && kOutputsPerWarp % kStepRows == 0, "even split");
  static_assert(kRowChunks % 32 == 0 && kSlice % kElems == 0, "layout");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// v3 (SLAB = false): v2 at one block per SM fit 15 clusters of 8 (or 30 of 4), one short of a
// wave. Without the shared-memory slab a block fits twice per SM (MIN_BLOCKS 2), so 16 clusters
// of 8 fit at once; the down slab is requested into L2 (cp.async.bulk.prefetch.L2) as soon as the
// expert is known, and the down loop reads it with register loads, kDownBatch steps at a time.
// STOP (the breakdown): 0 runs the layer; 1 returns right after loading x, 2 after the top-k,
// 3 after gate_up (before the cluster exchange of h).
// PF (v4): how the L2 prefetches are issued: 0 bulk (cp.async.bulk.prefetch.L2, one per row
// segment or 16 KB piece: the breakdown showed ~10 us of them per block, the TMA unit taking them
// one at a time), 1 per thread (prefetch.global.L2, one instruction per 128-byte line, spread
// over the block's threads).
template <bool FP8, int S, int CL, int THREADS, bool GU_PREFETCH, bool SLAB = true, int MIN_BLOCKS = 1, int STOP = 0, int PF = 0>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) cluster_layer_v2(LayerArgs a) {
  using C = Config2<FP8, S, CL, THREADS>;
  extern __shared__ __align__(128) unsigned char slab[];  // [kOutputs][kSegBytes] down weights
  __shared__ __align__(16) float x[kHidden];
  __shared__ float logits[C::kRoutersPerBlock];
  __shared__ __align__(16) float h_own[C::kChannels];
  __shared__ __align__(16) float h[C::kSlice];
  __shared__ float out_part[C::kOutputs];
  __shared__ float d_scales[FP8 ? C::kOutputs / kScaleBlock + 1 : 1][kInter / kScaleBlock];
  __shared__ int chosen[kTopK];
  __shared__ float chosen_w[kTopK];
  __shared__ bool last;
  __shared__ alignas(8) uint64_t slab_ready;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_id = blockIdx.x / CL, pair = cluster_id / S, slice = cluster_id % S;
  if (threadIdx.x == 0) {
    int sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    a.smid[blockIdx.x] = sm;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\tfence.mbarrier_init.release.cluster;" ::"r"(smem_addr(&slab_ready)) : "memory");
  }
  for (int c = threadIdx.x; c < kHidden / 8; c += THREADS) {
    const uint4 v = a.x[c];
    const uint32_t vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[8 * c + 2 * i] = __uint_as_float(vs[i] << 16);
      x[8 * c + 2 * i + 1] = __uint_as_float(vs[i] & 0xFFFF0000u);
    }
  }
  if constexpr (STOP == 1) {
    __syncthreads();
    if (threadIdx.x == 0) a.partial[blockIdx.x] = x[rank];
    return;
  }
  constexpr int kRouterRows = (C::kRoutersPerBlock + C::kWarps - 1) / C::kWarps;
  uint4 rv[kRouterRows][8];
#pragma unroll
  for (int r = 0; r < kRouterRows; ++r) {
    const int slot = warp + r * C::kWarps;
    if (slot < C::kRoutersPerBlock) {
      const int e = rank * C::kRoutersPerBlock + slot;
#pragma unroll
      for (int l = 0; l < 8; ++l) rv[r][l] = a.router[e * (kHidden / 8) + lane + 32 * l];
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRouterRows; ++r) {
    const int slot = warp + r * C::kWarps;
    if (slot >= C::kRoutersPerBlock) break;
    float acc = 0.f;
#pragma unroll
    for (int l = 0; l < 8; ++l) acc = dot8_f32(rv[r][l], x + 8 * (lane + 32 * l), acc);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) logits[slot] = acc;
  }
  cluster.sync();
  if (warp == 0) {
    float l[kExperts / 32];
#pragma unroll
    for (int i = 0; i < kExperts / 32; ++i) {
      const int e = lane + 32 * i;
      l[i] = *cluster.map_shared_rank(&logits[e % C::kRoutersPerBlock], e / C::kRoutersPerBlock);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kExperts / 32; ++i) mx = fmaxf(mx, l[i]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float total = 0.f;
    for (int j = 0; j < kTopK; ++j) {
      float best = -INFINITY;
      int best_i = 0;
#pragma unroll
      for (int i = 0; i < kExperts / 32; ++i)
        if (l[i] > best) { best = l[i]; best_i = i; }
      const unsigned key = __float_as_uint(best) ^ (best < 0.f ? 0xffffffffu : 0x80000000u);
      const unsigned top = __reduce_max_sync(0xffffffffu, key);
      const int winner = __ffs(__ballot_sync(0xffffffffu, key == top)) - 1;
      const int e = __shfl_sync(0xffffffffu, lane + 32 * best_i, winner);
      const float p = expf(__shfl_sync(0xffffffffu, best, winner) - mx);
      if (lane == winner) l[best_i] = -INFINITY;
      if (lane == 0) {
        chosen[j] = (e + a.salt) % kExperts;
        chosen_w[j] = p;
      }
      total += p;
    }
    __syncwarp();
    if (lane < kTopK) chosen_w[lane] /= total;
    // The block's expert is known: its down slab (row segments n_block.. of the slice) goes to
    // shared memory, and (GU_PREFETCH) its gate and up rows to L2.
    const int e = (chosen[pair]);
    const int n_block = rank * C::kOutputs;
    const uint8_t* down_e = reinterpret_cast<const uint8_t*>(a.down) + static_cast<size_t>(e) * kHidden * kInter * C::kWeightBytes +
                            slice * C::kSlice * C::kWeightBytes;
    const uint32_t bar = smem_addr(&slab_ready);
    if (lane == 0 && SLAB) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(static_cast<uint32_t>(C::kSlabBytes)) : "memory");
    __syncwarp();
    for (int r = lane; r < C::kOutputs; r += 32) {
      const void* src = down_e + static_cast<size_t>(n_block + r) * kInter * C::kWeightBytes;
      if constexpr (SLAB)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(slab + r * C::kSegBytes)),
                     "l"(src), "r"(C::kSegBytes), "r"(bar) : "memory");
      else if constexpr (PF == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(C::kSegBytes) : "memory");
    }
    if constexpr (GU_PREFETCH && PF == 0) {
      const int ch0 = slice * C::kSlice + rank * C::kChannels;
      const size_t row_bytes = kHidden * C::kWeightBytes, span = C::kChannels * row_bytes;
      const uint8_t* g = reinterpret_cast<const uint8_t*>(a.gate_up) + (static_cast<size_t>(e) * 2 * kInter + ch0) * row_bytes;
      constexpr size_t kPiece = 16384;
      for (size_t off = lane * kPiece; off < 2 * span; off += 32 * kPiece) {
        const uint8_t* p = off < span ? g + off : g + kInter * row_bytes + (off - span);
        const uint32_t n = static_cast<uint32_t>(min(kPiece, (off < span ? span - off : 2 * span - off)));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
      }
    }
  }
  if constexpr (FP8) {
    __syncthreads();
    const int e = chosen[pair], n_block = rank * C::kOutputs;
    constexpr int kRowsOfScales = C::kOutputs / kScaleBlock + 1;
    for (int i = threadIdx.x; i < kRowsOfScales * (kInter / kScaleBlock); i += THREADS) {
      const int r = i / (kInter / kScaleBlock), col = i % (kInter / kScaleBlock), nb = n_block / kScaleBlock + r;
      d_scales[r][col] = nb < kHidden / kScaleBlock ? a.d_scale[(static_cast<size_t>(e) * (kHidden / kScaleBlock) + nb) * (kInter / kScaleBlock) + col] : 0.f;
    }
  }
  __syncthreads();
  const int e = chosen[pair];
  const float weight = chosen_w[pair];
  if constexpr (PF == 1) {
    // One prefetch per 128-byte line: the down slab's row segments, then the gate and up rows.
    constexpr int kSegLines = (C::kSegBytes + 127) / 128;
    const uint8_t* down_e = reinterpret_cast<const uint8_t*>(a.down) + static_cast<size_t>(e) * kHidden * kInter * C::kWeightBytes +
                            (static_cast<size_t>(rank * C::kOutputs) * kInter + slice * C::kSlice) * C::kWeightBytes;
    if constexpr (!SLAB)
      for (int i = threadIdx.x; i < C::kOutputs * kSegLines; i += THREADS)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(down_e + static_cast<size_t>(i / kSegLines) * kInter * C::kWeightBytes + (i % kSegLines) * 128));
    if constexpr (GU_PREFETCH) {
      const size_t row_bytes = kHidden * C::kWeightBytes, span = C::kChannels * row_bytes;
      const uint8_t* g = reinterpret_cast<const uint8_t*>(a.gate_up) +
                         (static_cast<size_t>(e) * 2 * kInter + slice * C::kSlice + rank * C::kChannels) * row_bytes;
      for (size_t off = threadIdx.x * size_t{128}; off < 2 * span; off += THREADS * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(off < span ? g + off : g + kInter * row_bytes + (off - span)));
    }
  }
  if constexpr (STOP == 2) {
    if (threadIdx.x == 0) a.partial[blockIdx.x] = weight + e;
    cluster.sync();
    return;
  }

  const int ch0 = slice * C::kSlice + rank * C::kChannels;
  const size_t row_bytes = kHidden * C::kWeightBytes;
  const uint4* gate_base = a.gate_up + (static_cast<size_t>(e) * 2 * kInter * row_bytes) / 16;
  // CB channels per batch: FP8 rows are half the bytes, so two channels keep as many in flight.
  constexpr int CB = FP8 && C::kChannelsPerWarp % 2 == 0 ? 2 : 1;
  for (int cw0 = 0; cw0 < C::kChannelsPerWarp; cw0 += CB) {
    uint4 gv[CB][C::kRowLoads], uv[CB][C::kRowLoads];
    float gsc[CB][C::kRowLoads], usc[CB][C::kRowLoads];
#pragma unroll
    for (int b = 0; b < CB; ++b) {
      const int ch = warp + (cw0 + b) * C::kWarps;
      const uint4* g = gate_base + (static_cast<size_t>(ch0 + ch) * row_bytes) / 16;
      const uint4* u = g + (static_cast<size_t>(kInter) * row_bytes) / 16;
#pragma unroll
      for (int l = 0; l < C::kRowLoads; ++l) {
        gv[b][l] = g[lane + 32 * l];
        uv[b][l] = u[lane + 32 * l];
      }
    }
    if constexpr (FP8) {
      constexpr int cols = kHidden / kScaleBlock;
#pragma unroll
      for (int b = 0; b < CB; ++b) {
        const int ch = warp + (cw0 + b) * C::kWarps;
        const float* gs_row = a.gu_scale + (static_cast<size_t>(e) * (2 * kInter / kScaleBlock) + (ch0 + ch) / kScaleBlock) * cols;
        const float* us_row = a.gu_scale + (static_cast<size_t>(e) * (2 * kInter / kScaleBlock) + (kInter + ch0 + ch) / kScaleBlock) * cols;
#pragma unroll
        for (int l = 0; l < C::kRowLoads; ++l) {
          gsc[b][l] = __ldg(gs_row + (lane + 32 * l) * C::kElems / kScaleBlock);
          usc[b][l] = __ldg(us_row + (lane + 32 * l) * C::kElems / kScaleBlock);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < CB; ++b) {
      const int ch = warp + (cw0 + b) * C::kWarps;
      float gs = 0.f, us = 0.f;
#pragma unroll
      for (int l = 0; l < C::kRowLoads; ++l) {
        const float* xc = x + (lane + 32 * l) * C::kElems;
        if constexpr (FP8) {
          gs = fmaf(chunk_dot<FP8>(gv[b][l], xc, 0.f), gsc[b][l], gs);
          us = fmaf(chunk_dot<FP8>(uv[b][l], xc, 0.f), usc[b][l], us);
        } else {
          gs = chunk_dot<FP8>(gv[b][l], xc, gs);
          us = chunk_dot<FP8>(uv[b][l], xc, us);
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        gs += __shfl_xor_sync(0xffffffffu, gs, off);
        us += __shfl_xor_sync(0xffffffffu, us, off);
      }
      if (lane == 0) h_own[ch] = gs / (1.f + expf(-gs)) * us;
    }
  }
  if constexpr (STOP == 3) {
    __syncthreads();
    if (threadIdx.x == 0) a.partial[blockIdx.x] = h_own[0];
    cluster.sync();
    return;
  }
  cluster.sync();
  for (int i = threadIdx.x; i < C::kSlice; i += THREADS) h[i] = *cluster.map_shared_rank(&h_own[i % C::kChannels], i / C::kChannels);
  if constexpr (SLAB) {
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                   : "=r"(done) : "r"(smem_addr(&slab_ready)) : "memory");
  }
  __syncthreads();
  const int n_block = rank * C::kOutputs, r_warp = warp * C::kOutputsPerWarp;
  const uint8_t* down_g = reinterpret_cast<const uint8_t*>(a.down) + static_cast<size_t>(e) * kHidden * kInter * C::kWeightBytes +
                          (static_cast<size_t>(n_block) * kInter + slice * C::kSlice) * C::kWeightBytes;
  constexpr int kDownBatch = SLAB ? 1 : 4;  // steps whose loads are issued together
  static_assert(C::kSteps % kDownBatch == 0, "whole batches");
  for (int step0 = 0; step0 < C::kSteps; step0 += kDownBatch) {
    uint4 batch[kDownBatch][C::kStepLoads];
#pragma unroll
    for (int b = 0; b < kDownBatch; ++b)
#pragma unroll
      for (int l = 0; l < C::kStepLoads; ++l) {
        const int q = lane + 32 * l, row = q / C::kSegChunks, c = q % C::kSegChunks;
        const int r = r_warp + (step0 + b) * C::kStepRows + row;
        batch[b][l] = SLAB ? *reinterpret_cast<const uint4*>(slab + r * C::kSegBytes + c * 16)
                           : *reinterpret_cast<const uint4*>(down_g + static_cast<size_t>(r) * kInter * C::kWeightBytes + c * 16);
      }
#pragma unroll
  for (int b = 0; b < kDownBatch; ++b) {
    const int step = step0 + b;
    float acc[C::kStepRows] = {};
#pragma unroll
    for (int l = 0; l < C::kStepLoads; ++l) {
      const int q = lane + 32 * l, row = q / C::kSegChunks, c = q % C::kSegChunks;
      const int r = r_warp + step * C::kStepRows + row;
      const uint4 v = batch[b][l];
      float d = chunk_dot<FP8>(v, h + c * C::kElems, 0.f);
      if constexpr (FP8) d *= d_scales[(n_block + r) / kScaleBlock - n_block / kScaleBlock][(slice * C::kSlice + c * C::kElems) / kScaleBlock];
#pragma unroll
      for (int rr = 0; rr < C::kStepRows; ++rr) acc[rr] += rr == row ? d : 0.f;
    }
#pragma unroll
    for (int rr = 0; rr < C::kStepRows; ++rr) {
      float v2 = acc[rr];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v2 += __shfl_xor_sync(0xffffffffu, v2, off);
      if (lane == 0) out_part[r_warp + step * C::kStepRows + rr] = v2 * weight;
    }
  }
  }
  __syncthreads();
  float* my_partial = a.partial + static_cast<size_t>(cluster_id) * kHidden + n_block;
  for (int i = threadIdx.x; i < C::kOutputs; i += THREADS) my_partial[i] = out_part[i];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&a.tickets[rank], 1u) == kTopK * S - 1;
  __syncthreads();
  if (last) {
    __threadfence();
    for (int i = threadIdx.x; i < C::kOutputs; i += THREADS) {
      float sum = 0.f;
      for (int p = 0; p < kTopK * S; ++p) sum += __ldcg(a.partial + static_cast<size_t>(p) * kHidden + n_block + i);
      a.out[n_block + i] = bf16_bits(sum);
    }
    if (threadIdx.x == 0) a.tickets[rank] = 0;
  }
  cluster.sync();
}

// float64 reference of the layer at salt 0.
std::vector<double> reference(bool fp8, const std::vector<uint16_t>& x, const std::vector<uint16_t>& router, const uint8_t* gu_dev,
                              const float* gus_dev, const uint8_t* down_dev, const float* ds_dev) {
  std::vector<double> logits(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    double s = 0;
    for (int k = 0; k < kHidden; ++k) s += bf16_value(router[static_cast<size_t>(e) * kHidden + k]) * bf16_value(x[k]);
    logits[e] = s;
  }
  std::vector<int> order(kExperts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int p, int q) { return logits[p] > logits[q]; });
  double total = 0;
  std::vector<double> w(kTopK);
  for (int j = 0; j < kTopK; ++j) total += w[j] = std::exp(logits[order[j]] - logits[order[0]]);
  std::vector<double> out(kHidden, 0.0);
  const size_t wb = fp8 ? 1 : 2;
  for (int j = 0; j < kTopK; ++j) {
    const int e = order[j];
    std::vector<uint8_t> gu(2 * kInter * kHidden * wb), dn(static_cast<size_t>(kHidden) * kInter * wb);
    CHECK(cudaMemcpy(gu.data(), gu_dev + e * gu.size(), gu.size(), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(dn.data(), down_dev + e * dn.size(), dn.size(), cudaMemcpyDeviceToHost));
    std::vector<float> gus, ds;
    if (fp8) {
      gus.resize((2 * kInter / kScaleBlock) * (kHidden / kScaleBlock));
      ds.resize((kHidden / kScaleBlock) * (kInter / kScaleBlock));
      CHECK(cudaMemcpy(gus.data(), gus_dev + e * gus.size(), gus.size() * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(ds.data(), ds_dev + e * ds.size(), ds.size() * 4, cudaMemcpyDeviceToHost));
    }
    const auto val = [&](const std::vector<uint8_t>& m, size_t idx) {
      if (fp8) return e4m3_value(m[idx]);
      uint16_t b;
      std::memcpy(&b, &m[2 * idx], 2);
      return bf16_value(b);
    };
    std::vector<double> h(kInter);
    for (int i = 0; i < kInter; ++i) {
      double g = 0, u = 0;
      for (int k = 0; k < kHidden; ++k) {
        const double xs = bf16_value(x[k]);
        double gw = val(gu, static_cast<size_t>(i) * kHidden + k), uw = val(gu, static_cast<size_t>(kInter + i) * kHidden + k);
        if (fp8) {
          gw *= gus[(i / kScaleBlock) * (kHidden / kScaleBlock) + k / kScaleBlock];
          uw *= gus[((kInter + i) / kScaleBlock) * (kHidden / kScaleBlock) + k / kScaleBlock];
        }
        g += gw * xs;
        u += uw * xs;
      }
      h[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int n = 0; n < kHidden; ++n) {
      double s = 0;
      for (int i = 0; i < kInter; ++i) {
        double dw = val(dn, static_cast<size_t>(n) * kInter + i);
        if (fp8) dw *= ds[(n / kScaleBlock) * (kInter / kScaleBlock) + i / kScaleBlock];
        s += dw * h[i];
      }
      out[n] += w[j] / total * s;
    }
  }
  return out;
}

int main(int argc, char** argv) {
  // Only the variants whose names contain one of the arguments (all without arguments).
  const auto wanted = [&](const char* name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strstr(name, argv[i])) return true;
    return false;
  };
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t gu_count = size_t{kExperts} * 2 * kInter * kHidden, down_count = size_t{kExperts} * kHidden * kInter;
  const size_t gus_count = size_t{kExperts} * (2 * kInter / kScaleBlock) * (kHidden / kScaleBlock);
  const size_t ds_count = size_t{kExperts} * (kHidden / kScaleBlock) * (kInter / kScaleBlock);
  uint8_t *gu = nullptr, *down = nullptr;
  uint16_t *x = nullptr, *router = nullptr, *out = nullptr;
  float *gus = nullptr, *ds = nullptr, *partial = nullptr;
  unsigned* tickets = nullptr;
  int* smid = nullptr;
  CHECK(cudaMalloc(&smid, 1024 * sizeof(int)));
  CHECK(cudaMalloc(&gu, gu_count * 2));
  CHECK(cudaMalloc(&down, down_count * 2));
  CHECK(cudaMalloc(&gus, gus_count * 4));
  CHECK(cudaMalloc(&ds, ds_count * 4));
  CHECK(cudaMalloc(&x, kHidden * 2));
  CHECK(cudaMalloc(&router, size_t{kExperts} * kHidden * 2));
  CHECK(cudaMalloc(&out, kHidden * 2));
  CHECK(cudaMalloc(&partial, size_t{kTopK} * 8 * kHidden * 4));
  CHECK(cudaMalloc(&tickets, kCluster * 4));
  CHECK(cudaMemset(tickets, 0, kCluster * 4));
  fill_bf16<<<1024, 256>>>(x, kHidden, 1, 1.f);
  fill_bf16<<<1024, 256>>>(router, size_t{kExperts} * kHidden, 2, 0.05f);
  fill_scales<<<1024, 256>>>(gus, gus_count, 5);
  fill_scales<<<1024, 256>>>(ds, ds_count, 6);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> x_host(kHidden), router_host(size_t{kExperts} * kHidden);
  CHECK(cudaMemcpy(x_host.data(), x, kHidden * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(router_host.data(), router, router_host.size() * 2, cudaMemcpyDeviceToHost));
  std::printf("%s, %d SMs; Qwen3-30B-A3B MoE layer at T = 1 as one kernel of 8-block clusters\n", prop.name, prop.multiProcessorCount);
  std::printf("%-26s %8s %7s %9s %8s\n", "variant", "us", "TB/s", "clusters", "err");
  constexpr int kLaunches = 32;  // salts 0..31: other experts each launch
  for (const bool fp8 : {false, true}) {
    if (fp8) {
      fill_e4m3<<<4096, 256>>>(gu, gu_count, 3);
      fill_e4m3<<<4096, 256>>>(down, down_count, 4);
    } else {
      fill_bf16<<<4096, 256>>>(reinterpret_cast<uint16_t*>(gu), gu_count, 3, 0.05f);
      fill_bf16<<<4096, 256>>>(reinterpret_cast<uint16_t*>(down), down_count, 4, 0.05f);
    }
    CHECK(cudaDeviceSynchronize());
    const std::vector<double> ref = reference(fp8, x_host, router_host, gu, gus, down, ds);
    double ref_max = 0;
    for (double v : ref) ref_max = std::max(ref_max, std::fabs(v));
    const double bytes = kTopK * 3.0 * kInter * kHidden * (fp8 ? 1 : 2) + kExperts * kHidden * 2.0;
    const auto variant2 = [&](auto kernel, int s, int cl, size_t slab, const char* name, int threads = 512) {
      const int blocks = kTopK * s * cl;
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(slab)));
      cudaLaunchAttribute cluster_dims{};
      cluster_dims.id = cudaLaunchAttributeClusterDimension;
      cluster_dims.val.clusterDim.x = cl;
      cluster_dims.val.clusterDim.y = 1;
      cluster_dims.val.clusterDim.z = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(blocks);
      config.blockDim = dim3(threads);
      config.dynamicSmemBytes = slab;
      config.attrs = &cluster_dims;
      config.numAttrs = 1;
      int clusters = 0;
      CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
      LayerArgs args{reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(router), reinterpret_cast<const uint4*>(gu), gus,
                     reinterpret_cast<const uint4*>(down), ds, 0, partial, smid, tickets, out};
      if (!wanted(name)) return;
      const CheckedTime r = check_and_time([&](int copy, cudaStream_t st) {
        args.salt = (copy + 1) % kLaunches;
        config.stream = st;
        CHECK(cudaLaunchKernelEx(&config, kernel, args));
      }, kLaunches, out, kHidden, ref, ref_max);
      std::vector<int> sms(blocks);
      CHECK(cudaMemcpy(sms.data(), smid, blocks * sizeof(int), cudaMemcpyDeviceToHost));
      std::sort(sms.begin(), sms.end());
      const auto distinct = std::unique(sms.begin(), sms.end()) - sms.begin();
      std::printf("%-26s %8.2f %7.2f %4d of %2d %8.1e %4d SMs\n", name, r.us, bytes / r.us / 1e6, clusters, blocks / cl, r.err,
                  static_cast<int>(distinct));
    };
    if (fp8) {
      variant2(cluster_layer_v2<true, 2, 8, 256, false, false, 2, 2, 2>, 2, 8, 0, "fp8 T256 stop topk", 256);
      variant2(cluster_layer_v2<true, 2, 8, 256, false, false, 2, 3, 2>, 2, 8, 0, "fp8 T256 stop gate_up", 256);
      variant2(cluster_layer_v2<true, 2, 8, 256, false, false, 2, 0, 2>, 2, 8, 0, "v4 fp8 T256 no pf", 256);
    } else {
      variant2(cluster_layer_v2<false, 2, 8, 256, false, false, 2, 2, 2>, 2, 8, 0, "bf16 T256 stop topk", 256);
      variant2(cluster_layer_v2<false, 2, 8, 256, false, false, 2, 3, 2>, 2, 8, 0, "bf16 T256 stop gate_up", 256);
      variant2(cluster_layer_v2<false, 2, 8, 256, false, false, 2, 0, 2>, 2, 8, 0, "v4 bf16 T256 no pf", 256);
    }
  }
  return 0;
}
