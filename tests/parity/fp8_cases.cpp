// scaled_mm and FP8 quantization: CUDA vs the CPU reference. Shapes reach every CUDA path: the
// fp8 GEMV (M <= 16, w.t() layout, K % 16 == 0; tensor cores on sm_89+), cuBLASLt (large M,
// sm_89+), and the generic path (odd K, row-major b, fp8 output). Hopper's FP8 tensor cores
// accumulate with less than f32 precision inside one instruction (~1e-4 relative, seen on the
// H200), so the tensor-core cases allow 1e-3 (f32 out) or bf16/f16 rounding at the operands' scale.
#include "parity/harness.h"

namespace ember::test {
namespace {

std::vector<Tensor> scaled(Device d, int64_t m, int64_t k, int64_t n, bool rowwise, DType out, bool bias,
                           bool w_transposed = true, DType b_dtype = kFloat8_e4m3fn, bool fast_accum = false,
                           double magnitude = 1.0) {
  const Tensor a = (randn_on(d, {m, k}, kFloat32, 11) * magnitude).to(kFloat8_e4m3fn);
  const Tensor b = w_transposed ? (randn_on(d, {n, k}, kFloat32, 12) * magnitude).to(b_dtype).t()
                                : randn_on(d, {k, n}, kFloat32, 12).to(b_dtype);
  const Tensor sa = rowwise ? rand_on(d, {m, 1}, kFloat32, 13) : rand_on(d, {}, kFloat32, 13);
  const Tensor sb = rowwise ? rand_on(d, {1, n}, kFloat32, 14) : rand_on(d, {}, kFloat32, 14);
  std::optional<Tensor> bias_t;
  if (bias) bias_t = randn_on(d, {n}, out, 15);
  return {scaled_mm(a, b, sa, sb, bias_t, out, fast_accum)};
}

// M = 1 against a weight sliced from a wider one (row stride 2080 bytes > K = 2048).
std::vector<Tensor> m1_weight_slice(Device d, bool fast_accum) {
  const Tensor a = randn_on(d, {1, 2048}, kFloat32, 16).to(kFloat8_e4m3fn);
  const Tensor b = randn_on(d, {300, 2080}, kFloat32, 17).to(kFloat8_e4m3fn).narrow(1, 0, 2048).t();
  const Tensor sa = rand_on(d, {1, 1}, kFloat32, 18), sb = rand_on(d, {1, 300}, kFloat32, 19);
  return {scaled_mm(a, b, sa, sb, {}, kBFloat16, fast_accum)};
}

}  // namespace

EMBER_PARITY_CASE(scaled_mm_gemv_m1_tensorwise, { return scaled(d, 1, 4096, 1000, false, kBFloat16, false); });
EMBER_PARITY_CASE(scaled_mm_gemv_m1_rowwise_bias, { return scaled(d, 1, 2048, 777, true, kBFloat16, true); });
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m3_f32, 1e-3, 1e-3, { return scaled(d, 3, 512, 4097, true, kFloat32, false); });
// Small batches through the tensor-core GEMV: one and two n-tiles of 8 rows, K not a multiple
// of its 64-byte step, N not a multiple of its 16 rows, every output type.
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m8_k_tail, 1e-3, 1e-3, { return scaled(d, 8, 4112, 300, true, kFloat32, false); });
EMBER_PARITY_CASE(scaled_mm_gemv_m9_bf16_bias, { return scaled(d, 9, 1040, 17, true, kBFloat16, true); });
EMBER_PARITY_CASE(scaled_mm_gemv_m16_f16, { return scaled(d, 16, 2048, 1001, false, kFloat16, false); });
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_k16_n1, 1e-3, 1e-3, { return scaled(d, 1, 16, 1, false, kFloat32, false); });
EMBER_PARITY_CASE(scaled_mm_gemv_m4_f16_bias, { return scaled(d, 4, 1024, 300, false, kFloat16, true); });
// M = 1 on sm_89+ runs fp8_mma16_gemv (exact: f16 mma products, f32 sums, the CPU reference's
// values summed in another order) or, with use_fast_accum, fp8_core_gemv: whole batches of loads
// plus a tail (K = 8240: 515 chunks; K = 1040: 65).
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_exact_batches_and_tail, 1e-4, 1e-4, { return scaled(d, 1, 8240, 33, false, kFloat32, false); });
EMBER_PARITY_CASE(scaled_mm_gemv_m1_exact_k_tail_f16_bias, { return scaled(d, 1, 1040, 4097, true, kFloat16, true); });
// M = 1 against a weight slice (m1_weight_slice), both modes (fast: max|out| ~40 here, atol 0.05).
EMBER_PARITY_CASE(scaled_mm_gemv_m1_weight_slice, { return m1_weight_slice(d, false); });
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_fast_weight_slice, 1e-2, 0.05, { return m1_weight_slice(d, true); });
// M = 1 over >= 128 MB of weights goes to cuBLASLt (8192 x 16400 e4m3 = 134.3 MB): its FP8 tensor
// cores' reduced-precision partial sums at K = 8192 left errors up to 1.1e-3 on outputs up to ~0.15
// on the H200 (the default tolerance, atol 1e-3, failed 5 of 16400 elements).
EMBER_PARITY_CASE_TOL(scaled_mm_m1_large_lt, 1e-2, 3e-3, { return scaled(d, 1, 8192, 16400, false, kBFloat16, false); });
// Fast mode (use_fast_accum): half2 sums of 8 products, ~4e-4 of max|out| (here max|out| ~100,
// so atol 0.1; an error in the kernel's indexing or chunk scales is of the outputs' own size).
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_fast_bf16, 1e-2, 0.1, { return scaled(d, 1, 4096, 1000, false, kBFloat16, false, true, kFloat8_e4m3fn, true); });
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_fast_rowwise_bias_tail, 1e-2, 0.05, { return scaled(d, 1, 528, 77, true, kFloat16, true, true, kFloat8_e4m3fn, true); });
// Tiny operands (most e4m3 codes subnormal): each x chunk's power-of-two staging keeps the half2
// products normal; staged unscaled, most products would flush to zero. max|out| ~4e-3.
EMBER_PARITY_CASE_TOL(scaled_mm_gemv_m1_fast_tiny_values, 1e-2, 2e-6, { return scaled(d, 1, 2048, 300, false, kFloat32, false, true, kFloat8_e4m3fn, true, 1.0 / 128); });
EMBER_PARITY_CASE_TOL(scaled_mm_large_tensorwise, 1e-2, 2e-2, { return scaled(d, 256, 512, 384, false, kBFloat16, false); });
EMBER_PARITY_CASE_TOL(scaled_mm_large_rowwise_bias, 1e-2, 2e-2, { return scaled(d, 300, 256, 512, true, kBFloat16, true); });
EMBER_PARITY_CASE_TOL(scaled_mm_large_f32, 5e-3, 5e-3, { return scaled(d, 64, 128, 96, true, kFloat32, false); });
EMBER_PARITY_CASE(scaled_mm_odd_k_generic, { return scaled(d, 7, 33, 17, true, kBFloat16, true); });
EMBER_PARITY_CASE(scaled_mm_row_major_b_generic, { return scaled(d, 2, 64, 48, false, kFloat32, false, false); });
EMBER_PARITY_CASE_TOL(scaled_mm_e5m2_lt, 1e-3, 1e-3, { return scaled(d, 5, 64, 40, true, kFloat32, false, true, kFloat8_e5m2); });
EMBER_PARITY_CASE_TOL(scaled_mm_fp8_out, 0.07, 1e-2, { return scaled(d, 8, 64, 32, false, kFloat8_e4m3fn, false); });
EMBER_PARITY_CASE(quantize_fp8_rowwise, {
  auto [q, s] = quantize_fp8(randn_on(d, {130, 257}, kBFloat16, 16), Fp8Granularity::Rowwise);
  return {q.to(kFloat32), s};
});
EMBER_PARITY_CASE(quantize_fp8_block, {
  auto [q, s] = quantize_fp8(randn_on(d, {200, 300}, kFloat32, 17), Fp8Granularity::Block128);
  return {q.to(kFloat32), s};
});

}  // namespace ember::test
