// Tensor-core operand helpers shared by the CUDA kernels that call mma.sync directly (attention,
// grouped_mm's tiles, the MoE decode layer). Device code only; sm_80+ instructions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ember::cuda {

/// c += a (16x16, row-major) @ b (16x8, column-major) with f32 accumulation; T: __half or
/// __nv_bfloat16 operands. Fragments as the PTX ISA lays out m16n8k16: thread (g = lane / 4,
/// q = lane % 4) holds a = {A[g][2q..2q+1], A[g+8][2q..2q+1], A[g][2q+8..2q+9], A[g+8][2q+8..2q+9]},
/// b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g], c = {D[g][2q..2q+1], D[g+8][2q..2q+1]}.
template <class T> __device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "mma16816: f16 or bf16 operands");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Two e4m3 (or, with kFormat, e5m2) codes (the low 16 bits of `pair`, low byte first) as two T
/// values packed in 32 bits: exact, both formats fit f16 and bf16. For f16 one conversion
/// instruction. (A decode by integer operations, no conversions, was no faster in the MoE decode
/// kernels, moe.cu, session 18, nor in fp8_linear.cu's mma_rows_kernel, session 25.)
template <class T, __nv_fp8_interpretation_t kFormat = __NV_E4M3> __device__ __forceinline__ uint32_t decode_fp8x2(uint32_t pair) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), kFormat));
  uint32_t bits;
  if constexpr (std::is_same_v<T, __half>) {
    memcpy(&bits, &h, 4);
  } else {
    const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(h));
    memcpy(&bits, &b, 4);
  }
  return bits;
}

}  // namespace ember::cuda
