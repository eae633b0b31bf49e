// Internal CUDA runtime helpers shared by the runtime (.cpp) and the kernels (.cu): error
// checking, the current stream, device properties, capability gating and the device error word.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ember/cuda.h"
#include "ember/error.h"

/// Throws ember::Error("[cuda] <call> failed: <cudaGetErrorString>") when a CUDA call fails.
#define EMBER_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t ember_cuda_status_ = (expr);                                              \
    if (ember_cuda_status_ != cudaSuccess) ::ember::cuda::throw_cuda_error(#expr, ember_cuda_status_); \
  } while (0)
/// After a kernel launch: throws if the launch failed.
#define EMBER_CUDA_CHECK_LAUNCH() EMBER_CUDA_CHECK(cudaGetLastError())

namespace ember::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status);

/// The raw cudaStream_t of the current stream of `device` (-1: current device).
cudaStream_t current_raw_stream(int device = -1);
/// Whether p is 16-byte aligned, as the vector kernels' 16-byte loads need.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
/// Cached cudaDeviceProp of a device.
const cudaDeviceProp& device_properties(int device);
/// compute capability as major*10+minor (90 for sm_90).
int compute_capability(int device);
/// Whether capability-gated fast paths (wgmma/TMA on sm_90, FP8 tensor cores on sm_89+) may run:
/// false when EMBER_DISABLE_FAST_PATHS=1 or the device lacks the capability `min_capability`.
/// EMBER_FORCE_FAST_PATHS=1 on a device without the capability throws instead of being ignored.
bool fast_paths_enabled(int device, int min_capability);
/// The PTX version (major*10+minor of the compute_XX target) that `kernel` (a __global__
/// function's address) runs from on `device`, cached: below 90 the binary carries no
/// sm_90 code for it, and kernels that compile their cluster code for sm_90 only must not be
/// launched as clusters.
int kernel_ptx_version(const void* kernel, int device);
/// Blocks of `threads` threads of `kernel` (a __global__ function's address) resident per SM of
/// `device` at once, at least 1; cached per kernel, block size and device (eager calls are
/// host-bound, and the query is not free).
int resident_blocks_per_sm(const void* kernel, int threads, int device);
/// Whether the decode kernels go out as programmatic dependent launches (dependent_launch.cuh):
/// fast paths on sm_90 or newer, unless EMBER_DISABLE_PDL=1 (for profilers, and to measure what
/// the overlap gives).
bool dependent_launches_enabled(int device);

/// Per (device, stream, purpose) scratch of at least `bytes`, zero when first handed out, for
/// kernels that finish with a "last block" ticket or pass flags between kernels (the MoE decode
/// layer's expert_ready): they must leave it zero again, so no memset
/// launch is needed per call and the launch can be captured in a CUDA graph. Separate per stream
/// so concurrent kernels never share counters. Growing it queues a memset on `stream`.
enum class ScratchPurpose { GemvSplitK, MoeRouter, MoeExpertReady };
void* zeroed_stream_scratch(int device, cudaStream_t stream, ScratchPurpose purpose, size_t bytes);

/// Device error word: kernels that meet bad user data they cannot report synchronously (an
/// index out of range) write a code here with atomicExch/atomicCAS and skip the element, never
/// reading out of bounds. The runtime checks the word at every host synchronisation point
/// (copy to host, synchronize(), Stream/Event synchronize) and throws ember::Error describing
/// the first error, then clears it.
struct DeviceError {
  int code;         // 0: none; DeviceErrorCode otherwise
  long long value;  // the offending value (e.g. the index)
  long long bound;  // the valid bound (e.g. the size of the indexed dim)
};
enum DeviceErrorCode : int { kNoDeviceError = 0, kIndexOutOfRange = 1 };
/// Device pointer to the error word of `device` (allocated once, zeroed).
DeviceError* device_error_word(int device);
/// Throws if a kernel recorded an error on `device` (reads the word; call after a sync).
void check_device_error(int device);

/// Sets `kernel`'s preferred shared memory carveout on the current device to the least that holds
/// as many blocks of `threads` threads and `dynamic_smem` bytes as its registers allow per SM, so
/// the rest of the SM's L1/shared array stays L1 (the driver gave the MoE decode gate_up kernel
/// 100 KB of shared memory where its 6 blocks need 32 KB). Done again only when the need changes.
void prefer_l1_carveout(const void* kernel, int threads, size_t dynamic_smem);

/// Lets `kernel` launch with up to `dynamic_smem` bytes of dynamic shared memory on the current
/// device (above the 48 KB a launch gets without opting in). Done again only when it grows.
void allow_dynamic_smem(const void* kernel, size_t dynamic_smem);

}  // namespace ember::cuda
