// CUDA scaled dot-product attention: flash-attention style kernels (online softmax, K/V streamed
// through shared memory in tiles, nothing of size L x S ever stored), plus a combine pass when the
// keys are split over several blocks.
//
// A block owns up to 64 query rows that share one k head and one v head: Lb consecutive query
// positions of Gb consecutive q heads (prefill: 64 positions of one head; decode: the few
// positions of every q head of a GQA group, so each K/V row is loaded once for all of them). It
// walks its keys in tiles: the K and V tiles are copied to shared memory (16-byte loads when the
// rows allow it; any strides otherwise, read in place, so a narrowed KV cache needs no copy), the
// scores of the tile are computed, the running max and sum of each row (online softmax, f32; f64
// for f64 inputs) rescale the output accumulated in registers, and P V is added. Scores live in
// base-2 units (scale * log2(e) folded in, the mask term times log2(e)): every exponential is one
// exp2. Two kernels share this plan:
//   - attention_kernel, on CUDA cores, any float dtype: each thread computes an RPT x KPT block of
//     scores and an RPT x DPT block of the output; shapes for decode (16 rows, 128 threads),
//     prefill (64 rows, 256 threads) and f64 (32-key tiles, so double tiles fit);
//   - attention_mma_kernel, f16/bf16 with more than 16 query rows per kv head group (prefill) on
//     sm_80+: mma.sync tensor-core products with f32 accumulation, the probabilities rounded to
//     the input type for P V as FlashAttention does. EMBER_DISABLE_FAST_PATHS=1 turns it off.
//
// Split-K (flash-decoding): when the row tiles alone cannot fill the GPU (decode: L = 1, a few kv
// heads), the keys are cut into chunks handled by separate blocks that write unnormalised partial
// outputs with their (max, sum); combine_kernel merges them.
//
// Masking: keys past S, keys after the query position (causal: top-left, key j <= query i), a
// false bool mask element or a -inf additive one give score -inf. A row whose scores are all
// -inf keeps max -inf and sum 0 and is written as zeros (exp2 is never evaluated at -inf - -inf:
// the max used for the exponent is 0 while it is -inf).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <type_traits>

#include "backend.h"
#include "cuda/allocator.h"
#include "cuda/dispatch.cuh"
#include "cuda/mma.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 64;
constexpr int kCombineThreads = 128;
constexpr double kLog2e = 1.4426950408889634;

enum MaskKind : int { kNoMask = 0, kBoolMask = 1, kFloat32Mask = 2, kNativeMask = 3 };  // native: q's dtype

struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;
  void* out;
  void* partial_out;  // split-K: [splits, B*H*L, Ev] unnormalised outputs (Acc)
  void* partial_ml;   // split-K: [splits, B*H*L, 2] (max, sum) in base-2 units (Acc)
  int64_t q_stride[4], k_stride[4], v_stride[4], mask_stride[4], out_stride[4];
  int B, H, L, S, E, Ev;
  int E4;   // E rounded up to 4: the scores loop reads 4 dims at a time (zero padded)
  int Ep;   // row pitch of Q and K tiles in shared memory: E4, plus 4 when E4 / 4 is even
  int Evs;  // row pitch of the V tile: Ev rounded up to 8 (16-byte rows for 16-byte stores)
  int group_k, group_v;  // H / Hk, H / Hv
  int group;             // gcd(group_k, group_v): consecutive q heads sharing a k and a v head
  int heads_per_tile;    // Gb
  int rows_per_head;     // Lb
  int head_tiles, pos_tiles;
  int mask_kind;
  bool causal;
  bool vec_k, vec_v;  // 16-byte global loads for k / v
  double scale_log2;  // scale * log2(e)
  int split_chunk;    // keys per split (a multiple of the key tile)
  int splits;
};

// ---- element conversions -------------------------------------------------------------------
template <class Acc, class T> __device__ __forceinline__ Acc to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return static_cast<Acc>(v);
}
template <class T, class Acc> __device__ __forceinline__ T from_acc(Acc v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return static_cast<T>(v);
}
template <class T> __device__ __forceinline__ T zero_of() {
  if constexpr (std::is_same_v<T, __half>) return __ushort_as_half(0);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __ushort_as_bfloat16(0);
  else return T(0);
}
__device__ __forceinline__ float exp2_of(float x) { return exp2f(x); }
__device__ __forceinline__ double exp2_of(double x) { return exp2(x); }
__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_of(double a, double b) { return fmax(a, b); }

/// Four consecutive elements of a shared-memory row as Acc; p is aligned to 4 elements.
template <class Acc, class T> __device__ __forceinline__ void load4(const T* p, Acc (&out)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  } else if constexpr (std::is_same_v<T, double>) {
    const double2 a = reinterpret_cast<const double2*>(p)[0], b = reinterpret_cast<const double2*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    float2 lo, hi;
    if constexpr (std::is_same_v<T, __half>) {
      lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    } else {
      lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    }
    out[0] = lo.x, out[1] = lo.y, out[2] = hi.x, out[3] = hi.y;
  }
}

/// Max / sum over the KL consecutive lanes of a group (KL a power of two <= 32).
template <int KL, class Acc> __device__ __forceinline__ Acc group_max(Acc v) {
#pragma unroll
  for (int o = KL / 2; o > 0; o /= 2) v = max_of(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int KL, class Acc> __device__ __forceinline__ Acc group_sum(Acc v) {
#pragma unroll
  for (int o = KL / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// The additive mask term, in base-2 units, of the element at `offset`.
template <class T, class Acc> __device__ __forceinline__ Acc mask_term(const void* mask, int kind, int64_t offset) {
  switch (kind) {
    case kBoolMask: return static_cast<const bool*>(mask)[offset] ? Acc(0) : Acc(-INFINITY);
    case kFloat32Mask: return static_cast<Acc>(static_cast<const float*>(mask)[offset]) * Acc(kLog2e);
    default: return to_acc<Acc>(static_cast<const T*>(mask)[offset]) * Acc(kLog2e);
  }
}

/// Copies rows [0, rows) x cols of a strided source into a shared tile of `pitch` elements per
/// row (rows [valid, rows) as zeros). vec: unit column stride, cols and row stride multiples of
/// 16 bytes, 16-byte aligned source: 16-byte loads, stored as two 8-byte halves (the pitch only
/// keeps rows 8-byte aligned).
template <class T, int THREADS>
__device__ __forceinline__ void load_tile(T* dst, int pitch, const T* src, int64_t row_stride, int64_t col_stride, int valid,
                                          int rows, int cols, bool vec) {
  if (vec) {
    constexpr int kVec = 16 / sizeof(T);
    constexpr int kUnroll = 4;
    const int chunks = cols / kVec, total = rows * chunks;
    for (int base = threadIdx.x; base < total; base += THREADS * kUnroll) {
      uint4 val[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int idx = base + u * THREADS, r = idx / chunks, c = (idx - r * chunks) * kVec;
        val[u] = make_uint4(0, 0, 0, 0);
        if (idx < total && r < valid) val[u] = *reinterpret_cast<const uint4*>(src + r * row_stride + c);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int idx = base + u * THREADS, r = idx / chunks, c = (idx - r * chunks) * kVec;
        if (idx < total) {
          uint2* d = reinterpret_cast<uint2*>(dst + r * pitch + c);
          d[0] = make_uint2(val[u].x, val[u].y);
          d[1] = make_uint2(val[u].z, val[u].w);
        }
      }
    }
  } else {
    const int total = rows * cols;
    for (int idx = threadIdx.x; idx < total; idx += THREADS) {
      const int r = idx / cols, c = idx - r * cols;
      dst[r * pitch + c] = r < valid ? src[r * row_stride + c * col_stride] : zero_of<T>();
    }
  }
}

/// The query rows and keys of one block. blockIdx.x = ((b * groups + head_group) * head_tiles +
/// head_tile) * pos_tiles + pos_tile, the last position tile first (under causal masking it has
/// the most keys); blockIdx.y is the key split. Row r of the tile is position r % Lb of head r / Lb.
struct BlockTile {
  int b, h0, heads_here, pos0, pos_here, kh, vh, key_begin, key_stop, Lb, Gb;
  __device__ int head(int r) const { return h0 + r / Lb; }
  __device__ int pos(int r) const { return pos0 + r % Lb; }
  __device__ bool valid(int r) const { return r < Gb * Lb && r / Lb < heads_here && r % Lb < pos_here; }
};

__device__ BlockTile block_tile(const AttentionParams& p) {
  BlockTile t;
  int64_t bx = blockIdx.x;
  const int pos_tile = p.pos_tiles - 1 - static_cast<int>(bx % p.pos_tiles);
  bx /= p.pos_tiles;
  const int head_tile = static_cast<int>(bx % p.head_tiles);
  bx /= p.head_tiles;
  const int groups = p.H / p.group;
  const int head_group = static_cast<int>(bx % groups);
  t.b = static_cast<int>(bx / groups);
  const int first_head = head_group * p.group;
  t.Lb = p.rows_per_head;
  t.Gb = p.heads_per_tile;
  t.h0 = first_head + head_tile * p.heads_per_tile;
  t.heads_here = min(p.heads_per_tile, p.group - head_tile * p.heads_per_tile);
  t.pos0 = pos_tile * p.rows_per_head;
  t.pos_here = min(p.rows_per_head, p.L - t.pos0);
  t.kh = first_head / p.group_k;
  t.vh = first_head / p.group_v;
  const int key_end = p.causal ? min(p.S, t.pos0 + t.pos_here) : p.S;
  t.key_begin = blockIdx.y * p.split_chunk;
  t.key_stop = min(key_end, t.key_begin + p.split_chunk);
  return t;
}

/// Whether query row (valid, pos) attends key `key` (local index key_local < valid_keys), and
/// its score in base-2 units: x plus the mask term, or -inf.
template <class T, class Acc>
__device__ __forceinline__ Acc masked_score(const AttentionParams& p, Acc x, bool valid, int pos, int64_t mask_row, int key_local,
                                            int valid_keys, int key) {
  const bool attend = valid && key_local < valid_keys && (!p.causal || key <= pos);
  if (attend && p.mask_kind != kNoMask) x += mask_term<T, Acc>(p.mask, p.mask_kind, mask_row + key * p.mask_stride[3]);
  return attend ? x : Acc(-INFINITY);
}

/// Writes a finished row: out = o / l (zeros when l is 0: every key masked), or, with split keys,
/// the unnormalised o and (m, l) into the split's slot of the workspace.
template <class T, class Acc>
__device__ __forceinline__ void store_row_value(const AttentionParams& p, int b, int h, int pos, int c, Acc o, Acc l) {
  if (p.splits == 1) {
    T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + h * p.out_stride[1] + pos * p.out_stride[2];
    out[c * p.out_stride[3]] = from_acc<T>(l == Acc(0) ? Acc(0) : o / l);
  } else {
    const int64_t slot = blockIdx.y * static_cast<int64_t>(p.B) * p.H * p.L + (static_cast<int64_t>(b) * p.H + h) * p.L + pos;
    static_cast<Acc*>(p.partial_out)[slot * p.Ev + c] = o;
  }
}
template <class Acc> __device__ __forceinline__ void store_row_stats(const AttentionParams& p, int b, int h, int pos, Acc m, Acc l) {
  if (p.splits == 1) return;
  const int64_t slot = blockIdx.y * static_cast<int64_t>(p.B) * p.H * p.L + (static_cast<int64_t>(b) * p.H + h) * p.L + pos;
  static_cast<Acc*>(p.partial_ml)[2 * slot] = m;
  static_cast<Acc*>(p.partial_ml)[2 * slot + 1] = l;
}

// RPT rows x KPT keys of scores and RPT rows x DPT value columns per thread; RG row groups of KL
// lanes (KL divides 32: a row group's reductions are warp shuffles).
template <class T, class Acc, int RPT, int RG, int KL, int KPT, int DPT>
__global__ void __launch_bounds__(RG * KL) attention_kernel(const AttentionParams p) {
  constexpr int kThreads = RG * KL, R = RPT * RG, KT = KL * KPT, PS = KT + 4;
  static_assert(32 % KL == 0 && KT % 4 == 0);
  extern __shared__ __align__(16) unsigned char smem[];
  Acc* Qs = reinterpret_cast<Acc*>(smem);                 // [R][Ep], pre-scaled
  T* Ks = reinterpret_cast<T*>(Qs + R * p.Ep);             // [KT][Ep]
  T* Vs = Ks + KT * p.Ep;                                  // [KT][Evs]
  Acc* Ps = reinterpret_cast<Acc*>(Vs + KT * p.Evs);       // [R][PS]

  const BlockTile tile = block_tile(p);
  const int b = tile.b;

  // Q tile, scaled into base-2 units, zero past E and for rows outside the tile.
  const T* q = static_cast<const T*>(p.q);
  const Acc scale_log2 = static_cast<Acc>(p.scale_log2);
  for (int idx = threadIdx.x; idx < R * p.E4; idx += kThreads) {
    const int r = idx / p.E4, d = idx - r * p.E4;
    Acc val = 0;
    if (d < p.E && tile.valid(r)) {
      const int64_t off = b * p.q_stride[0] + tile.head(r) * p.q_stride[1] + tile.pos(r) * p.q_stride[2] + d * p.q_stride[3];
      val = to_acc<Acc>(q[off]) * scale_log2;
    }
    Qs[r * p.Ep + d] = val;
  }
  // K's columns [E, E4) are read by the scores loop and never written by the tile loads.
  const int pad = p.E4 - p.E;
  for (int idx = threadIdx.x; idx < KT * pad; idx += kThreads) Ks[(idx / pad) * p.Ep + p.E + idx % pad] = zero_of<T>();

  const int rg = threadIdx.x / KL, lane = threadIdx.x % KL;
  int pos[RPT];
  bool valid[RPT];
  int64_t mask_row[RPT];
  Acc m[RPT], l[RPT], o[RPT][DPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = rg * RPT + i;
    valid[i] = tile.valid(r);
    pos[i] = tile.pos(r);
    mask_row[i] = valid[i] ? b * p.mask_stride[0] + tile.head(r) * p.mask_stride[1] + pos[i] * p.mask_stride[2] : 0;
    m[i] = Acc(-INFINITY);
    l[i] = 0;
#pragma unroll
    for (int j = 0; j < DPT; ++j) o[i][j] = 0;
  }

  const T* k = static_cast<const T*>(p.k) + b * p.k_stride[0] + tile.kh * p.k_stride[1];
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride[0] + tile.vh * p.v_stride[1];
  for (int k0 = tile.key_begin; k0 < tile.key_stop; k0 += KT) {
    const int valid_keys = min(KT, tile.key_stop - k0);
    __syncthreads();  // the previous tile's readers are done (and the Q tile is written)
    load_tile<T, kThreads>(Ks, p.Ep, k + k0 * p.k_stride[2], p.k_stride[2], p.k_stride[3], valid_keys, KT, p.E, p.vec_k);
    load_tile<T, kThreads>(Vs, p.Evs, v + k0 * p.v_stride[2], p.v_stride[2], p.v_stride[3], valid_keys, KT, p.Ev, p.vec_v);
    __syncthreads();

    Acc s[RPT][KPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
      for (int j = 0; j < KPT; ++j) s[i][j] = 0;
    for (int d = 0; d < p.E4; d += 4) {
      Acc qv[RPT][4], kv[KPT][4];
#pragma unroll
      for (int i = 0; i < RPT; ++i) load4(Qs + (rg * RPT + i) * p.Ep + d, qv[i]);
#pragma unroll
      for (int j = 0; j < KPT; ++j) load4(Ks + (lane + j * KL) * p.Ep + d, kv[j]);
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int j = 0; j < KPT; ++j)
#pragma unroll
          for (int u = 0; u < 4; ++u) s[i][j] += qv[i][u] * kv[j][u];
    }

#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      Acc tile_max = Acc(-INFINITY);
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        const int key_local = lane + j * KL;
        s[i][j] = masked_score<T, Acc>(p, s[i][j], valid[i], pos[i], mask_row[i], key_local, valid_keys, k0 + key_local);
        tile_max = max_of(tile_max, s[i][j]);
      }
      const Acc m_new = max_of(m[i], group_max<KL>(tile_max));
      const Acc m_use = m_new == Acc(-INFINITY) ? Acc(0) : m_new;
      const Acc alpha = exp2_of(m[i] - m_use);
      m[i] = m_new;
      Acc sum = 0;
#pragma unroll
      for (int j = 0; j < KPT; ++j) {
        const Acc e = exp2_of(s[i][j] - m_use);
        Ps[(rg * RPT + i) * PS + lane + j * KL] = e;
        sum += e;
      }
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int j = 0; j < DPT; ++j) o[i][j] *= alpha;
    }
    __syncthreads();

    // o += P V over this tile's keys (P is 0 and V zero-filled past valid_keys).
    for (int kk = 0; kk < valid_keys; kk += 4) {
      Acc pv[RPT][4];
#pragma unroll
      for (int i = 0; i < RPT; ++i) load4(Ps + (rg * RPT + i) * PS + kk, pv[i]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const T* vrow = Vs + (kk + u) * p.Evs;
#pragma unroll
        for (int j = 0; j < DPT; ++j) {
          const int c = lane + j * KL;
          if (c < p.Ev) {
            const Acc vv = to_acc<Acc>(vrow[c]);
#pragma unroll
            for (int i = 0; i < RPT; ++i) o[i][j] += pv[i][u] * vv;
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const Acc l_row = group_sum<KL>(l[i]);
    if (!valid[i]) continue;
    const int h = tile.head(rg * RPT + i);
#pragma unroll
    for (int j = 0; j < DPT; ++j) {
      const int c = lane + j * KL;
      if (c < p.Ev) store_row_value<T>(p, b, h, pos[i], c, o[i][j], l_row);
    }
    if (lane == 0) store_row_stats(p, b, h, pos[i], m[i], l_row);
  }
}

// One block per query row: out = sum_s w_s o_s / sum_s w_s l_s, w_s = exp2(m_s - max_s m_s).
template <class T, class Acc> __global__ void __launch_bounds__(kCombineThreads) combine_kernel(const AttentionParams p) {
  __shared__ Acc weight[kMaxSplits];
  __shared__ Acc inv_sum;
  const int64_t row = blockIdx.x, rows_total = static_cast<int64_t>(p.B) * p.H * p.L;
  const Acc* ml = static_cast<const Acc*>(p.partial_ml);
  if (threadIdx.x < 32) {
    Acc mx = Acc(-INFINITY);
    for (int s = threadIdx.x; s < p.splits; s += 32) mx = max_of(mx, ml[2 * (s * rows_total + row)]);
    mx = group_max<32>(mx);
    const Acc m_use = mx == Acc(-INFINITY) ? Acc(0) : mx;
    Acc sum = 0;
    for (int s = threadIdx.x; s < p.splits; s += 32) {
      const Acc w = exp2_of(ml[2 * (s * rows_total + row)] - m_use);
      weight[s] = w;
      sum += w * ml[2 * (s * rows_total + row) + 1];
    }
    sum = group_sum<32>(sum);
    if (threadIdx.x == 0) inv_sum = sum == Acc(0) ? Acc(0) : Acc(1) / sum;  // fully masked: zeros
  }
  __syncthreads();
  const int pos = static_cast<int>(row % p.L);
  const int64_t bh = row / p.L;
  const int h = static_cast<int>(bh % p.H), b = static_cast<int>(bh / p.H);
  T* out = static_cast<T*>(p.out) + b * p.out_stride[0] + h * p.out_stride[1] + pos * p.out_stride[2];
  const Acc* po = static_cast<const Acc*>(p.partial_out);
  for (int c = threadIdx.x; c < p.Ev; c += kCombineThreads) {
    Acc acc = 0;
    for (int s = 0; s < p.splits; ++s) acc += weight[s] * po[(s * rows_total + row) * p.Ev + c];
    out[c * p.out_stride[3]] = from_acc<T>(acc * inv_sum);
  }
}

// ---- tensor-core prefill (f16 / bf16, sm_80+): mma.sync m16n8k16 with f32 accumulation -----------
// Four warps own 16 query rows each (64 per block); tiles of 64 keys. Q, K and V tiles sit in
// shared memory as T with rows padded by 16 bytes (the fragment loads of 8 rows then touch 8
// different bank groups). S = Q K^T comes from 32-bit fragment loads of Q and K; P = exp2(S - m)
// is rounded to T in registers and becomes the A operand of P V directly (the accumulator layout
// of two 16x8 score tiles is the A layout of one 16x16 tile); V's B fragments come from
// ldmatrix.trans of the row-major V tile. Head dims are padded to 16 with zeros in shared memory.
constexpr int kMmaRows = 64, kMmaKeys = 64, kMmaThreads = 128;

/// Two consecutive elements (the lower index in the low half) as one 32-bit register.
template <class T> __device__ __forceinline__ uint32_t load_pair(const T* p) { return *reinterpret_cast<const uint32_t*>(p); }
template <class T> __device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// D: head dims (E and Ev) rounded up to 16 are at most D; the pitch of every tile row is D + 8.
template <class T, int D>
__global__ void __launch_bounds__(kMmaThreads) attention_mma_kernel(const AttentionParams p) {
  constexpr int DP = D + 8, NT = D / 8, KS = D / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);  // [64][DP]
  T* Ks = Qs + kMmaRows * DP;           // [64][DP]
  T* Vs = Ks + kMmaKeys * DP;           // [64][DP]

  const BlockTile tile = block_tile(p);
  const int b = tile.b;
  const int e16 = (p.E + 15) / 16 * 16, ev16 = (p.Ev + 15) / 16 * 16;
  const int k_steps = e16 / 16, v_tiles = ev16 / 8;
  const T* q = static_cast<const T*>(p.q);
  for (int idx = threadIdx.x; idx < kMmaRows * e16; idx += kMmaThreads) {
    const int r = idx / e16, d = idx - r * e16;
    T val = zero_of<T>();
    if (d < p.E && tile.valid(r))
      val = q[b * p.q_stride[0] + tile.head(r) * p.q_stride[1] + tile.pos(r) * p.q_stride[2] + d * p.q_stride[3]];
    Qs[r * DP + d] = val;
  }
  // Columns [E, e16) of K and [Ev, ev16) of V are read but never written by the tile loads.
  const int k_pad = e16 - p.E, v_pad = ev16 - p.Ev;
  for (int idx = threadIdx.x; idx < kMmaKeys * k_pad; idx += kMmaThreads) Ks[(idx / k_pad) * DP + p.E + idx % k_pad] = zero_of<T>();
  for (int idx = threadIdx.x; idx < kMmaKeys * v_pad; idx += kMmaThreads) Vs[(idx / v_pad) * DP + p.Ev + idx % v_pad] = zero_of<T>();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // This thread's two rows: g and g + 8 of the warp's 16 (accumulator halves 0 and 1).
  int row[2], pos[2];
  bool valid[2];
  int64_t mask_row[2];
  float m[2], l[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    row[hf] = warp * 16 + g + hf * 8;
    valid[hf] = tile.valid(row[hf]);
    pos[hf] = tile.pos(row[hf]);
    mask_row[hf] = valid[hf] ? b * p.mask_stride[0] + tile.head(row[hf]) * p.mask_stride[1] + pos[hf] * p.mask_stride[2] : 0;
    m[hf] = -INFINITY;
    l[hf] = 0.f;
  }
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  const float scale_log2 = static_cast<float>(p.scale_log2);
  // ldmatrix.x4.trans source row of this lane: matrix lane / 8 (keys 0-7 or 8-15 of a k step, value
  // columns of n tile 2j or 2j + 1), row lane % 8.
  const int ldm_key = (lane / 8 % 2) * 8 + lane % 8, ldm_col = (lane / 16) * 8;

  const T* k = static_cast<const T*>(p.k) + b * p.k_stride[0] + tile.kh * p.k_stride[1];
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride[0] + tile.vh * p.v_stride[1];
  for (int k0 = tile.key_begin; k0 < tile.key_stop; k0 += kMmaKeys) {
    const int valid_keys = min(kMmaKeys, tile.key_stop - k0);
    __syncthreads();  // the previous tile's readers are done (and the Q tile is written)
    load_tile<T, kMmaThreads>(Ks, DP, k + k0 * p.k_stride[2], p.k_stride[2], p.k_stride[3], valid_keys, kMmaKeys, p.E, p.vec_k);
    load_tile<T, kMmaThreads>(Vs, DP, v + k0 * p.v_stride[2], p.v_stride[2], p.v_stride[3], valid_keys, kMmaKeys, p.Ev, p.vec_v);
    __syncthreads();

    // S = Q K^T: 16 rows x 64 keys per warp, as 8 tiles of 16 x 8.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      if (ks < k_steps) {
        const T* qa = Qs + (warp * 16 + g) * DP + ks * 16 + 2 * t;
        const uint32_t a[4] = {load_pair(qa), load_pair(qa + 8 * DP), load_pair(qa + 8), load_pair(qa + 8 * DP + 8)};
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const T* kb = Ks + (n * 8 + g) * DP + ks * 16 + 2 * t;
          mma16816<T>(s[n], a, load_pair(kb), load_pair(kb + 8));
        }
      }
    }

    // Online softmax per row half; element e of half hf of tile n is key n * 8 + 2t + e.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key_local = n * 8 + 2 * t + e;
          float& x = s[n][2 * hf + e];
          x = masked_score<T, float>(p, x * scale_log2, valid[hf], pos[hf], mask_row[hf], key_local, valid_keys, k0 + key_local);
          tile_max = fmaxf(tile_max, x);
        }
      tile_max = group_max<4>(tile_max);
      const float m_new = fmaxf(m[hf], tile_max);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m[hf] - m_use);
      m[hf] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * hf + e];
          x = exp2f(x - m_use);
          sum += x;
        }
      l[hf] = l[hf] * alpha + sum;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][2 * hf] *= alpha;
        o[n][2 * hf + 1] *= alpha;
      }
    }

    // O += P V, 16 keys per step (P is 0 and V zero-filled past valid_keys).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if (kk * 16 < valid_keys) {
        const uint32_t a[4] = {pack_pair<T>(s[2 * kk][0], s[2 * kk][1]), pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                               pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          if (n < v_tiles) {
            const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(Vs + (kk * 16 + ldm_key) * DP + n * 8 + ldm_col));
            uint32_t b0, b1, b2, b3;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                         : "r"(addr));
            mma16816<T>(o[n], a, b0, b1);
            mma16816<T>(o[n + 1], a, b2, b3);
          }
        }
      }
    }
  }

  // Element e of half hf of tile n is value column n * 8 + 2t + e of row g + 8 hf.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float l_row = group_sum<4>(l[hf]);
    if (!valid[hf]) continue;
    const int h = tile.head(row[hf]);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = n * 8 + 2 * t + e;
        if (c < p.Ev) store_row_value<T>(p, b, h, pos[hf], c, o[n][2 * hf + e], l_row);
      }
    if (t == 0) store_row_stats(p, b, h, pos[hf], m[hf], l_row);
  }
}

// ---- launch ----------------------------------------------------------------------------------------
template <int RPT_, int RG_, int KL_, int KPT_> struct TileConfig {
  static constexpr int RPT = RPT_, RG = RG_, KL = KL_, KPT = KPT_;
  static constexpr int kThreads = RG * KL, kRows = RPT * RG, kKeys = KL * KPT;
};
using DecodeTiles = TileConfig<4, 4, 32, 2>;    // 16 rows (a GQA group's decode rows), 64 keys, 128 threads
using PrefillTiles = TileConfig<4, 16, 16, 4>;  // 64 rows, 64 keys, 256 threads
using Float64Tiles = TileConfig<4, 4, 32, 1>;   // 16 rows, 32 keys: double tiles fit the shared memory

/// Picks the row tiles (Lb positions x Gb heads of one group, at most `rows`) and the key splits
/// for a kernel, then launches it (and the combine pass when the keys are split).
template <class T, class Acc, class Kernel>
void launch_tiles(Kernel kernel, AttentionParams p, int threads, size_t smem, int rows, int keys, int device, const Tensor& out) {
  const cudaDeviceProp& props = device_properties(device);
  EMBER_CHECK(smem <= props.sharedMemPerBlockOptin, kOp, "shared memory for head dims {} and {}: expected at most {} bytes, got {}",
              p.E, p.Ev, props.sharedMemPerBlockOptin, smem);
  if (smem > 48 * 1024)
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));

  p.rows_per_head = std::min(p.L, rows);
  p.heads_per_tile = std::max(1, std::min(p.group, rows / p.rows_per_head));
  p.head_tiles = (p.group + p.heads_per_tile - 1) / p.heads_per_tile;
  p.pos_tiles = (p.L + p.rows_per_head - 1) / p.rows_per_head;
  const int64_t blocks = static_cast<int64_t>(p.B) * (p.H / p.group) * p.head_tiles * p.pos_tiles;
  EMBER_CHECK(blocks <= INT_MAX, kOp, "grid size: expected at most {} blocks, got {}", INT_MAX, blocks);

  // Split the keys when the row tiles leave SMs idle.
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int64_t target = static_cast<int64_t>(std::max(per_sm, 1)) * props.multiProcessorCount;
  int64_t splits = 1;
  if (blocks < target) splits = std::min<int64_t>({(target + blocks - 1) / blocks, (p.S + keys - 1) / keys, kMaxSplits});
  const int64_t per_split = (p.S + splits - 1) / splits;
  p.split_chunk = static_cast<int>((per_split + keys - 1) / keys * keys);
  p.splits = static_cast<int>((p.S + p.split_chunk - 1) / p.split_chunk);

  const cudaStream_t stream = current_raw_stream(device);
  const int64_t rows_total = static_cast<int64_t>(p.B) * p.H * p.L;
  if (p.splits == 1) {
    kernel<<<dim3(static_cast<unsigned>(blocks), 1), threads, smem, stream>>>(p);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  EMBER_CHECK(rows_total <= INT_MAX, kOp, "query rows: expected at most {}, got {}", INT_MAX, rows_total);
  DeviceBuffer workspace(sizeof(Acc) * static_cast<size_t>(p.splits * rows_total) * (p.Ev + 2), out.device());
  p.partial_out = workspace.get<Acc>();
  p.partial_ml = workspace.get<Acc>() + static_cast<size_t>(p.splits * rows_total) * p.Ev;
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(p.splits)), threads, smem, stream>>>(p);
  EMBER_CUDA_CHECK_LAUNCH();
  combine_kernel<T, Acc><<<static_cast<unsigned>(rows_total), kCombineThreads, 0, stream>>>(p);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class T, class Acc, class Tiles, int EV_MAX> void launch_cuda_cores(const AttentionParams& p, int device, const Tensor& out) {
  constexpr int R = Tiles::kRows, KT = Tiles::kKeys;
  const size_t smem = sizeof(Acc) * (static_cast<size_t>(R) * p.Ep + static_cast<size_t>(R) * (KT + 4)) +
                      sizeof(T) * static_cast<size_t>(KT) * (p.Ep + p.Evs);
  launch_tiles<T, Acc>(attention_kernel<T, Acc, Tiles::RPT, Tiles::RG, Tiles::KL, Tiles::KPT, EV_MAX / Tiles::KL>, p,
                       Tiles::kThreads, smem, R, KT, device, out);
}

template <class T, class Acc, class Tiles> void launch_cuda_cores(const AttentionParams& p, int device, const Tensor& out) {
  if (p.Ev <= 128) launch_cuda_cores<T, Acc, Tiles, 128>(p, device, out);
  else launch_cuda_cores<T, Acc, Tiles, kMaxHeadDim>(p, device, out);
}

template <class T, int D> void launch_mma(const AttentionParams& p, int device, const Tensor& out) {
  const size_t smem = sizeof(T) * static_cast<size_t>(kMmaRows + 2 * kMmaKeys) * (D + 8);
  launch_tiles<T, float>(attention_mma_kernel<T, D>, p, kMmaThreads, smem, kMmaRows, kMmaKeys, device, out);
}

template <class T> void launch_mma(const AttentionParams& p, int device, const Tensor& out) {
  const int d = std::max(p.E, p.Ev);
  if (d <= 64) launch_mma<T, 64>(p, device, out);
  else if (d <= 128) launch_mma<T, 128>(p, device, out);
  else launch_mma<T, kMaxHeadDim>(p, device, out);
}

void copy_strides(const Tensor& x, int64_t (&dst)[4]) {
  for (int d = 0; d < 4; ++d) dst[d] = x.size(d) == 1 ? 0 : x.stride(d);
}

/// Whether x's rows can be read with 16-byte loads: unit stride along the last dim, whose length
/// and every other used stride are multiples of 16 bytes, from a 16-byte aligned address.
bool rows_vectorizable(const Tensor& x) {
  const auto vec = static_cast<int64_t>(16 / x.itemsize());
  if (x.size(3) % vec != 0 || (x.size(3) > 1 && x.stride(3) != 1)) return false;
  for (int d = 0; d < 3; ++d)
    if (x.size(d) > 1 && x.stride(d) % vec != 0) return false;
  return reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0;
}

}  // namespace

void scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                                  double scale, const Tensor& out) {
  const DType d = q.dtype();
  EMBER_CHECK(d == kFloat32 || d == kFloat16 || d == kBFloat16 || d == kFloat64, kOp,
              "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  const int64_t E = q.size(3), Ev = v.size(3);
  EMBER_CHECK(E <= kMaxHeadDim && Ev <= kMaxHeadDim, kOp, "head dims on CUDA: expected E and Ev at most {}, got {} and {}",
              kMaxHeadDim, E, Ev);
  for (int64_t s : {q.size(0), q.size(1), q.size(2), k.size(2)})
    EMBER_CHECK(s <= INT_MAX, kOp, "sizes: expected batch, heads and lengths at most {}, got {}", INT_MAX, s);
  DeviceGuard guard(out.device().index);
  const int device = out.device().index;

  AttentionParams p{};
  p.q = q.raw_data();
  p.k = k.raw_data();
  p.v = v.raw_data();
  p.out = out.raw_data();
  copy_strides(q, p.q_stride);
  copy_strides(k, p.k_stride);
  copy_strides(v, p.v_stride);
  copy_strides(out, p.out_stride);
  p.B = static_cast<int>(q.size(0));
  p.H = static_cast<int>(q.size(1));
  p.L = static_cast<int>(q.size(2));
  p.S = static_cast<int>(k.size(2));
  p.E = static_cast<int>(E);
  p.Ev = static_cast<int>(Ev);
  p.E4 = (p.E + 3) / 4 * 4;
  p.Ep = (p.E4 / 4) % 2 == 1 ? p.E4 : p.E4 + 4;  // an odd number of 4-element groups: conflict-free rows
  p.Evs = (p.Ev + 7) / 8 * 8;
  p.group_k = static_cast<int>(q.size(1) / k.size(1));
  p.group_v = static_cast<int>(q.size(1) / v.size(1));
  p.group = std::gcd(p.group_k, p.group_v);
  p.causal = causal;
  p.vec_k = rows_vectorizable(k);
  p.vec_v = rows_vectorizable(v);
  p.scale_log2 = scale * kLog2e;
  p.mask_kind = kNoMask;
  if (mask.defined()) {
    p.mask = mask.raw_data();
    copy_strides(mask, p.mask_stride);
    p.mask_kind = mask.dtype() == kBool ? kBoolMask : mask.dtype() == kFloat32 ? kFloat32Mask : kNativeMask;
  }

  // Few query rows per kv head (decode): one block takes the rows of a whole GQA group. Otherwise
  // the tensor cores for f16/bf16 (sm_80+, unless EMBER_DISABLE_FAST_PATHS=1).
  const bool decode_tiles = static_cast<int64_t>(p.group) * p.L <= DecodeTiles::kRows;
  const bool tensor_cores = !decode_tiles && (d == kFloat16 || d == kBFloat16) && fast_paths_enabled(device, 80);
  if (d == kFloat64) return launch_cuda_cores<double, double, Float64Tiles>(p, device, out);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores) return launch_mma<T>(p, device, out);
    }
    if (decode_tiles) launch_cuda_cores<T, float, DecodeTiles>(p, device, out);
    else launch_cuda_cores<T, float, PrefillTiles>(p, device, out);
  };
  if (d == kFloat32) run(type_tag<float>{});
  else if (d == kFloat16) run(type_tag<__half>{});
  else run(type_tag<__nv_bfloat16>{});
}

}  // namespace ember::cuda
