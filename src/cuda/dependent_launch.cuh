// Programmatic dependent launch (sm_90+), shared by the decode kernels (gemv.cu, scaled_mm.cu,
// moe.cu). A kernel launched with the attribute (DependentLaunch below) may start while the kernel
// before it on the stream still runs, once every block of that kernel has called
// dependents_may_launch (or exited); it must call wait_for_previous_kernel before it touches
// global memory that an earlier kernel may write or read, since the wait returns only when the
// previous grid has completed and its writes are visible. (moe.cu's down kernels load expert
// weights before their wait: their predecessor, the layer's gate_up, triggers only after its own
// wait, so every kernel before the layer has completed by then.) Every kernel launched with the
// attribute must wait on every path: one that exits without waiting can complete before its own
// predecessor, and the kernel after it would no longer be ordered after that predecessor.
//
// What overlaps is the next kernel's launch and block scheduling with the tail of this one.
// Measured with bench/stream_probe.cu (H200, session 10), a chain of reads of 16.8 / 58.7 / 117 MB:
// - "pdl": trigger and wait at the start, grids of 4 or 8 blocks per SM: 5.28 -> 4.95, 14.60 ->
//   14.28 and 27.43 -> 27.14 us per launch.
// - Requesting the first weights into the L2 before the wait (always coherent: the L2 is the
//   GPU's point of coherence) was slower above 4 MB (58.7 MB: 15.2-15.6 us), as it was in the
//   MoE layer (moe.cu's versions). So nothing is requested before the wait.
// - "pdlgrid": a trigger at the start loses badly when the grid is not a whole number of blocks
//   per SM (117 MB, 448 / 600 / 792 blocks of 256 threads: 27.9 -> 31.9 / 39.4 / 33.2 us, against
//   528 and 1056 blocks: 27.8 -> 27.5, 27.6 -> 27.2). The next grid's blocks become resident
//   early, wherever slots are free, and so start unevenly spread over the SMs. Triggering after
//   the block's main loop avoids most of it (14.5-14.7 us at 58.7 MB for every grid size).
//   gemv.cu triggers there, and still launches plainly from 16 MiB of weights, where its columns
//   kernels measured slower.
// Without the attribute, or below sm_90, both calls are no-ops.
#pragma once
#include <cuda_runtime.h>

#include "cuda/runtime.h"

namespace ember::cuda {

/// Whether a decode GEMV (gemv.cu, fp8_linear.cu) streaming `weight_bytes` of weights goes out as a
/// programmatic dependent launch: where they are enabled, and below 16 MiB of weights only (from
/// there up gemv.cu's columns kernels measured slower so; its launch rule has the numbers).
inline bool decode_gemv_dependent(int64_t weight_bytes, int device) {
  return weight_bytes < (int64_t{16} << 20) && dependent_launches_enabled(device);
}

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

/// A cudaLaunchKernelEx configuration: a programmatic dependent launch when `dependent` (the
/// kernel must call wait_for_previous_kernel before touching global memory), and optionally a
/// thread-block cluster.
struct DependentLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attributes[2]{};
  DependentLaunch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool dependent) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attributes;
    if (dependent) {
      attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attributes[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
      ++config.numAttrs;
    }
  }
  /// Clusters of `cluster` blocks along x or y.
  DependentLaunch& cluster_x(unsigned cluster) { return cluster_dims(cluster, 1); }
  DependentLaunch& cluster_y(unsigned cluster) { return cluster_dims(1, cluster); }
  DependentLaunch(const DependentLaunch&) = delete;  // config points at attributes
  DependentLaunch& operator=(const DependentLaunch&) = delete;

  /// Before the launch, the kernel's shared memory carveout as small as its resident blocks allow
  /// (prefer_l1_carveout): the rest is L1, which holds the loads in flight.
  DependentLaunch& prefer_l1() {
    prefer_l1_ = true;
    return *this;
  }

  template <class... Params, class... Args> void operator()(void (*kernel)(Params...), const Args&... args) const {
    if (prefer_l1_)
      prefer_l1_carveout(reinterpret_cast<const void*>(kernel), static_cast<int>(config.blockDim.x * config.blockDim.y * config.blockDim.z),
                         config.dynamicSmemBytes);
    EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
  }

 private:
  bool prefer_l1_ = false;
  DependentLaunch& cluster_dims(unsigned x, unsigned y) {
    cudaLaunchAttribute& a = attributes[config.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = x;
    a.val.clusterDim.y = y;
    a.val.clusterDim.z = 1;
    return *this;
  }
};

}  // namespace ember::cuda
