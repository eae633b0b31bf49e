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
#include <cstdint>

#include "probe_timing.cuh"

template <int LOADS>
__global__ void __launch_bounds__(256) read_kernel(const uint4* __restrict__ src, size_t n_vec, unsigned* __restrict__ out) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i0 = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i0 < n_vec; i0 += LOADS * stride) {
    uint4 v[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const size_t i = i0 + u * stride;
      v[u] = i < n_vec ? src[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < LOADS; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  // One word per block, so the loads cannot be dropped.
  __shared__ unsigned block_acc;
  if (threadIdx.x == 0) block_acc = 0;
  __syncthreads();
  atomicXor(&block_acc, acc);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = block_acc;
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

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t buffer_bytes = size_t{4} << 30;  // 4 GB: at least 20 slots of the largest size
  unsigned char* buffer = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&buffer, buffer_bytes));
  CHECK(cudaMemset(buffer, 1, buffer_bytes));
  CHECK(cudaMalloc(&out, 65536 * sizeof(unsigned)));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
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
