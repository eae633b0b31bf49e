// Bulk copies from global to shared memory (sm_90: cp.async.bulk, the TMA's 1D copies) counted
// on shared-memory mbarriers: one thread announces a phase's bytes, any threads issue the copies,
// every consumer waits on the phase's parity. Below sm_90 these compile to nothing; kernels using
// them are launched only where compute capability >= 9.0 (fast_paths_enabled(device, 90)).
#pragma once

#include <cstdint>

namespace ember::cuda {

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n fence.mbarrier_init.release.cluster;" ::"r"(smem_u32(bar)) : "memory");
#endif
}
// The phase's one arrival, announcing `bytes` of bulk copies that complete on it.
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred ready;\n retry:\n mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n @!ready bra retry;\n}" ::"r"(
          smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this block's shared
// memory, completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#endif
}

}  // namespace ember::cuda
