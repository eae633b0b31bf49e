// Does the split-K columns GEMV (src/cuda/gemv.cu's columns_kernel, y = x B with B [K, N]
// row-major, bf16) end sooner when its blocks claim their rows of K as they go? A standalone probe
// (no ember), session 23.
//
// Why: per-block %globaltimer stamps of columns_kernel on 1xKxN 14336x3584 (session 23, H200; 658
// blocks, 5 per SM in that build, 47 splits of 305 rows per 256-column tile) put every block's start within
// 0.54 us, but the main loops end 19.8-24.2 us (mean 22.9) and the last tile's y is written 1.4 us
// after the last loop. The SMs fall into groups: ~20 SMs (ids 33-43, 78-87 on that machine) ended
// 21.7-22.7 us, the rest 23-24.2, every SM with the same 5 blocks. With equal static shares the
// fast SMs idle while the slow ones finish.
//
// Variants, each a grid of one wave of resident blocks bound to a column tile as the baseline's:
//   static     gemv.cu's columns_kernel as of v14 (split K equally, 4 rows per batch per thread).
//   claims RxA @B  (B: the launch bounds' blocks per SM) the tile's rows in units of 8 R rows (R per warp), taken from a per-tile counter
//              by the block's thread 0 A units before they are loaded (atomics in flight, their
//              results moved into a shared ring one unit before use), so the block keeps R x A
//              rows per thread in flight and no load waits for a claim; the tail is the
//              baseline's (atomics into an f32 accumulator, a ticket, the last block writes y and
//              zeroes the accumulator, the ticket and the counter).
// Each variant's y is checked against a float64 host product; timed as the decode bench times
// GEMV (a CUDA graph of 20 launches over weight copies adding up to >= 400 MB, median of 5
// replays / 20).
//
// NOT RUN YET: written in session 23 after its device time was spent (compiled for sm_90a only).
// Run: `PROBES=columns_claims_probe bash scripts/gpu_check.sh probe`. The line to beat is 3.9 TB/s
// on 14336x3584 and 14336x4096 (issue #4): ember's kernel gave 26.95 us (3.81 TB/s) and 29.90
// (3.93) in session 23's stamps build (5 blocks per SM; sessions 17-19's tables: 26.6-27.8 us and
// 29.9-31.2 at 6).
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "probe_bf16.cuh"

namespace {

constexpr int kThreads = 256, kSlices = 8, kTile = 256;  // 32 threads x 8 columns across, 8 warps down

__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ void fma8(const uint4& r, float xv, float (&acc)[8]) {
  const uint32_t ws[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] = fmaf(xv, bf_lo(ws[i]), acc[2 * i]);
    acc[2 * i + 1] = fmaf(xv, bf_hi(ws[i]), acc[2 * i + 1]);
  }
}
__device__ __forceinline__ float x_at(const uint16_t* x, int64_t i) { return __uint_as_float(static_cast<uint32_t>(x[i]) << 16); }

// The split's end, shared by both kernels: the block's slices summed in shared memory, added into
// accum; the tile's last block (by ticket) writes y and zeroes accum, its ticket and `counter`.
__device__ __forceinline__ void finish_tile(const float (&acc)[8], uint16_t* y, int64_t n, float* accum, unsigned* tickets,
                                            unsigned* counter, unsigned blocks_per_tile) {
  __shared__ float sums[kSlices][kTile];
  __shared__ bool last;
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < 8; ++j) sums[slice][col_thread * 8 + j] = acc[j];
  __syncthreads();
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int t = threadIdx.x; t < kTile; t += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) s += sums[sl][t];
    if (tile0 + t < n) atomicAdd(&accum[tile0 + t], s);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == blocks_per_tile - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int t = threadIdx.x; t < kTile; t += kThreads) {
    if (tile0 + t >= n) continue;
    const float s = __ldcg(&accum[tile0 + t]);
    accum[tile0 + t] = 0.f;
    y[tile0 + t] = __bfloat16_as_ushort(__float2bfloat16(s));
  }
  if (threadIdx.x == 0) {
    tickets[blockIdx.x] = 0;
    if (counter) *counter = 0;
  }
}

// gemv.cu's columns_kernel<bf16, VEC> (v14) without bias and PDL; bounded to 6 blocks per SM, as
// ptxas places gemv.cu's kernel (40 registers; this copy took 44 unbounded, 40 and 4 bytes of
// spills bounded). The claims kernels spill at 6 per SM (2x2: 50 bytes), so they run 4 or 5.
__global__ void __launch_bounds__(kThreads, 6) static_kernel(const uint16_t* __restrict__ b, int64_t ldb, const uint16_t* __restrict__ x,
                                                          uint16_t* __restrict__ y, int64_t n, int64_t k, int64_t k_per_split,
                                                          float* __restrict__ accum, unsigned* __restrict__ tickets) {
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile + col_thread * 8;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_per_split, k_end = min(k, k_begin + k_per_split);
  float acc[8] = {};
  if (col0 < n) {
    int64_t kk = k_begin + slice;
    for (; kk + 3 * kSlices < k_end; kk += 4 * kSlices) {
      uint4 r[4];
      float xs[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        r[u] = *reinterpret_cast<const uint4*>(b + (kk + u * kSlices) * ldb + col0);
        xs[u] = x_at(x, kk + u * kSlices);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) fma8(r[u], xs[u], acc);
    }
    if (kk < k_end) {
      uint4 r[3];
      float xs[3];
#pragma unroll
      for (int u = 0; u < 3; ++u) {
        const int64_t kr = kk + u * kSlices;
        r[u] = kr < k_end ? *reinterpret_cast<const uint4*>(b + kr * ldb + col0) : make_uint4(0, 0, 0, 0);
        xs[u] = kr < k_end ? x_at(x, kr) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < 3; ++u) fma8(r[u], xs[u], acc);
    }
  }
  finish_tile(acc, y, n, accum, tickets, nullptr, gridDim.y);
}

// Claims: unit u of the tile is rows [8 R u, 8 R (u + 1)); warp w takes rows 8 R u + w + 8 i,
// i < R. Slot s of the ring holds the unit loaded into r[s]; thread 0 keeps A claims in flight.
template <int R, int A, int kBlocksPerSm>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) claims_kernel(const uint16_t* __restrict__ b, int64_t ldb, const uint16_t* __restrict__ x,
                                                          uint16_t* __restrict__ y, int64_t n, int64_t k, float* __restrict__ accum,
                                                          unsigned* __restrict__ tickets, unsigned* __restrict__ counters) {
  const int col_thread = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile + col_thread * 8;
  const bool col_ok = col0 < n;
  const unsigned units = static_cast<unsigned>((k + 8 * R - 1) / (8 * R));
  unsigned* counter = counters + blockIdx.x;
  __shared__ unsigned ring[A];
  unsigned pending[A];
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < A; ++s) ring[s] = atomicAdd(counter, 1u);
#pragma unroll
    for (int s = 0; s < A; ++s) pending[s] = atomicAdd(counter, 1u);
  }
  __syncthreads();
  uint4 r[A][R];
  float xs[A][R];
  unsigned live = 0;  // bit s: slot s holds a unit of the tile (the same in every thread)
  const auto load = [&](int s) {
    const unsigned unit = ring[s];
    live = unit < units ? live | (1u << s) : live & ~(1u << s);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t row = static_cast<int64_t>(unit) * 8 * R + slice + 8 * i;
      const bool ok = unit < units && row < k && col_ok;
      r[s][i] = ok ? *reinterpret_cast<const uint4*>(b + row * ldb + col0) : make_uint4(0, 0, 0, 0);
      xs[s][i] = ok ? x_at(x, row) : 0.f;
    }
  };
#pragma unroll
  for (int s = 0; s < A; ++s) load(s);
  __syncthreads();  // every thread has read the ring before thread 0 refills slot 0 below
  float acc[8] = {};
  for (bool more = true; more;) {
#pragma unroll
    for (int s = 0; s < A; ++s) {
      if (!((live >> s) & 1u)) {  // claims grow, so every later slot is past the end too
        more = false;
        break;
      }
#pragma unroll
      for (int i = 0; i < R; ++i) fma8(r[s][i], xs[s][i], acc);
      if (threadIdx.x == 0) {
        ring[s] = pending[s];  // claimed A units ago
        pending[s] = atomicAdd(counter, 1u);
      }
      __syncthreads();
      load(s);
    }
  }
  finish_tile(acc, y, n, accum, tickets, counter, gridDim.y);
}

void run_shape(int64_t k, int64_t n) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t bytes = k * n * 2, copies = std::max<int64_t>(2, (400ll << 20) / bytes + 1);
  std::vector<uint16_t*> w(copies);
  for (auto& p : w) CHECK(cudaMalloc(&p, bytes));
  for (int64_t c = 0; c < copies; ++c) fill_bf16_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(w[c]), k * n, 100 + static_cast<uint32_t>(c));
  uint16_t *x, *y;
  CHECK(cudaMalloc(&x, k * 2));
  CHECK(cudaMalloc(&y, n * 2));
  fill_bf16_kernel<<<64, 256>>>(reinterpret_cast<__nv_bfloat16*>(x), k, 7);
  const int64_t tiles = (n + kTile - 1) / kTile;
  float* accum;
  unsigned *tickets, *counters;
  CHECK(cudaMalloc(&accum, n * 4));
  CHECK(cudaMalloc(&tickets, tiles * 4));
  CHECK(cudaMalloc(&counters, tiles * 4));
  CHECK(cudaMemset(accum, 0, n * 4));
  CHECK(cudaMemset(tickets, 0, tiles * 4));
  CHECK(cudaMemset(counters, 0, tiles * 4));
  // float64 reference of copy 0
  std::vector<uint16_t> hb(k * n), hx(k);
  CHECK(cudaMemcpy(hb.data(), w[0], bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hx.data(), x, k * 2, cudaMemcpyDeviceToHost));
  const std::vector<double> ref = gemv_reference(hb, hx, k, n, /*rows=*/false);
  double ref_max = 0;
  for (double v : ref) ref_max = std::max(ref_max, std::fabs(v));
  constexpr int kLaunches = 20;
  const auto report = [&](const char* name, auto launch) {
    std::vector<uint16_t> hy(n);
    CHECK(cudaMemset(y, 0xff, n * 2));
    launch(0, cudaStream_t{});
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
    const double err = max_relative_error(hy.data(), ref.data(), static_cast<int>(n), ref_max);
    float best = 1e30f, worst = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const float us = time_graph([&](cudaStream_t s) { for (int i = 0; i < kLaunches; ++i) launch(i % copies, s); }, kLaunches);
      best = std::min(best, us);
      worst = std::max(worst, us);
    }
    std::printf("%-14s 1xKxN %5lldx%-5lld %7.2f-%7.2f us  %5.2f TB/s  err %.1e %s\n", name, static_cast<long long>(k),
                static_cast<long long>(n), best, worst, bytes / (best * 1e-6) / 1e12, err, err > 1e-2 ? "FAIL" : "ok");
    std::fflush(stdout);
  };
  int occ_static = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_static, static_kernel, kThreads, 0));
  const int64_t splits = sms * occ_static / tiles, k_per_split = (k + splits - 1) / splits;
  const dim3 static_grid(static_cast<unsigned>(tiles), static_cast<unsigned>((k + k_per_split - 1) / k_per_split));
  std::printf("# %lld x %lld: static %lld splits of %lld rows (%d blocks per SM)\n", static_cast<long long>(k), static_cast<long long>(n),
              static_cast<long long>(static_grid.y), static_cast<long long>(k_per_split), occ_static);
  const auto run_static = [&](int64_t c, cudaStream_t s) {
    static_kernel<<<static_grid, kThreads, 0, s>>>(w[c], n, x, y, n, k, k_per_split, accum, tickets);
  };
  const auto claims = [&](const char* name, auto kernel) {
    int occ = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, kThreads, 0));
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::max<int64_t>(1, sms * occ / tiles)));
    std::printf("# %s: %u blocks per tile (%d per SM)\n", name, grid.y, occ);
    report(name, [&](int64_t c, cudaStream_t s) { kernel<<<grid, kThreads, 0, s>>>(w[c], n, x, y, n, k, accum, tickets, counters); });
  };
  for (int round = 0; round < 2; ++round) {
    report("static", run_static);
    claims("claims 2x2 @5", claims_kernel<2, 2, 5>);
    claims("claims 1x4 @4", claims_kernel<1, 4, 4>);
    claims("claims 2x3 @4", claims_kernel<2, 3, 4>);
  }
  for (auto* p : w) CHECK(cudaFree(p));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(accum));
  CHECK(cudaFree(tickets));
  CHECK(cudaFree(counters));
}

}  // namespace

int main() {
  for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{14336, 3584}, {14336, 4096}, {3584, 14336}, {8192, 8192}}) run_shape(k, n);
  return 0;
}
