// grouped_mm and scaled_grouped_mm on CUDA. Offsets never leave the device:
//   prep_kernel   one block: sanitises the cumulative end offsets (running max, clamped to the
//                 jagged extent), lists the non-empty groups, and maps each row tile of the
//                 launch (ceil(rows/BM) + G tiles: at most one partial tile per group) to its
//                 (group, first row), or -1 for a tile left over. BM is the launch's tile height.
//   decode_kernel few rows per group (MoE decode: T*top_k rows over many experts; at most one
//                 per group on average, or 8 of one group, where mma_tile_kernel applies, else
//                 8 per group): block y takes the y-th non-empty group and stages up to 4 of its
//                 rows at a time in shared memory; each of its 8 warps streams one output column's
//                 weight row once in whole batches of loads of 8 elements (16 bytes, or 8 for
//                 FP8, decoded through the hardware fp8x2 converter; 8 such loads per lane and
//                 batch beside 16-bit activations) and dots it with the staged rows (v3, below).
//   mma_tile_kernel  prefill, bf16/f16 activations unit-stride along K with weights of the same
//                 type or FP8, also unit-stride along K (the [G, N, K] checkpoint layout seen as
//                 its [G, K, N] transpose). A BM x 128 output tile per block of 8 warps
//                 (BM 16/32/64/128, picked on the host from rows per group and the SM count),
//                 K in steps of 64: both operands stream global -> shared with 16-byte cp.async
//                 through a 3-4 stage pipeline (rows past the group's end, columns past N and K
//                 past its end are zero-filled, never read), XOR-swizzled shared tiles read by
//                 ldmatrix without bank conflicts, mma.sync m16n8k16 with f32 accumulation. FP8
//                 weights stream raw (cp.async too) and each stage is decoded exactly to the
//                 activations' type in shared memory; a 128x128 block scale is one number per
//                 (tile, K step) and multiplies that step's f32 partial sums, so the decoded
//                 weights are never rounded. The epilogue applies per-row / per-channel scales
//                 and writes f32/f16/bf16 with the output strides (pairs where contiguous).
//   tiled_kernel  the fallback for everything else (f32, FP8 activations, layouts that are not
//                 unit-stride along K or not 16-byte aligned, EMBER_DISABLE_FAST_PATHS=1):
//                 64x64 output tiles, K in steps of 32 through shared memory, bf16/f16 on tensor
//                 cores (wmma, f32 accumulation), f32 with FMA; FP8 weights are staged as
//                 decoded codes (128x128 block scales: applied in f32 to each K step's partial
//                 product on tensor cores, to the staged f32 value with FMA), per-tensor and
//                 per-channel scales in the epilogue.
//   batch_kernel  2D x 2D (K jagged) and 3D x 3D: one grid layer per group, same tiles.
// 3D x 2D runs as the rows form of the transposed problem (out^T = B^T @ A[g]^T).
//
// Versions of the prefill tile kernel (H200, Qwen3.5-35B-A3B gate_up: E=256, K=2048,
// N=1024, T*top_k = 4096 rows at T=512; torch._grouped_mm 340 us):
//   v1  tiled_kernel: scalar loads staged through shared memory, no pipelining, wmma:
//       3271 us (3-10x slower than torch for T >= 16)
//   v2  mma_tile_kernel (cp.async pipeline, ldmatrix, mma.sync): grouped_mm alone at T=512
//       298 us bf16 (torch 333), 301 us FP8 (torch 356); the MoE layer 1.3-1.6x torch at T=64
//       and 1.15-1.39x at T=512, except LFM2 (E=32, 1792 wide) at T=512: 0.79x grouped_mm bf16,
//       0.68x FP8 (docs/PERF.md, 66a513c). Session 27 (the MoE layer's gate and up as one product
//       of N = 2I): LFM2 T=512 FP8 gate 144.6 + up 144.2 us -> 244.5 (ncu).
//   Rejected in session 27 (H200, one build, a host switch, two alternating runs of moe_bench):
//   - FP8: stage kt + 1 decoded into a second tile while stage kt multiplies (one barrier per K
//     step, not two): T=64 Qwen3-30B-A3B 315.3-315.9 -> 319.2-320.1 us, T=512 within +-1%.
//   - The MoE gate_up fused here (A's rows gathered through the permuted token ids; a SwiGLU form,
//     64 gate and the matching 64 up columns per tile, silu(gate) * up in the epilogue): T=512
//     LFM2 bf16 489 -> 543 us against the unfused layer of that build, and its changes to this
//     kernel (row pointers per thread, a column map) took grouped_mm LFM2 T=512 bf16 204 -> 329 us
//     (branch s27-fused; a retry should keep the plain kernel's code as it is).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <algorithm>
#include <climits>

#include "backend.h"
#include "cuda/grouped_mm.h"
#include "cuda/mma.cuh"
#include "cuda/moe_elements.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace gmm {
namespace {

// ---- prep ------------------------------------------------------------------------------------------
constexpr int kPrepThreads = 1024;  // one thread per group: G <= 1024

// Inclusive scan over the block's 1024 threads: within each warp by shuffles, then across the 32
// warp totals by warp 0 (3 barriers; the shared-memory doubling scan before took 20, and prep's
// three scans made it a 5.7 us kernel in session 27's ncu). buf holds 32 ints.
template <class Op> __device__ int block_inclusive_scan(int v, int* buf, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v = op(v, other);
  }
  if (lane == 31) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int total = buf[lane];
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total = op(total, other);
    }
    buf[lane] = total;
  }
  __syncthreads();
  if (warp > 0) v = op(v, buf[warp - 1]);
  __syncthreads();  // buf is free for the next scan
  return v;
}

struct MaxOp { __device__ int operator()(int a, int b) const { return a > b ? a : b; } };
struct SumOp { __device__ int operator()(int a, int b) const { return a + b; } };

// offs nullptr: one group ending at `extent`. bm 0: no tile map (tile_map unused).
__global__ void __launch_bounds__(kPrepThreads) prep_kernel(const int32_t* __restrict__ offs, int groups, int extent, int bm,
                                                            int32_t* __restrict__ ends, int32_t* __restrict__ active,
                                                            int32_t* __restrict__ num_active, int32_t* __restrict__ tile_map,
                                                            int map_len) {
  static_assert(kPrepThreads == 32 * 32, "block_inclusive_scan: 32 warps of 32");
  __shared__ int buf[32];
  __shared__ int end_of[kPrepThreads];
  const int g = threadIdx.x;
  const bool in = g < groups;
  const int raw = in ? (offs ? offs[g] : extent) : 0;
  const int running = block_inclusive_scan(in ? max(raw, 0) : 0, buf, MaxOp());
  const int end = min(running, extent);
  end_of[g] = end;
  __syncthreads();
  const int start = g == 0 ? 0 : end_of[g - 1];
  if (in) ends[g] = end;
  const int nonempty = in && end > start ? 1 : 0;
  const int active_incl = block_inclusive_scan(nonempty, buf, SumOp());
  if (nonempty) active[active_incl - 1] = g;
  if (g == kPrepThreads - 1) *num_active = active_incl;
  const int tiles = nonempty && bm > 0 ? (end - start + bm - 1) / bm : 0;
  const int tiles_incl = block_inclusive_scan(tiles, buf, SumOp());
  for (int j = 0; j < tiles; ++j) {
    const int slot = tiles_incl - tiles + j;
    tile_map[2 * slot] = g;
    tile_map[2 * slot + 1] = start + j * bm;
  }
  __shared__ int total_tiles;
  if (g == kPrepThreads - 1) total_tiles = tiles_incl;
  __syncthreads();
  for (int i = total_tiles + g; i < map_len; i += kPrepThreads) tile_map[2 * i] = -1;
}

// ---- decode ----------------------------------------------------------------------------------------
// Decode v2 (session 15): the group's rows staged in shared memory, up to kDecodePassRows per
// pass (fewer when K is long; the host takes this kernel only where one row fits
// kDecodeStageBytes), and each lane's weight loads issued as whole raw batches (kDecodeLoads chunks
// of 8 elements) before any is used, as the MoE decode kernels do (moe.cu v3). The row loop inside
// a chunk is unrolled over R (1, 2 or 4 >= the pass's rows; rows past them repeat the last), so no
// branch separates a batch's loads. v1 loaded one chunk of 8 weights per lane and consumed it at
// once, reading the activations from L2 inside the loop, with 2 or 8 columns per block. Measured
// in one build (v1 behind a temporary switch), alternating runs of moe_bench, grouped_mm alone,
// H200, us, v1 -> v2: Qwen3-30B-A3B T=1 bf16 28.64-28.83 -> 22.77-22.86, FP8 31.39-31.49 -> 22.03,
// T=4 76.5 -> 57.7 / 88.0 -> 58.8, T=16 251.9 -> 169.4 / 258.1 -> 175.5; Qwen3.5-35B-A3B T=1
// 23.01-23.11 -> 18.43-18.44 / 25.16-25.28 -> 17.93-17.94, T=16 183.4 -> 132.2 / 205.5 -> 136.2;
// LFM2-8B-A1B T=1 29.95-29.98 -> 25.89-25.92 / 35.04-35.06 -> 24.43-24.48, T=4 83.1 -> 66.2 /
// 96.5 -> 64.4 (its T=16, 64 rows over 32 experts, takes the tiles).
// Decode v3 (session 16): batches of 8 chunks per lane for 1- and 2-byte weights, where v2 had 4.
// An FP8 chunk is one 8-byte load, so v2's lanes had 32 bytes in flight (bf16 64) and grouped_mm
// with FP8 weights trailed bf16 from T = 4 on. Whole batches stay spill-free (sm_90a); a K shorter
// than a batch (the down projection, K = 768: 96 chunks) is one predicated batch. Measured in one
// build (v2 behind a temporary switch), alternating runs of moe_bench twice, grouped_mm alone,
// H200, us, v2 -> v3: Qwen3-30B-A3B T=1 bf16 22.80 -> 21.86-21.96, FP8 22.02 -> 19.59; T=4 57.6
// -> 56.5 / 58.8 -> 49.6; T=8 99.0 -> 95.7 / 101.5 -> 85.2; T=16 169.4 -> 163.0 / 175.7 -> 148.6;
// Qwen3.5-35B-A3B T=16 132.2 -> 128.6 / 136.2 -> 114.1; LFM2-8B-A1B T=1 25.9 -> 23.8 / 24.4 ->
// 21.6, T=8 104.1 -> 96.3 / 104.9 -> 88.8, T=16 (the tiles) unchanged.
// Not taken (session 16, branch s16-gmm-f32-stage): the rows staged as f32 (converted once per
// block instead of per warp and chunk). One build, a temporary switch, alternating runs twice (us,
// v3 -> f32): Qwen3-30B-A3B T=1 bf16 21.99 -> 26.72, FP8 19.69 -> 21.69; T=16 162.8-163.2 -> 224.3,
// 149.3-149.4 -> 191.7; LFM2-8B-A1B T=8 96.0-96.2 -> 133.0-133.4: twice the shared-memory bytes
// per chunk cost more than the conversions saved.
constexpr int kDecodePassRows = 4;
constexpr int kDecodeStageBytes = 48 * 1024;
// f32 activations keep v2's 4 (with FP8 weights: at 8 the batch loops spill under the 80-register cap).
template <class AT, class BT> constexpr int kDecodeLoads = sizeof(BT) == 4 ? 2 : (sizeof(AT) == 4 ? 4 : 8);

// One warp: out rows [r0, r0 + nr) (nr <= R) of column n; the rows staged in shared memory at
// `rows`, rows_rs apart.
template <int R, class AT, class BT, class OT>
__device__ __forceinline__ void decode_column(const RowsProblem& p, const AT* rows, int rows_rs, int nr, int64_t r0, int g, int64_t n,
                                              const BT* w) {
  constexpr int L = kDecodeLoads<AT, BT>;
  const int lane = threadIdx.x % 32;
  const int chunks = static_cast<int>(p.k / 8), batched = chunks / (L * 32) * (L * 32);
  // Block scales (FP8 weights only) as this column's row of them and a stride: one per 128
  // elements, 16 chunks. (The generic per-chunk lookup kept 64-bit index math in the loop.)
  const bool blocks = std::is_same_v<BT, E4m3> && p.scale_b.kind == WeightScale::Block128;
  const float* scales = blocks ? p.scale_b.ptr + block_scale_offset(g, n, 0, p.scale_b.s0, p.scale_b.s1, p.scale_b.s2) : nullptr;
  const int64_t scale_step = p.scale_b.s2;
  float acc[R] = {};
  const auto add_chunk = [&](const Raw8<BT>& raw, int c) {
    float wf[8];
    unpack8(raw, wf);
    const float bs = blocks ? scales[c / (kScaleBlock / 8) * scale_step] : 1.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float af[8];
      load8(rows + min(r, nr - 1) * rows_rs + c * 8, af);
      acc[r] = fmaf(dot8(af, wf, 0.f), bs, acc[r]);
    }
  };
  for (int c0 = lane; c0 < batched; c0 += L * 32) {  // whole batches: every load issued before the first use
    Raw8<BT> wr[L];
#pragma unroll
    for (int l = 0; l < L; ++l) wr[l] = load_raw8(w + (c0 + l * 32) * 8);
#pragma unroll
    for (int l = 0; l < L; ++l) add_chunk(wr[l], c0 + l * 32);
  }
  if (batched + lane < chunks) {  // one predicated batch for the rest
    const int c0 = batched + lane;
    Raw8<BT> wr[L];
#pragma unroll
    for (int l = 0; l < L; ++l) wr[l] = c0 + l * 32 < chunks ? load_raw8(w + (c0 + l * 32) * 8) : Raw8<BT>{};
#pragma unroll
    for (int l = 0; l < L; ++l)
      if (c0 + l * 32 < chunks) add_chunk(wr[l], c0 + l * 32);
  }
  for (int64_t kk = int64_t{chunks} * 8 + lane; kk < p.k; kk += 32) {  // K % 8
    const float wv = to_f(w[kk]) * (blocks ? scales[kk / kScaleBlock * scale_step] : 1.f);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = fmaf(to_f(rows[min(r, nr - 1) * rows_rs + kk]), wv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  if (lane < nr) {
    float v = acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r)
      if (lane == r) v = acc[r];
    const int64_t out_row = r0 + lane;
    if (p.scale_a) v *= p.scale_a[p.scale_a_rows ? out_row : 0];
    v *= column_scale(p.scale_b, g, n);
    static_cast<OT*>(p.out)[out_row * p.o_rs + n * p.o_ns] = from_f<OT>(v);
  }
}

template <class AT, class BT, class OT>
__global__ void __launch_bounds__(256, 3) decode_kernel(RowsProblem p, const int32_t* __restrict__ ends, const int32_t* __restrict__ active,
                                                     const int32_t* __restrict__ num_active, int stage_rows, int stage_rs) {
  extern __shared__ __align__(16) unsigned char decode_staged[];
  int g = 0;
  int64_t s = 0, e = p.rows;
  if (ends) {  // offs given: the y-th non-empty group
    if (static_cast<int>(blockIdx.y) >= *num_active) return;  // the whole block
    g = active[blockIdx.y];
    s = g == 0 ? 0 : ends[g - 1];
    e = ends[g];
  }
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const bool has_column = n < p.n;  // warps past N still take part in the staging
  const auto* a = static_cast<const AT*>(p.a);
  const BT* w = static_cast<const BT*>(p.b) + g * p.b_gs + (has_column ? n : 0) * p.b_ns;
  // stage_rows (>= 1) rows per pass, stage_rs elements apart (16-byte multiples). Whole 16-byte
  // pieces of a row, and the elements after them (none when K * size % 16 == 0).
  const int vecs = static_cast<int>(p.k * static_cast<int64_t>(sizeof(AT)) / 16), tail0 = vecs * 16 / static_cast<int>(sizeof(AT));
  const int tail = static_cast<int>(p.k) - tail0;
  AT* staged = reinterpret_cast<AT*>(decode_staged);
  for (int64_t r0 = s; r0 < e; r0 += stage_rows) {
    const int nr = static_cast<int>(min(int64_t{stage_rows}, e - r0));
    const AT* rows = a + r0 * p.a_rs;
    __syncthreads();  // the previous pass has read its rows
    for (int i = threadIdx.x; i < nr * vecs; i += blockDim.x) {
      const int r = i / vecs, v = i - r * vecs;
      reinterpret_cast<uint4*>(staged + r * stage_rs)[v] = reinterpret_cast<const uint4*>(rows + r * p.a_rs)[v];
    }
    for (int i = threadIdx.x; i < nr * tail; i += blockDim.x) {
      const int r = i / tail, kk = tail0 + i - r * tail;
      staged[r * stage_rs + kk] = rows[r * p.a_rs + kk];
    }
    __syncthreads();
    if (!has_column) continue;
    if (nr == 1) decode_column<1, AT, BT, OT>(p, staged, stage_rs, nr, r0, g, n, w);
    else if (nr == 2) decode_column<2, AT, BT, OT>(p, staged, stage_rs, nr, r0, g, n, w);
    else decode_column<kDecodePassRows, AT, BT, OT>(p, staged, stage_rs, nr, r0, g, n, w);
  }
}

// ---- tiles -----------------------------------------------------------------------------------------
constexpr int kBM = 64, kBN = 64, kBK = 32, kTileThreads = 128;
constexpr int kLdA = kBK + 8, kLdB = kBN + 8, kLdC = kBN + 4;

// The staging type: bf16 for bf16 or fp8 activations, f16 for f16, f32 for f32.
template <class AT> struct Stage { using type = __nv_bfloat16; };
template <> struct Stage<__half> { using type = __half; };
template <> struct Stage<float> { using type = float; };

template <class ST> struct TileSmem {
  __align__(32) ST as[kBM][kLdA];
  __align__(32) ST bs[kBK][kLdB];
  __align__(32) float c[kBM][kLdC];
};

// Each K step and each column tile lies inside one 128x128 scale block (K steps start at 0
// whenever B has block scales), so one scale serves a whole step of a tile.
static_assert(kScaleBlock % kBK == 0 && kScaleBlock % kBN == 0, "a tile step must not straddle a scale block");

// C tile (smem, f32) = A[0:rows, k0:k1] @ B[k0:k1, 0:cols] with A element (i, k) at
// a[i*a_rs + k*a_ks] and B element (k, j) at b[k*b_ks + j*b_ns]; rows/cols beyond the valid
// ranges read as zero. FP8 B with 128x128 block scales (group g, first column n0, k0 = 0): on
// tensor cores the codes are staged bare (exact in bf16/f16) and each K step's partial product
// is scaled in f32 as it is added to the accumulator, the precision of the decode kernel and the
// CPU; scaling while staging would round code x scale to the 16-bit staging type (2^-9 relative
// error per weight, beyond bf16 output tolerances for outputs near zero). f32 staging keeps
// code x scale (rounded to f32 only).
template <class AT, class BT, class ST>
__device__ void tile_product(TileSmem<ST>& sm, const AT* a, int64_t a_rs, int64_t a_ks, int64_t rows, const BT* b, int64_t b_ks,
                             int64_t b_ns, int64_t cols, int64_t k0, int64_t k1, const WeightScale& sb, int64_t g, int64_t n0) {
  const int t = threadIdx.x;
  constexpr bool kTensorCores = !std::is_same_v<ST, float>;
  constexpr bool kScaleAfterMma = kTensorCores && std::is_same_v<BT, E4m3>;
  using namespace nvcuda;
  const int warp = t / 32, wm = warp / 2, wn = warp % 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  float facc[4][8] = {};
  if constexpr (kTensorCores) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  }
  const bool a_k_fast = a_ks == 1, b_k_fast = b_ks == 1;
  for (int64_t k = k0; k < k1; k += kBK) {
    for (int idx = t; idx < kBM * kBK; idx += kTileThreads) {
      const int i = a_k_fast ? idx / kBK : idx % kBM, kk = a_k_fast ? idx % kBK : idx / kBM;
      float v = 0.f;
      if (i < rows && k + kk < k1) v = to_f(a[i * a_rs + (k + kk) * a_ks]);
      sm.as[i][kk] = from_f<ST>(v);
    }
    for (int idx = t; idx < kBK * kBN; idx += kTileThreads) {
      const int kk = b_k_fast ? idx % kBK : idx / kBN, j = b_k_fast ? idx / kBK : idx % kBN;
      float v = 0.f;
      if (j < cols && k + kk < k1) {
        v = to_f(b[(k + kk) * b_ks + j * b_ns]);
        if constexpr (!kScaleAfterMma) v *= block_scale(sb, g, n0 + j, k + kk);
      }
      sm.bs[kk][j] = from_f<ST>(v);
    }
    __syncthreads();
    if constexpr (kScaleAfterMma) {
      // One fragment of partial sums at a time: the whole step for one 16x16 block, then scaled.
      const float s = block_scale(sb, g, n0, k);
      constexpr int kSteps = kBK / 16;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, ST, wmma::row_major> fa[kSteps][2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, ST, wmma::row_major> fb[kSteps][2];
#pragma unroll
      for (int q = 0; q < kSteps; ++q) {
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[q][i], &sm.as[wm * 32 + i * 16][q * 16], kLdA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[q][j], &sm.bs[q * 16][wn * 32 + j * 16], kLdB);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> part;
          wmma::fill_fragment(part, 0.f);
#pragma unroll
          for (int q = 0; q < kSteps; ++q) wmma::mma_sync(part, fa[q][i], fb[q][j], part);
#pragma unroll
          for (int e = 0; e < part.num_elements; ++e) acc[i][j].x[e] = fmaf(s, part.x[e], acc[i][j].x[e]);
        }
    } else if constexpr (kTensorCores) {
#pragma unroll
      for (int kk = 0; kk < kBK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, ST, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, ST, wmma::row_major> fb[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &sm.as[wm * 32 + i * 16][kk], kLdA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &sm.bs[kk][wn * 32 + j * 16], kLdB);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    } else {
      const int tr = t / 8, tc = t % 8;
#pragma unroll 4
      for (int kk = 0; kk < kBK; ++kk) {
        float av[4], bv[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = to_f(sm.as[tr * 4 + i][kk]);
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = to_f(sm.bs[kk][tc * 8 + j]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) facc[i][j] = fmaf(av[i], bv[j], facc[i][j]);
      }
    }
    __syncthreads();
  }
  if constexpr (kTensorCores) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kLdC, wmma::mem_row_major);
  } else {
    const int tr = t / 8, tc = t % 8;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) sm.c[tr * 4 + i][tc * 8 + j] = facc[i][j];
  }
  __syncthreads();
}

/// The rows this block's row tile covers: group `group` (-1: a tile left over, nothing to do),
/// rows [row0, min(row0 + bm, end)). Without offs one group spans all rows.
struct RowTile {
  int group;
  int64_t row0, end;
};
__device__ __forceinline__ RowTile row_tile(const RowsProblem& p, const int32_t* ends, const int32_t* tile_map, int bm) {
  if (!tile_map) return {0, static_cast<int64_t>(blockIdx.x) * bm, p.rows};
  const int g = tile_map[2 * blockIdx.x];
  if (g < 0) return {-1, 0, 0};
  return {g, tile_map[2 * blockIdx.x + 1], ends[g]};
}

template <class AT, class BT, class OT>
__global__ void __launch_bounds__(kTileThreads) tiled_kernel(RowsProblem p, const int32_t* __restrict__ ends,
                                                             const int32_t* __restrict__ tile_map) {
  using ST = typename Stage<AT>::type;
  __shared__ TileSmem<ST> sm;
  const RowTile tile = row_tile(p, ends, tile_map, kBM);
  if (tile.group < 0) return;
  const int g = tile.group;
  const int64_t row0 = tile.row0, end = tile.end;
  const int64_t rows = min(int64_t{kBM}, end - row0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN, cols = min(int64_t{kBN}, p.n - n0);
  const AT* a = static_cast<const AT*>(p.a) + row0 * p.a_rs;
  const BT* b = static_cast<const BT*>(p.b) + g * p.b_gs + n0 * p.b_ns;
  tile_product<AT, BT, ST>(sm, a, p.a_rs, p.a_ks, rows, b, p.b_ks, p.b_ns, cols, 0, p.k, p.scale_b, g, n0);
  for (int idx = threadIdx.x; idx < kBM * kBN; idx += kTileThreads) {
    const int i = idx / kBN, j = idx % kBN;
    if (i >= rows || j >= cols) continue;
    float v = sm.c[i][j];
    if (p.scale_a) v *= p.scale_a[p.scale_a_rows ? row0 + i : 0];
    v *= column_scale(p.scale_b, g, n0 + j);
    static_cast<OT*>(p.out)[(row0 + i) * p.o_rs + (n0 + j) * p.o_ns] = from_f<OT>(v);
  }
}

template <class T>
__global__ void __launch_bounds__(kTileThreads) batch_kernel(BatchProblem p, const int32_t* __restrict__ ends) {
  using ST = typename Stage<T>::type;
  __shared__ TileSmem<ST> sm;
  const int64_t g = blockIdx.z;
  const int64_t k0 = ends && g > 0 ? ends[g - 1] : 0, k1 = ends ? ends[g] : p.k;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM, n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int64_t rows = min(int64_t{kBM}, p.m - m0), cols = min(int64_t{kBN}, p.n - n0);
  const T* a = static_cast<const T*>(p.a) + g * p.a_gs + m0 * p.a_ms;
  const T* b = static_cast<const T*>(p.b) + g * p.b_gs + n0 * p.b_ns;
  tile_product<T, T, ST>(sm, a, p.a_ms, p.a_ks, rows, b, p.b_ks, p.b_ns, cols, k0, k1, WeightScale{}, g, n0);
  for (int idx = threadIdx.x; idx < kBM * kBN; idx += kTileThreads) {
    const int i = idx / kBN, j = idx % kBN;
    if (i < rows && j < cols) static_cast<T*>(p.out)[g * p.o_gs + (m0 + i) * p.o_ms + (n0 + j) * p.o_ns] = from_f<T>(sm.c[i][j]);
  }
}

// ---- v2 tiles: cp.async pipeline, ldmatrix, mma.sync -----------------------------------------------
constexpr int kMmaBN = 128, kMmaBK = 64, kMmaThreads = 256;

// Tile geometry for weights of type BT and BM output rows: 8 warps as kWarpsM x kWarpsN, each
// owning kMi x kNi mma tiles of 16 x 8. Shared tiles are rows of kMmaBK 16-bit elements (128
// bytes, 8 chunks of 16 bytes); FP8 stages hold the raw 64-byte rows plus one decoded tile.
template <class BT, int BM> struct MmaShape {
  static constexpr bool kFp8 = std::is_same_v<BT, E4m3>;
  static constexpr int kWarpsM = BM >= 32 ? 2 : 1, kWarpsN = kMmaThreads / 32 / kWarpsM;
  static constexpr int kWarpRows = BM / kWarpsM, kWarpCols = kMmaBN / kWarpsN;
  static constexpr int kMi = kWarpRows / 16, kNi = kWarpCols / 8;
  static constexpr int kStages = BM >= 128 ? 3 : 4;
  static constexpr int kATile = BM * kMmaBK * 2;
  static constexpr int kBTile = kMmaBN * kMmaBK * (kFp8 ? 1 : 2);
  static constexpr int kBDecoded = kFp8 ? kMmaBN * kMmaBK * 2 : 0;
  static constexpr int kBOffset = kStages * kATile, kDecodedOffset = kStages * (kATile + kBTile);
  static constexpr int kSmemBytes = kDecodedOffset + kBDecoded;
  static_assert(kWarpRows % 16 == 0 && kWarpCols % 16 == 0, "warp tiles of whole ldmatrix x4 loads");
};

__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Byte offset of 16-byte chunk c (of 8) in row r of a shared tile of 128-byte rows. XOR-ing the
// chunk with r % 8 puts the 8 rows one ldmatrix phase reads (same chunk) in 8 different bank groups.
__device__ __forceinline__ uint32_t swizzled(int r, int c) { return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4)); }

// 16 bytes global -> shared, bypassing L1; bytes past src_bytes (0..16) are written as zeros and not read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Writes out[row, col] (and out[row, col + 1] when `second`) as the output type; `pair`: the two
// are adjacent and aligned for one store.
template <class OT>
__device__ __forceinline__ void store_two(const RowsProblem& p, int64_t row, int64_t col, float v0, float v1, bool second, bool pair) {
  OT* o = static_cast<OT*>(p.out) + row * p.o_rs + col * p.o_ns;
  if (pair && second) {
    if constexpr (std::is_same_v<OT, float>) *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
    else if constexpr (std::is_same_v<OT, __half>) *reinterpret_cast<__half2*>(o) = __floats2half2_rn(v0, v1);
    else *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(v0, v1);
    return;
  }
  o[0] = from_f<OT>(v0);
  if (second) o[p.o_ns] = from_f<OT>(v1);
}

// One BM x 128 output tile of the rows form: T the activations' (and mma's) type, BT the
// weights' (T or FP8). Tile map, row and column ranges as tiled_kernel.
template <class T, class BT, int BM>
__global__ void __launch_bounds__(kMmaThreads, 2) mma_tile_kernel(RowsProblem p, const int32_t* __restrict__ ends,
                                                                  const int32_t* __restrict__ tile_map, bool pair_store) {
  using S = MmaShape<BT, BM>;
  extern __shared__ __align__(128) unsigned char smem[];
  const RowTile tile = row_tile(p, ends, tile_map, BM);
  if (tile.group < 0) return;
  const int g = tile.group;
  const int64_t row0 = tile.row0, end = tile.end;
  const int rows = static_cast<int>(min(int64_t{BM}, end - row0));
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kMmaBN;
  const int cols = static_cast<int>(min(int64_t{kMmaBN}, p.n - n0));
  const T* a = static_cast<const T*>(p.a) + row0 * p.a_rs;
  const BT* b = static_cast<const BT*>(p.b) + g * p.b_gs + n0 * p.b_ns;
  const uint32_t a_tiles = shared_address(smem), b_tiles = a_tiles + S::kBOffset;
  const uint32_t b_decoded = a_tiles + S::kDecodedOffset;  // FP8 only
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int k_tiles = static_cast<int>((p.k + kMmaBK - 1) / kMmaBK);

  // Issues the copies of K tile kt into stage slot s. 16-bit rows: 8 chunks of 8 elements, one
  // chunk column per thread (tid % 8); FP8 rows: 4 chunks of 16.
  auto load_tile = [&](int kt, int s) {
    const int64_t k0 = static_cast<int64_t>(kt) * kMmaBK;
    const int c = tid % 8;
    const int64_t k = k0 + c * 8;
    const int bytes = static_cast<int>(2 * max(int64_t{0}, min(int64_t{8}, p.k - k)));
#pragma unroll
    for (int i = 0; i < (BM * 8 + kMmaThreads - 1) / kMmaThreads; ++i) {
      const int r = tid / 8 + i * (kMmaThreads / 8);
      if (BM * 8 >= kMmaThreads || r < BM) {
        const bool in = r < rows && bytes > 0;
        cp_async16(a_tiles + s * S::kATile + swizzled(r, c), in ? a + r * p.a_rs + k : a, in ? bytes : 0);
      }
    }
    if constexpr (!S::kFp8) {
#pragma unroll
      for (int i = 0; i < kMmaBN * 8 / kMmaThreads; ++i) {
        const int r = tid / 8 + i * (kMmaThreads / 8);
        const bool in = r < cols && bytes > 0;
        cp_async16(b_tiles + s * S::kBTile + swizzled(r, c), in ? b + r * p.b_ns + k : b, in ? bytes : 0);
      }
    } else {
      const int c8 = tid % 4;
      const int64_t k8 = k0 + c8 * 16;
      const int bytes8 = static_cast<int>(max(int64_t{0}, min(int64_t{16}, p.k - k8)));
#pragma unroll
      for (int i = 0; i < kMmaBN * 4 / kMmaThreads; ++i) {
        const int r = tid / 4 + i * (kMmaThreads / 4);
        const bool in = r < cols && bytes8 > 0;
        cp_async16(b_tiles + s * S::kBTile + r * 64 + c8 * 16, in ? b + r * p.b_ns + k8 : b, in ? bytes8 : 0);
      }
    }
  };

  // c += the stage's A tile @ B tile^T for this warp's sub-tile, 4 steps of k16. B tiles are
  // [n][k] (k contiguous): exactly the column-major 16x8 fragments mma wants, via plain ldmatrix.
  auto multiply = [&](uint32_t a_tile, uint32_t b_tile, float (&c)[S::kMi][S::kNi][4]) {
#pragma unroll
    for (int kk = 0; kk < kMmaBK / 16; ++kk) {
      uint32_t bf[S::kNi / 2][4];
#pragma unroll
      for (int j = 0; j < S::kNi / 2; ++j) {
        const int n = wn * S::kWarpCols + j * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(bf[j], b_tile + swizzled(n, kk * 2 + ((lane >> 3) & 1)));
      }
#pragma unroll
      for (int i = 0; i < S::kMi; ++i) {
        uint32_t af[4];
        const int r = wm * S::kWarpRows + i * 16 + (lane & 15);
        ldmatrix_x4(af, a_tile + swizzled(r, kk * 2 + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < S::kNi; ++j) mma16816<T>(c[i][j], af, bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
      }
    }
  };

  float acc[S::kMi][S::kNi][4] = {};
  const bool block_scaled = p.scale_b.kind == WeightScale::Block128;
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<S::kStages - 2>();  // tile kt has landed (this thread's copies) ...
    __syncthreads();                  // ... everyone's, and nobody still reads the slot refilled next
    const int next = kt + S::kStages - 1;
    if (next < k_tiles) load_tile(next, next % S::kStages);
    cp_async_commit();
    const int slot = kt % S::kStages;
    if constexpr (!S::kFp8) {
      multiply(a_tiles + slot * S::kATile, b_tiles + slot * S::kBTile, acc);
    } else {
      // The 128-aligned tile lies inside one 128x128 scale block: one scale per K step.
      const float scale = block_scaled ? p.scale_b.ptr[block_scale_offset(g, n0, static_cast<int64_t>(kt) * kMmaBK, p.scale_b.s0,
                                                                          p.scale_b.s1, p.scale_b.s2)]
                                       : 1.f;
#pragma unroll
      for (int i = 0; i < kMmaBN * 4 / kMmaThreads; ++i) {  // 16 codes -> two 16-byte chunks of T
        const int r = tid / 4 + i * (kMmaThreads / 4), c8 = tid % 4;
        const uint4 q = *reinterpret_cast<const uint4*>(smem + S::kBOffset + slot * S::kBTile + r * 64 + c8 * 16);
        const uint4 lo = make_uint4(decode_fp8x2<T>(q.x), decode_fp8x2<T>(q.x >> 16), decode_fp8x2<T>(q.y), decode_fp8x2<T>(q.y >> 16));
        const uint4 hi = make_uint4(decode_fp8x2<T>(q.z), decode_fp8x2<T>(q.z >> 16), decode_fp8x2<T>(q.w), decode_fp8x2<T>(q.w >> 16));
        *reinterpret_cast<uint4*>(smem + S::kDecodedOffset + swizzled(r, 2 * c8)) = lo;
        *reinterpret_cast<uint4*>(smem + S::kDecodedOffset + swizzled(r, 2 * c8 + 1)) = hi;
      }
      __syncthreads();
      float part[S::kMi][S::kNi][4] = {};
      multiply(a_tiles + slot * S::kATile, b_decoded, part);
#pragma unroll
      for (int i = 0; i < S::kMi; ++i)
#pragma unroll
        for (int j = 0; j < S::kNi; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = fmaf(scale, part[i][j][e], acc[i][j][e]);
    }
  }
  cp_async_wait<0>();

  // Accumulator e of mma tile (i, j): row lane/4 (+8 for e >= 2), columns 2*(lane%4) + {0, 1}.
#pragma unroll
  for (int i = 0; i < S::kMi; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * S::kWarpRows + i * 16 + (lane >> 2) + h * 8;
      if (r >= rows) continue;
      const int64_t row = row0 + r;
      const float row_scale = p.scale_a ? p.scale_a[p.scale_a_rows ? row : 0] : 1.f;
#pragma unroll
      for (int j = 0; j < S::kNi; ++j) {
        const int c = wn * S::kWarpCols + j * 8 + (lane & 3) * 2;
        if (c >= cols) continue;
        const int64_t col = n0 + c;
        const bool second = c + 1 < cols;
        const float v0 = acc[i][j][2 * h] * row_scale * column_scale(p.scale_b, g, col);
        const float v1 = second ? acc[i][j][2 * h + 1] * row_scale * column_scale(p.scale_b, g, col + 1) : 0.f;
        if (p.out_type == kFloat32) store_two<float>(p, row, col, v0, v1, second, pair_store);
        else if (p.out_type == kFloat16) store_two<__half>(p, row, col, v0, v1, second, pair_store);
        else store_two<__nv_bfloat16>(p, row, col, v0, v1, second, pair_store);
      }
    }
  }
}

// ---- host ------------------------------------------------------------------------------------------
template <class F> void with_type(DType d, F&& f) {
  switch (d) {
    case kFloat32: f(static_cast<float*>(nullptr)); break;
    case kFloat16: f(static_cast<__half*>(nullptr)); break;
    case kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case kFloat8_e4m3fn: f(static_cast<E4m3*>(nullptr)); break;
    default: fail("grouped_mm", "CUDA element type: expected float32, float16, bfloat16 or float8_e4m3fn, got {}", name(d));
  }
}

// Calls f(A*, B*, Out*) with the kernel element types; B is A's type or fp8, Out a float type.
template <class F> void with_types(const RowsProblem& p, F&& f) {
  with_type(p.a_type, [&](auto* a_tag) {
    using AT = std::remove_pointer_t<decltype(a_tag)>;
    with_type(p.out_type, [&](auto* o_tag) {
      using OT = std::remove_pointer_t<decltype(o_tag)>;
      if constexpr (!std::is_same_v<OT, E4m3>) {
        if (p.b_type == kFloat8_e4m3fn) f(a_tag, static_cast<E4m3*>(nullptr), o_tag);
        else if constexpr (!std::is_same_v<AT, E4m3>) f(a_tag, a_tag, o_tag);
      }
    });
  });
}

// v2 applies to bf16/f16 activations with weights of that type or FP8, both unit-stride along K
// and every row start 16-byte aligned (the cp.async granule), on sm_80 or newer (cp.async,
// mma.sync on bf16) unless fast paths are disabled (EMBER_DISABLE_FAST_PATHS=1 runs v1).
bool mma_applies(const RowsProblem& p, int device) {
  const bool a16 = p.a_type == kBFloat16 || p.a_type == kFloat16;
  const bool b_ok = p.b_type == p.a_type || p.b_type == kFloat8_e4m3fn;
  const auto a_size = static_cast<int64_t>(itemsize(p.a_type)), b_size = static_cast<int64_t>(itemsize(p.b_type));
  return a16 && b_ok && p.a_ks == 1 && p.b_ks == 1 && aligned16(p.a) && aligned16(p.b) && (p.a_rs * a_size) % 16 == 0 &&
         (p.b_ns * b_size) % 16 == 0 && (p.b_gs * b_size) % 16 == 0 && (p.n + kMmaBN - 1) / kMmaBN <= 65535 &&
         fast_paths_enabled(device, 80);
}

// v2's tile height: the smallest of 16..128 (..64 for FP8 weights, whose per-step partial sums
// double the accumulators) holding twice the mean rows per group, so most groups take one row
// tile and read their weights once; halved while the grid would not give each SM two blocks.
// From sizes only: the offsets stay on the device.
int mma_block_rows(const RowsProblem& p, int64_t groups, int sms) {
  const int64_t per_group = (p.rows + groups - 1) / groups;
  const int largest = p.b_type == kFloat8_e4m3fn ? 64 : 128;
  int bm = 16;
  while (bm < largest && bm < 2 * per_group) bm *= 2;
  const int64_t col_tiles = (p.n + kMmaBN - 1) / kMmaBN;
  while (bm > 16 && (p.rows + bm - 1) / bm * col_tiles < 2 * int64_t{sms}) bm /= 2;
  return bm;
}

template <class T, class BT, int BM>
void launch_mma_tiles(const RowsProblem& p, const int32_t* ends, const int32_t* tile_map, int64_t map_len, cudaStream_t stream) {
  constexpr int smem = MmaShape<BT, BM>::kSmemBytes;
  const auto kernel = mma_tile_kernel<T, BT, BM>;
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const auto o_size = static_cast<int64_t>(itemsize(p.out_type));
  const bool pair_store = p.o_ns == 1 && p.o_rs % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % (2 * o_size) == 0;
  const dim3 grid(static_cast<unsigned>(map_len), static_cast<unsigned>((p.n + kMmaBN - 1) / kMmaBN));
  kernel<<<grid, kMmaThreads, smem, stream>>>(p, ends, tile_map, pair_store);
}

template <class T, class BT>
void launch_mma(const RowsProblem& p, int bm, const int32_t* ends, const int32_t* tile_map, int64_t map_len, cudaStream_t stream) {
  if (bm == 16) launch_mma_tiles<T, BT, 16>(p, ends, tile_map, map_len, stream);
  else if (bm == 32) launch_mma_tiles<T, BT, 32>(p, ends, tile_map, map_len, stream);
  else if constexpr (std::is_same_v<BT, E4m3>) launch_mma_tiles<T, BT, 64>(p, ends, tile_map, map_len, stream);  // FP8: bm <= 64
  else if (bm == 64) launch_mma_tiles<T, BT, 64>(p, ends, tile_map, map_len, stream);
  else launch_mma_tiles<T, BT, 128>(p, ends, tile_map, map_len, stream);
}

}  // namespace

WeightScale weight_scale(const Tensor& scale, int64_t n) {
  WeightScale s;
  if (!scale.defined()) return s;
  s.ptr = scale.data_ptr<float>();
  s.s0 = scale.stride(0);
  s.s1 = scale.stride(1);
  s.s2 = scale.stride(2);
  const int64_t r = scale.size(1), c = scale.size(2);
  s.kind = r == 1 && c == 1 ? WeightScale::Tensorwise : r == n && c == 1 ? WeightScale::Rowwise : WeightScale::Block128;
  return s;
}

void run_rows(const RowsProblem& p, int device) {
  if (p.rows == 0 || p.n == 0) return;
  const int64_t groups = p.offs ? p.groups : 1;
  EMBER_CHECK(groups >= 1 && groups <= kPrepThreads, "grouped_mm", "number of groups on CUDA: expected 1 to {}, got {}", kPrepThreads,
              groups);
  EMBER_CHECK(p.rows < INT_MAX && p.n <= INT_MAX * int64_t{kBN}, "grouped_mm", "rows on CUDA: expected fewer than {}, got {}", INT_MAX,
              p.rows);
  cudaStream_t stream = current_raw_stream(device);
  const int sms = device_properties(device).multiProcessorCount;
  const size_t a_size = itemsize(p.a_type), b_size = itemsize(p.b_type);
  const bool decode_layout = p.a_ks == 1 && p.b_ks == 1 && aligned16(p.a) && aligned16(p.b) && (p.a_rs * a_size) % 16 == 0 &&
                             (p.b_ns * b_size) % 16 == 0 && (p.b_gs * b_size) % 16 == 0;
  const bool mma = mma_applies(p, device);
  // The decode kernel stages the activation rows once per block of 8 output columns and each
  // column's warp reads them again from shared memory: right for about one row per group (or up
  // to 8 rows of one group); beyond that the mma tiles read them once per 128 columns. Without
  // the mma tiles, decode keeps up to 8 rows per group (the wmma tiles are slower still). One
  // staged row (its pitch a multiple of 16 bytes) must fit the decode kernel's shared memory.
  const int64_t decode_pitch = (p.k * static_cast<int64_t>(a_size) + 15) / 16 * 16;
  const bool decode = decode_layout && p.k > 0 && p.rows <= (mma ? std::max<int64_t>(8, groups) : 8 * groups) &&
                      decode_pitch <= kDecodeStageBytes;
  const int bm = !decode && mma ? mma_block_rows(p, groups, sms) : kBM;
  const int64_t row_tiles = (p.rows + bm - 1) / bm;
  const int64_t map_len = p.offs ? row_tiles + groups : row_tiles;
  // With offsets, the prep kernel fills a workspace: ends [G], active [G], num_active [1], tile
  // map [2 * map_len]. Without, every kernel takes one group of all rows.
  Tensor ws;
  int32_t *ends = nullptr, *active = nullptr, *num_active = nullptr, *tile_map = nullptr;
  if (p.offs) {
    ws = empty({2 * groups + 1 + 2 * map_len}, kInt32, Device::cuda(device));
    ends = ws.data_ptr<int32_t>();
    active = ends + groups;
    num_active = active + groups;
    tile_map = num_active + 1;
    prep_kernel<<<1, kPrepThreads, 0, stream>>>(p.offs, static_cast<int>(groups), static_cast<int>(p.rows), bm, ends, active,
                                                num_active, tile_map, static_cast<int>(map_len));
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (!decode && mma) {
    const bool fp8 = p.b_type == kFloat8_e4m3fn;
    if (p.a_type == kFloat16) {
      if (fp8) launch_mma<__half, E4m3>(p, bm, ends, tile_map, map_len, stream);
      else launch_mma<__half, __half>(p, bm, ends, tile_map, map_len, stream);
    } else {
      if (fp8) launch_mma<__nv_bfloat16, E4m3>(p, bm, ends, tile_map, map_len, stream);
      else launch_mma<__nv_bfloat16, __nv_bfloat16>(p, bm, ends, tile_map, map_len, stream);
    }
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  with_types(p, [&](auto* a_tag, auto* b_tag, auto* o_tag) {
    using AT = std::remove_pointer_t<decltype(a_tag)>;
    using BT = std::remove_pointer_t<decltype(b_tag)>;
    using OT = std::remove_pointer_t<decltype(o_tag)>;
    if (decode) {
      const auto slots = static_cast<unsigned>(std::min<int64_t>({groups, p.rows, 65535}));
      // 8 columns per block (the staging is shared by the block), rows staged per pass: as many as
      // fit kDecodeStageBytes, at most kDecodePassRows.
      const dim3 grid(static_cast<unsigned>((p.n + 7) / 8), slots);
      const int stage_rows = static_cast<int>(std::min<int64_t>(kDecodePassRows, kDecodeStageBytes / decode_pitch));
      decode_kernel<AT, BT, OT><<<grid, 256, static_cast<size_t>(stage_rows) * decode_pitch, stream>>>(
          p, ends, active, num_active, stage_rows, static_cast<int>(decode_pitch / static_cast<int64_t>(a_size)));
    } else {
      const dim3 grid(static_cast<unsigned>(map_len), static_cast<unsigned>((p.n + kBN - 1) / kBN));
      EMBER_CHECK(grid.y <= 65535, "grouped_mm", "output columns on CUDA: expected at most {}, got {}", 65535 * kBN, p.n);
      tiled_kernel<AT, BT, OT><<<grid, kTileThreads, 0, stream>>>(p, ends, tile_map);
    }
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void run_batch(const BatchProblem& p, int device) {
  if (p.m == 0 || p.n == 0 || p.groups == 0) return;
  cudaStream_t stream = current_raw_stream(device);
  Tensor ws;
  int32_t* ends = nullptr;
  if (p.offs) {
    EMBER_CHECK(p.groups <= kPrepThreads, "grouped_mm", "number of groups on CUDA: expected at most {}, got {}", kPrepThreads, p.groups);
    ws = empty({3 * p.groups + 1}, kInt32, Device::cuda(device));
    ends = ws.data_ptr<int32_t>();
    EMBER_CHECK(p.k < INT_MAX, "grouped_mm", "contraction size on CUDA: expected below {}, got {}", INT_MAX, p.k);
    prep_kernel<<<1, kPrepThreads, 0, stream>>>(p.offs, static_cast<int>(p.groups), static_cast<int>(p.k), 0, ends,
                                                ends + p.groups, ends + 2 * p.groups, nullptr, 0);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  const dim3 grid(static_cast<unsigned>((p.m + kBM - 1) / kBM), static_cast<unsigned>((p.n + kBN - 1) / kBN),
                  static_cast<unsigned>(p.groups));
  EMBER_CHECK(grid.y <= 65535 && grid.z <= 65535, "grouped_mm", "grid on CUDA: expected at most 65535 column tiles and groups, got {} and {}",
              grid.y, grid.z);
  with_type(p.type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_same_v<T, E4m3>) batch_kernel<T><<<grid, kTileThreads, 0, stream>>>(p, ends);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace gmm

void grouped_mm(const Tensor& a, const Tensor& b, const Tensor& offs, const Tensor& out) {
  const int device = out.device().index;
  const int32_t* offs_p = offs.defined() ? offs.data_ptr<int32_t>() : nullptr;
  if (a.dim() == 2 && b.dim() == 3) {  // rows
    gmm::RowsProblem p;
    p.a = a.raw_data(); p.a_rs = a.stride(0); p.a_ks = a.stride(1); p.a_type = a.dtype();
    p.b = b.raw_data(); p.b_gs = b.stride(0); p.b_ks = b.stride(1); p.b_ns = b.stride(2); p.b_type = b.dtype();
    p.offs = offs_p; p.groups = b.size(0); p.rows = a.size(0); p.n = b.size(2); p.k = a.size(1);
    p.out = out.raw_data(); p.o_rs = out.stride(0); p.o_ns = out.stride(1); p.out_type = out.dtype();
    gmm::run_rows(p, device);
  } else if (a.dim() == 3 && b.dim() == 2) {  // columns: out^T[c, m] = sum_k B[k, c] A[g, m, k]
    gmm::RowsProblem p;
    p.a = b.raw_data(); p.a_rs = b.stride(1); p.a_ks = b.stride(0); p.a_type = b.dtype();
    p.b = a.raw_data(); p.b_gs = a.stride(0); p.b_ks = a.stride(2); p.b_ns = a.stride(1); p.b_type = a.dtype();
    p.offs = offs_p; p.groups = a.size(0); p.rows = b.size(1); p.n = a.size(1); p.k = a.size(2);
    p.out = out.raw_data(); p.o_rs = out.stride(1); p.o_ns = out.stride(0); p.out_type = out.dtype();
    gmm::run_rows(p, device);
  } else {  // 2D x 2D (K jagged) or 3D x 3D
    gmm::BatchProblem p;
    const bool batched = a.dim() == 3;
    p.a = a.raw_data(); p.a_gs = batched ? a.stride(0) : 0; p.a_ms = a.stride(-2); p.a_ks = a.stride(-1);
    p.b = b.raw_data(); p.b_gs = batched ? b.stride(0) : 0; p.b_ks = b.stride(-2); p.b_ns = b.stride(-1);
    p.type = a.dtype(); p.offs = offs_p; p.groups = out.size(0); p.m = out.size(1); p.n = out.size(2); p.k = a.size(-1);
    p.out = out.raw_data(); p.o_gs = out.stride(0); p.o_ms = out.stride(1); p.o_ns = out.stride(2);
    gmm::run_batch(p, device);
  }
}

void scaled_grouped_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& offs,
                       const Tensor& out) {
  gmm::RowsProblem p;
  p.a = a.raw_data(); p.a_rs = a.stride(0); p.a_ks = a.stride(1); p.a_type = a.dtype();
  if (scale_a.defined()) {
    p.scale_a = scale_a.data_ptr<float>();
    p.scale_a_rows = scale_a.numel() > 1;
  }
  p.b = b.raw_data(); p.b_gs = b.stride(0); p.b_ks = b.stride(1); p.b_ns = b.stride(2); p.b_type = b.dtype();
  p.scale_b = gmm::weight_scale(scale_b, b.size(2));
  p.offs = offs.data_ptr<int32_t>(); p.groups = b.size(0); p.rows = a.size(0); p.n = b.size(2); p.k = a.size(1);
  p.out = out.raw_data(); p.o_rs = out.stride(0); p.o_ns = out.stride(1); p.out_type = out.dtype();
  gmm::run_rows(p, out.device().index);
}

}  // namespace ember::cuda
