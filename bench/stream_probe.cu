// How fast can one kernel read N bytes from HBM on this GPU, and what does a launch cost on top?
// A standalone probe (no ember): a plain read kernel (each thread issues LOADS independent 16-byte
// loads before using any, grid-stride, sums XORed into one word per block) over N bytes, for N
// from 1 MB to 200 MB, rotating through a 4 GB buffer, timed as a CUDA graph of launches whose
// bytes add up to at least 4x the L2 (so a replay reads from HBM), median of 5 replays. The time
// against N gives the fixed cost per launch (intercept) and the streaming bandwidth (slope): the
// floor for the decode kernels (a Qwen3-30B MoE layer at T = 1 reads 50 MB in gate_up, 25 MB in
// down; an FP8 GEMV 59 MB).
//
// Build and run on the GPU machine (no CMake needed):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/stream_probe.cu -o /tmp/stream_probe && /tmp/stream_probe
// Prints one line per (loads, blocks per SM, MB): microseconds and TB/s.
//
// "stream_probe pdl" (session 10): the same read kernel as a chain of programmatic dependent
// launches, the question being how much of the ~2 us per launch a decode GEMV can hide behind the
// kernel before it. Each launch triggers its dependents at its start, so the next launch's blocks
// become resident as this one's blocks retire (its tail); before griddepcontrol.wait they may only
// request their first bytes into the L2 (always safe: the L2 is the GPU's point of coherence, so a
// prefetch cannot return data older than the previous kernel's writes). Modes:
//   plain   ordinary launches (the number above);
//   pdl     programmatic dependent launches, nothing before the wait;
//   lines   pdl, each thread requests its first batch's lines (prefetch.global.L2) before the wait;
//   bulk    pdl, L threads of a block request its first batch's L 4 KB pieces with one
//           cp.async.bulk.prefetch.L2 each.
// "stream_probe pdlgrid": plain, pdl and late (pdl with the trigger after the main loop) for grids
// of 448, 528, 600, 792 and 1056 blocks (8 fit per SM), i.e. whole and partial blocks per SM.
// Measured (H200, session 10; src/cuda/dependent_launch.cuh has the reading):
//   pdl, 4/SM, us: 16.8 MB 5.28 -> 4.95 (lines 5.12, bulk 5.07), 58.7 MB 14.60 -> 14.28 (15.22,
//   15.18), 117 MB 27.43 -> 27.14 (27.98, 28.04); 4 MB 2.43 -> 2.02 (1.88, 1.86).
//   pdlgrid, 117 MB, plain / pdl / late: 448 blocks 27.96 / 31.86 / 28.66, 528 27.81 / 27.53 /
//   28.35, 600 27.89 / 39.37 / 28.29, 792 27.68 / 33.23 / 27.83, 1056 27.56 / 27.24 / 27.21;
//   58.7 MB: 448 14.81 / 16.54 / 14.69, 600 14.80 / 20.10 / 14.51, 1056 14.79 / 14.43 / 14.52.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "probe_timing.cuh"

// This thread's grid-stride share of src (from `first`, `stride` apart), LOADS loads in flight,
// XORed into one word.
template <int LOADS> __device__ __forceinline__ unsigned read_xor(const uint4* __restrict__ src, size_t n_vec, size_t first, size_t stride) {
  unsigned acc = 0;
  for (size_t i0 = first; i0 < n_vec; i0 += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const size_t i = i0 + u * stride;
      v[u] = i < n_vec ? src[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  return acc;
}

template <int LOADS>
__global__ void __launch_bounds__(256) read_kernel(const uint4* __restrict__ src, size_t n_vec, unsigned* __restrict__ out) {
  const unsigned acc = read_xor<LOADS>(src, n_vec, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                       static_cast<size_t>(gridDim.x) * blockDim.x);
  // One word per block, so the loads cannot be dropped.
  __shared__ unsigned block_acc;
  if (threadIdx.x == 0) block_acc = 0;
  __syncthreads();
  atomicXor(&block_acc, acc);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = block_acc;
}

enum class Mode { plain, pdl, lines, bulk, late };
const char* mode_name(Mode m) {
  return m == Mode::plain ? "plain" : m == Mode::pdl ? "pdl" : m == Mode::lines ? "lines" : m == Mode::bulk ? "bulk" : "late";
}

// read_kernel's loop after a programmatic-dependent-launch prologue (MODE).
template <int LOADS, Mode MODE>
__global__ void __launch_bounds__(256) chained_read_kernel(const uint4* __restrict__ src, size_t n_vec, unsigned* __restrict__ out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (MODE != Mode::plain && MODE != Mode::late) asm volatile("griddepcontrol.launch_dependents;" :::);
  if constexpr (MODE == Mode::lines) {
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const size_t i = first + u * stride;
      if (i < n_vec && i % 8 == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(src + i));  // one per 128-byte line
    }
  }
  if constexpr (MODE == Mode::bulk) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x * stride;  // thread u: piece u
    if (threadIdx.x < LOADS && i + blockDim.x <= n_vec)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src + i), "r"(static_cast<unsigned>(blockDim.x * 16)) : "memory");
  }
  if constexpr (MODE != Mode::plain) asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned acc = read_xor<LOADS>(src, n_vec, first, stride);
  if constexpr (MODE == Mode::late) asm volatile("griddepcontrol.launch_dependents;" :::);
  if (acc == 0x12345678u) out[blockIdx.x] = acc;  // keeps the loads; practically never true
}

template <int LOADS, Mode MODE>
float time_chain(const unsigned char* buffer, size_t buffer_bytes, size_t bytes, int blocks, unsigned* out) {
  const int launches = static_cast<int>(std::max<size_t>(20, (size_t{240} << 20) / bytes));
  const size_t slots = buffer_bytes / bytes;
  return time_graph(
      [&](cudaStream_t stream) {
        for (int l = 0; l < launches; ++l) {
          cudaLaunchConfig_t config{};
          config.gridDim = dim3(blocks);
          config.blockDim = dim3(256);
          config.stream = stream;
          cudaLaunchAttribute attribute{};
          attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attribute.val.programmaticStreamSerializationAllowed = 1;
          config.attrs = &attribute;
          config.numAttrs = MODE == Mode::plain ? 0 : 1;
          const auto* src = reinterpret_cast<const uint4*>(buffer + (l % slots) * bytes);
          CHECK(cudaLaunchKernelEx(&config, chained_read_kernel<LOADS, MODE>, src, bytes / 16, out));
        }
      },
      launches);
}

template <int LOADS> float time_reads(const unsigned char* buffer, size_t buffer_bytes, size_t bytes, int blocks, unsigned* out) {
  // Launches whose bytes add up to at least 4x the L2, at distinct offsets (>= 20 slots), so a
  // replay reads from HBM.
  const int launches = static_cast<int>(std::max<size_t>(10, (size_t{240} << 20) / bytes));
  const size_t slots = buffer_bytes / bytes;
  return time_graph(
      [&](cudaStream_t stream) {
        for (int l = 0; l < launches; ++l) {
          const auto* src = reinterpret_cast<const uint4*>(buffer + (l % slots) * bytes);
          read_kernel<LOADS><<<blocks, 256, 0, stream>>>(src, bytes / 16, out);
        }
      },
      launches);
}

// "stream_probe dispatch" (session 17): which SM runs each block of a one-wave grid shaped like
// the MoE layer's T = 1 gate_up (96 x 8 blocks of 128 threads, 6 per SM by shared memory)? The
// question is whether blocks b, b + SMs, b + 2 SMs, ... share an SM, so that a block order can
// give each SM the blocks of one (token, expert) pair. Measured (H200, 132 SMs, three runs alike):
// no; SM 0 ran blocks 8 140 272 412 536 668, SM 2 16 148 288 420 544 676, so the residue-major
// order left 2.21 pairs per SM (5.76 in grid order), and as a gate_up block order it lost
// (src/cuda/moe.cu, rejected in session 17).
__global__ void __launch_bounds__(128) smid_kernel(unsigned* __restrict__ smid) {
  extern __shared__ unsigned char pad[];
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    pad[0] = 1;
    smid[blockIdx.y * gridDim.x + blockIdx.x] = id + pad[0] - 1;
  }
}

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t buffer_bytes = size_t{4} << 30;  // 4 GB: at least 20 slots of the largest size
  unsigned char* buffer = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&buffer, buffer_bytes));
  CHECK(cudaMemset(buffer, 1, buffer_bytes));
  CHECK(cudaMalloc(&out, 65536 * sizeof(unsigned)));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  if (argc > 1 && std::string(argv[1]) == "dispatch") {
    const int X = 96, Y = 8, B = X * Y, M = prop.multiProcessorCount;
    const size_t smem = 36 * 1024;  // 6 blocks per SM by shared memory, as gate_up_mma_kernel's 6
    std::vector<unsigned> ids(B);
    for (int run = 0; run < 3; ++run) {
      smid_kernel<<<dim3(X, Y), 128, smem>>>(out);
      CHECK(cudaMemcpy(ids.data(), out, B * sizeof(unsigned), cudaMemcpyDeviceToHost));
      // Per SM: its blocks, whether they are all one residue mod M, and the pairs (b / X, and in
      // the residue-major order gate_up's trial uses) among them.
      int same_residue = 0, pairs_plain = 0, pairs_major = 0, sms_used = 0;
      const int full = B / M, rem = B % M;
      for (int sm = 0; sm < M; ++sm) {
        std::vector<int> blocks;
        for (int b = 0; b < B; ++b)
          if (static_cast<int>(ids[b]) == sm) blocks.push_back(b);
        if (blocks.empty()) continue;
        ++sms_used;
        bool one = true;
        std::vector<int> plain, major;
        for (int b : blocks) {
          one &= b % M == blocks[0] % M;
          const int r = b % M, i = b / M, pos = r < rem ? r * (full + 1) + i : rem * (full + 1) + (r - rem) * full + i;
          plain.push_back(b / X);
          major.push_back(pos / X);
        }
        same_residue += one;
        const auto distinct = [](std::vector<int> v) {
          std::sort(v.begin(), v.end());
          return static_cast<int>(std::unique(v.begin(), v.end()) - v.begin());
        };
        pairs_plain += distinct(plain);
        pairs_major += distinct(major);
        if (run == 0 && sm < 12) {
          std::printf("sm %3d:", sm);
          for (int b : blocks) std::printf(" %d", b);
          std::printf("\n");
        }
      }
      std::printf("run %d: %d SMs used; %d with all blocks one residue mod %d; pairs per SM %.2f (b / %d), %.2f (residue-major)\n", run,
                  sms_used, same_residue, M, static_cast<double>(pairs_plain) / sms_used, X, static_cast<double>(pairs_major) / sms_used);
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "pdlgrid") {
    // Grids that leave slots free (256 threads, 8 blocks per SM fit): does a chain of dependent
    // launches lose when the next grid's blocks can be resident early, wherever slots are free?
    std::printf("mode  blocks      MB        us     TB/s\n");
    for (double mb : {16.8, 58.7, 117.4})
      for (int blocks : {448, 528, 600, 792, 1056}) {
        const size_t bytes = static_cast<size_t>(mb * 1e6) / 4096 * 4096;
        const auto row = [&](Mode m, float us) { std::printf("%-5s %6d %7.1f %9.2f %8.2f\n", mode_name(m), blocks, mb, us, bytes / us / 1e6); };
        row(Mode::plain, time_chain<4, Mode::plain>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::pdl, time_chain<4, Mode::pdl>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::late, time_chain<4, Mode::late>(buffer, buffer_bytes, bytes, blocks, out));
      }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "pdl") {
    std::printf("mode  loads blocks/SM      MB        us     TB/s\n");
    for (int blocks_per_sm : {4, 8})
      for (double mb : {4.0, 16.8, 58.7, 117.4}) {
        const size_t bytes = static_cast<size_t>(mb * 1e6) / 4096 * 4096;
        const int blocks = blocks_per_sm * prop.multiProcessorCount;
        const auto row = [&](Mode m, int loads, float us) {
          std::printf("%-5s %5d %9d %7.1f %9.2f %8.2f\n", mode_name(m), loads, blocks_per_sm, mb, us, bytes / us / 1e6);
        };
        row(Mode::plain, 4, time_chain<4, Mode::plain>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::pdl, 4, time_chain<4, Mode::pdl>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::lines, 4, time_chain<4, Mode::lines>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::bulk, 4, time_chain<4, Mode::bulk>(buffer, buffer_bytes, bytes, blocks, out));
        row(Mode::bulk, 8, time_chain<8, Mode::bulk>(buffer, buffer_bytes, bytes, blocks, out));
      }
    return 0;
  }
  std::printf("loads blocks/SM      MB        us     TB/s\n");
  const int sizes_mb[] = {1, 4, 16, 25, 50, 100, 200};
  for (int blocks_per_sm : {4, 8}) {
    const int blocks = blocks_per_sm * prop.multiProcessorCount;
    for (int mb : sizes_mb) {
      const size_t bytes = static_cast<size_t>(mb) << 20;
      const float us2 = time_reads<2>(buffer, buffer_bytes, bytes, blocks, out);
      const float us4 = time_reads<4>(buffer, buffer_bytes, bytes, blocks, out);
      const float us8 = time_reads<8>(buffer, buffer_bytes, bytes, blocks, out);
      std::printf("2     %8d %7d %9.2f %8.2f\n", blocks_per_sm, mb, us2, bytes / us2 / 1e6);
      std::printf("4     %8d %7d %9.2f %8.2f\n", blocks_per_sm, mb, us4, bytes / us4 / 1e6);
      std::printf("8     %8d %7d %9.2f %8.2f\n", blocks_per_sm, mb, us8, bytes / us8 / 1e6);
    }
  }
  CHECK(cudaFree(buffer));
  CHECK(cudaFree(out));
  return 0;
}
