// Split-row softmax for decode: a few rows of a large vocabulary (1 x 128256 ... 8 x 248320).
//
// One block per row is torch's plan for this shape and leaves 131 of 132 SMs idle (33 us for
// 1 x 128256 fp32 on an H200, where the traffic is 1 MB: 0.25 us at HBM speed). Here each row is
// split over many blocks of one cooperative launch:
//   1. each block loads its slice into registers (16-byte loads), computes the slice max and
//      sum(exp(x - max)), and writes that pair to a workspace;
//   2. grid-wide sync (cooperative groups; the launch guarantees every block is resident);
//   3. each block combines its row's pairs (M = max m_i, S = sum s_i * exp(m_i - M)) and writes
//      exp(x - M) / S (or x - M - log S) from the registers: x is read once, out written once.
// Rows that start with, or are entirely, -inf: a slice whose max is -inf contributes s = 0 and
// never evaluates exp(-inf - -inf); an all -inf row gives M = -inf, S = 0 -> NaN, like torch.
//
// Versions tried: v1 two kernels (partials, then normalise re-reading x from L2) — two launches;
// v2 (this) one cooperative launch with the slice kept in registers.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/native_float.cuh"
#include "cuda/runtime.h"
#include "cuda/softmax_decode.h"

namespace ember::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 16;  // slice <= 256 * 16 = 4096 elements per block

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? scratch[lane] : (is_max ? -INFINITY : 0.f);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  return v;
}

// grid (blocks_per_row, rows). partial: [rows, blocks_per_row, 2] (max, sum).
template <class T, bool LOG>
__global__ void __launch_bounds__(kThreads) split_row_softmax(const T* __restrict__ x, T* __restrict__ out,
                                                              int64_t row_stride_x, int64_t row_stride_out, int64_t vocab,
                                                              int64_t slice, float2* __restrict__ partial) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.y, begin = static_cast<int64_t>(blockIdx.x) * slice;
  const int64_t end = min(vocab, begin + slice);
  const T* xr = x + row * row_stride_x;
  float v[kMaxPerThread];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int64_t i = begin + threadIdx.x + static_cast<int64_t>(j) * kThreads;
    v[j] = i < end ? to_float(xr[i]) : -INFINITY;
    m = fmaxf(m, v[j]);
  }
  m = block_reduce(m, true, scratch);
  float s = 0.f;
  if (m != -INFINITY) {
#pragma unroll
    for (int j = 0; j < kMaxPerThread; ++j) s += __expf(v[j] - m);
  }
  s = block_reduce(s, false, scratch);
  float2* pr = partial + row * gridDim.x;
  if (threadIdx.x == 0) pr[blockIdx.x] = make_float2(m, s);
  cg::this_grid().sync();
  // Combine the row's partial (max, sum) pairs; gridDim.x <= kThreads.
  const float2 p = threadIdx.x < gridDim.x ? __ldcg(&pr[threadIdx.x]) : make_float2(-INFINITY, 0.f);
  const float row_max = block_reduce(p.x, true, scratch);
  const float scaled = p.x == -INFINITY ? 0.f : p.y * __expf(p.x - row_max);
  const float row_sum = block_reduce(scaled, false, scratch);
  T* orow = out + row * row_stride_out;
  const float inv = 1.f / row_sum, log_sum = __logf(row_sum);
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int64_t i = begin + threadIdx.x + static_cast<int64_t>(j) * kThreads;
    if (i < end) orow[i] = from_float<T>(LOG ? v[j] - row_max - log_sum : __expf(v[j] - row_max) * inv);
  }
}

// Blocks of one cooperative launch that can be resident at once (cached per kernel and device).
template <class Kernel> int max_resident_blocks(Kernel kernel, int device) {
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return per_sm * device_properties(device).multiProcessorCount;
}

template <class T, bool LOG>
void launch(const Tensor& x, const Tensor& out, int64_t rows, int64_t vocab, int device) {
  auto kernel = split_row_softmax<T, LOG>;
  const int resident = max_resident_blocks(kernel, device);
  // As many blocks per row as fit (<= kThreads so the combine step is one pass), at least enough
  // that each slice fits the registers.
  const int64_t min_blocks = (vocab + kThreads * kMaxPerThread - 1) / (kThreads * kMaxPerThread);
  int64_t per_row = std::min<int64_t>(kThreads, resident / rows);
  per_row = std::max(per_row, min_blocks);
  int64_t slice = (vocab + per_row - 1) / per_row;
  slice = (slice + 31) / 32 * 32;
  per_row = (vocab + slice - 1) / slice;
  Tensor partial = empty({rows * per_row * 2}, kFloat32, out.device());
  const T* xp = static_cast<const T*>(x.raw_data());
  T* op = static_cast<T*>(out.raw_data());
  int64_t sx = x.dim() > 1 ? x.stride(-2) : vocab, so = out.dim() > 1 ? out.stride(-2) : vocab;
  auto* pp = reinterpret_cast<float2*>(partial.data_ptr<float>());
  void* args[] = {&xp, &op, &sx, &so, &vocab, &slice, &pp};
  const dim3 grid(static_cast<unsigned>(per_row), static_cast<unsigned>(rows));
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), grid, dim3(kThreads), args, 0,
                                               current_raw_stream(device)));
}

int64_t rows_of(const Tensor& x) { return x.numel() / std::max<int64_t>(x.size(-1), 1); }

}  // namespace

bool softmax_decode_applies(const Tensor& x, int64_t dim) {
  const DType d = x.dtype();
  if (d != kFloat32 && d != kFloat16 && d != kBFloat16) return false;
  if (x.dim() == 0 || dim != x.dim() - 1 || x.stride(-1) != 1) return false;
  const int64_t vocab = x.size(-1), rows = rows_of(x);
  if (vocab < 4096 || rows == 0 || rows > 64) return false;
  // Rows must be evenly strided (a [rows, vocab] view) for the kernel's row indexing.
  for (int64_t i = 0; i + 2 < x.dim(); ++i)
    if (x.size(i) != 1 && x.stride(i) != x.stride(i + 1) * x.size(i + 1)) return false;
  const int device = x.device().index;
  const int resident = max_resident_blocks(split_row_softmax<float, false>, device);
  const int64_t need = (vocab + kThreads * kMaxPerThread - 1) / (kThreads * kMaxPerThread);
  return need * rows <= resident && need <= kThreads;
}

void softmax_decode(const Tensor& x, bool log, const Tensor& out) {
  const int device = x.device().index;
  const int64_t rows = rows_of(x), vocab = x.size(-1);
  auto run = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (log) launch<T, true>(x, out, rows, vocab, device);
    else launch<T, false>(x, out, rows, vocab, device);
  };
  if (x.dtype() == kFloat32) run(static_cast<float*>(nullptr));
  else if (x.dtype() == kFloat16) run(static_cast<__half*>(nullptr));
  else run(static_cast<__nv_bfloat16*>(nullptr));
}

}  // namespace ember::cuda
