// The caching device allocator behind ember::cuda::allocate/deallocate, and the small pieces of
// the runtime it shares with src/cuda/runtime.cpp. Semantics follow PyTorch's
// CUDACachingAllocator: sizes rounded to 512 bytes, a small pool (<= 1 MiB, 2 MiB segments) and a
// large pool, block splitting and merging, blocks owned by their allocating stream, and
// record_stream deferring reuse until every recorded stream has passed the free.
#pragma once
#include <cuda_runtime.h>

#include "ember/cuda.h"

namespace ember::cuda {

/// Makes `device` current for its scope and restores the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
};

/// Throws ember::Error naming `op` and the availability reason unless CUDA is usable.
void require_available(const char* op);
/// Resolves -1 to the current device and throws ember::Error for an index out of range.
int resolve_device(int device, const char* op);

namespace allocator {

/// Caching: blocks are cached and reused (the default). Direct: cudaMalloc/cudaFree for every
/// allocation, for debugging memory errors with compute-sanitizer; statistics are still kept.
enum class Mode { Caching, Direct };
/// The mode, initially from EMBER_CUDA_ALLOC ("caching" or unset: Caching; "direct": Direct;
/// anything else throws ember::Error at the first allocation).
Mode mode();
/// Changes the mode for later allocations; blocks allocated before are released the way they
/// were allocated. Used by the tests.
void set_mode(Mode mode);

/// Marks the block at `ptr` (a pointer returned by allocate) as used on `stream`.
void record_stream(void* ptr, int device, cudaStream_t stream);
/// Returns blocks whose pending frees have completed on every recorded stream to their pool.
void process_events(int device);

}  // namespace allocator
}  // namespace ember::cuda
