// scaled_mm and FP8 quantization: CUDA vs the CPU reference. Shapes reach every CUDA path: the
// fp8 GEMV (M <= 16, w.t() layout, K % 16 == 0; tensor cores on sm_89+), cuBLASLt (large M,
// sm_89+), and the generic path (odd K, row-major b, fp8 output). Hopper's FP8 tensor cores
// accumulate with less than f32 precision inside one instruction (~1e-4 relative, seen on the
// H200), so the tensor-core cases allow 1e-3 (f32 out) or bf16/f16 rounding at the operands' scale.
#include <gtest/gtest.h>

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

namespace {

// ---- fp8_linear: CUDA vs the CPU reference (dequantize_fp8, then an f32 mm) ---------------------
// CUDA paths (src/cuda/fp8_linear.cu), for the weight unit-stride along K with 16-byte aligned rows
// and x rows unit-stride and 16-byte aligned: mma_rows_kernel (4, 8 or 16 warps a block) takes
// M = 2..8 of 16-bit x with K % 64 == 0; the rows kernel (16 or 32 lanes per weight row) the rest of
// M <= 8 with K % 16 == 0 (one row of 16-bit x, f32 x, K % 64 != 0); past them, e4m3fn weights run grouped_mm's run_rows (its decode kernel for <= 8 aligned rows, the mma
// tile kernel for bf16/f16 x, else the tiled kernel: wmma for bf16/f16 x, FMA for f32 x) plus a
// bias add, and e5m2 weights are dequantized to f32 and go through linear.
// Tolerances: every path multiplies exactly decoded codes by x and sums in f32, so CUDA and the
// CPU differ by f32 summation order (~1e-4 absolute on these outputs) before the output cast.
// bf16/f16 outputs (max |out| 36-260 in these cases, |out| ~ sqrt(K)) may then round to
// neighbouring values, one ulp = 2^-7 (bf16) relative: rtol 1e-2; the fallbacks' separate bias add
// rounds twice (at most half an ulp of |x @ w^T| more, relative to the output except where the bias
// cancels it, and then absolute < 0.01); atol 0.1 covers both with margin while a wrong scale or a
// missing block (errors of the outputs' own size, O(10)) fails. f32 outputs: rtol 1e-4, atol 1e-3
// (the f32 summation-order difference, ~1e-4 at |out| ~ 100, with margin).
enum class Fp8Scales { Tensorwise, Rowwise, Rowwise1d, Block128 };

// A [n, k] weight quantized on the CPU (the same codes on every device: a CUDA quantize_fp8 may
// round a code differently), its decoding scales then multiplied by 0.25 + U[0, 1) per scale
// element so that a scale read from the wrong row or block shows; both moved to d. Rowwise gives
// [n, 1] scales, Rowwise1d the same as [n], Block128 [ceil(n/128), ceil(k/128)], Tensorwise [].
std::pair<Tensor, Tensor> fp8_weight(Device d, int64_t n, int64_t k, Fp8Scales scales, DType dtype = kFloat8_e4m3fn,
                                     uint64_t seed = 31) {
  const Fp8Granularity g = scales == Fp8Scales::Tensorwise ? Fp8Granularity::Tensorwise
                           : scales == Fp8Scales::Block128 ? Fp8Granularity::Block128
                                                           : Fp8Granularity::Rowwise;
  auto [q, s] = quantize_fp8(randn_on(Device::cpu(), {n, k}, kFloat32, seed), g, dtype);
  s = s * (rand_on(Device::cpu(), s.sizes(), kFloat32, seed + 1) + 0.25);
  if (scales == Fp8Scales::Rowwise1d) s = s.reshape({n});
  return {q.to(d), s.to(d)};
}

// fp8_linear of x [m, k] (x_dtype) with an [n, k] weight; bias [n] of x's dtype when asked.
std::vector<Tensor> fp8_lin(Device d, int64_t m, int64_t k, int64_t n, DType x_dtype, Fp8Scales scales, bool bias,
                            DType w_dtype = kFloat8_e4m3fn) {
  const auto [w, s] = fp8_weight(d, n, k, scales, w_dtype);
  const Tensor x = randn_on(d, {m, k}, x_dtype, 33);
  std::optional<Tensor> b;
  if (bias) b = randn_on(d, {n}, x_dtype, 34);
  return {fp8_linear(x, w, s, b)};
}

// Both slices of a [300, 2080] weight (row stride 2080 bytes > K = 2048) and 2048 columns of it
// starting at `col` (0: block scales cropped to [3, 16], a non-contiguous view; else per-row scales).
std::vector<Tensor> fp8_lin_weight_slice(Device d, int64_t m, int64_t col) {
  auto [wide, s] = fp8_weight(d, 300, 2080, col == 0 ? Fp8Scales::Block128 : Fp8Scales::Rowwise);
  const Tensor w = wide.narrow(1, col, 2048);
  if (col == 0) s = s.narrow(1, 0, 16);
  return {fp8_linear(randn_on(d, {m, 2048}, kBFloat16, 35), w, s)};
}

// fp8_linear of x [m, 2048] with a [200, 2048] block-scaled weight holding special codes: e4m3fn
// NaN (0x7F, 0xFF) or e5m2 +inf, -inf and NaN (0x7C, 0xFC, 0x7E) at (row 3, column 100), (150,
// 2000) and (151, 1027). Those rows' outputs are NaN or +-inf, the rest finite. (The mma kernel's
// decode by bit moves makes these codes finite; it must see them and decode exactly.)
std::vector<Tensor> fp8_lin_specials(Device d, int64_t m, DType x_dtype, DType w_dtype) {
  auto [q, s] = quantize_fp8(randn_on(Device::cpu(), {200, 2048}, kFloat32, 31), Fp8Granularity::Block128, w_dtype);
  const bool e4m3 = w_dtype == kFloat8_e4m3fn;
  uint8_t* codes = static_cast<uint8_t*>(q.raw_data());
  codes[3 * 2048 + 100] = e4m3 ? 0x7F : 0x7C;
  codes[150 * 2048 + 2000] = e4m3 ? 0xFF : 0xFC;
  codes[151 * 2048 + 1027] = e4m3 ? 0x7F : 0x7E;
  return {fp8_linear(randn_on(d, {m, 2048}, x_dtype, 33), q.to(d), s.to(d))};
}

}  // namespace

// Rows kernel (M <= 8, K % 16 == 0, aligned). M = 1, block scales, N = 1000 (not a multiple of 128:
// the last scale row covers 104 weight rows); K = 2048 is one partial batch (128 of 256 units).
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m1_bf16_block, 1e-2, 0.1, { return fp8_lin(d, 1, 2048, 1000, kBFloat16, Fp8Scales::Block128, false); });
// Rows kernel, K = 4112: one whole batch (8 loads of 16 codes per lane = 4096 codes) and a tail
// batch of one load; f16 x, bias, per-row scales given as a 1-D [N] tensor.
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m1_f16_k_tail_rowwise1d_bias, 1e-2, 0.1, { return fp8_lin(d, 1, 4112, 777, kFloat16, Fp8Scales::Rowwise1d, true); });
// Rows kernel, K = 8192: two whole batches, no tail; M = 4 (R = 4) of f32 x, block scales (64 per row).
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m4_f32_whole_batches_block, 1e-4, 1e-3, { return fp8_lin(d, 4, 8192, 260, kFloat32, Fp8Scales::Block128, false); });
// Rows kernel R = 4 with m = 3 < R (the fourth row unused), K = 2064 (not a multiple of 64),
// tensorwise scale (a 0-dim tensor).
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m3_bf16_k2064_tensorwise, 1e-2, 0.1, { return fp8_lin(d, 3, 2064, 1000, kBFloat16, Fp8Scales::Tensorwise, false); });
// Rows kernel R = 8 with m = 5 < R, K = 1008, f16 x, [N, 1] per-row scales, bias.
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m5_f16_k1008_rowwise_bias, 1e-2, 0.1, { return fp8_lin(d, 5, 1008, 300, kFloat16, Fp8Scales::Rowwise, true); });
// Rows kernel R = 8, m = 8, f32 x (f32 loads), block scales, the bias an undefined Tensor.
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m8_f32_block_undefined_bias, 1e-4, 1e-3, {
  const auto [w, s] = fp8_weight(d, 300, 2048, Fp8Scales::Block128);
  return {fp8_linear(randn_on(d, {8, 2048}, kFloat32, 33), w, s, Tensor())};
});
// Rows kernel with e5m2 codes (the hardware converter's E5M2 mode), bf16 x, block scales.
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m1_e5m2_bf16_block, 1e-2, 0.1, {
  return fp8_lin(d, 1, 2048, 384, kBFloat16, Fp8Scales::Block128, false, kFloat8_e5m2);
});
// Weight slices: row stride 2080 bytes (a multiple of 16) > K = 2048, at column 0 (block scales
// cropped to the slice; rows kernel, M = 1) and at column 16 (base 16 bytes in: still aligned;
// mma_rows_kernel, M = 3).
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m1_weight_slice, 1e-2, 0.1, { return fp8_lin_weight_slice(d, 1, 0); });
EMBER_PARITY_CASE_TOL(fp8_linear_mma_rows_m3_weight_slice_offset16, 1e-2, 0.1, { return fp8_lin_weight_slice(d, 3, 16); });
// x [2, 1, K] (M = 2 after the reshape: mma_rows_kernel): the output keeps x's leading dims.
EMBER_PARITY_CASE_TOL(fp8_linear_leading_dims, 1e-2, 0.1, {
  const auto [w, s] = fp8_weight(d, 200, 2048, Fp8Scales::Block128);
  const Tensor out = fp8_linear(randn_on(d, {2, 1, 2048}, kBFloat16, 33), w, s, randn_on(d, {200}, kBFloat16, 34));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 1, 200})) << "on " << d.str();
  return {out};
});
// Rows kernel with 16 lanes per weight row (1024 < K <= 2048 and N >= 4096). K = 2048: one whole
// batch per lane; N = 4100: the last block's rows 4096..4099 sit in one half of its first warp, the
// rest of the block exits (the row's shuffles must involve its own 16 lanes only).
EMBER_PARITY_CASE_TOL(fp8_linear_rows16_m1_bf16_block_partial_block, 1e-2, 0.1, { return fp8_lin(d, 1, 2048, 4100, kBFloat16, Fp8Scales::Block128, false); });
// 16 lanes per row, K = 1040 (65 units: a predicated batch only), M = 3, f16 x, per-row scales, bias.
EMBER_PARITY_CASE_TOL(fp8_linear_rows16_m3_f16_tail_rowwise_bias, 1e-2, 0.1, { return fp8_lin(d, 3, 1040, 4097, kFloat16, Fp8Scales::Rowwise, true); });
// mma_rows_kernel, 4 warps a block: M = 6, K = 320 (5 steps of 64 codes, split 2, 2, 1, 0 over the
// warps), N = 200 (a partial last tile of 16 rows), bf16 x, block scales, bias.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_rows_m6_bf16_k320_block_bias, 1e-2, 0.1, { return fp8_lin(d, 6, 320, 200, kBFloat16, Fp8Scales::Block128, true); });
// mma_rows_kernel, 4 warps (563 tiles: more than one wave at 8): M = 2, K = 2048, N = 9000, tensorwise.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_rows_m2_bf16_n9000_tensorwise, 1e-2, 0.1, { return fp8_lin(d, 2, 2048, 9000, kBFloat16, Fp8Scales::Tensorwise, false); });
// mma_rows_kernel, 8 warps (32 steps, 63 tiles): M = 3, K = 2048, N = 1000, e5m2 codes, block scales.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_rows_m3_e5m2_bf16_block, 1e-2, 0.1, {
  return fp8_lin(d, 3, 2048, 1000, kBFloat16, Fp8Scales::Block128, false, kFloat8_e5m2);
});
// mma_rows_kernel, 16 warps (64 steps, 63 tiles): M = 8 of f16 x, K = 4096, N = 1000, per-row scales, bias.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_rows_m8_f16_k4096_rowwise_bias, 1e-2, 0.1, { return fp8_lin(d, 8, 4096, 1000, kFloat16, Fp8Scales::Rowwise, true); });
// Special codes (NaN, +-inf) in the weight, both formats: mma_rows_kernel (M = 2, 3, 8) and the
// rows kernel (M = 1).
EMBER_PARITY_CASE_TOL(fp8_linear_m2_bf16_e4m3_nan_codes, 1e-2, 0.1, { return fp8_lin_specials(d, 2, kBFloat16, kFloat8_e4m3fn); });
EMBER_PARITY_CASE_TOL(fp8_linear_m1_f16_e4m3_nan_codes, 1e-2, 0.1, { return fp8_lin_specials(d, 1, kFloat16, kFloat8_e4m3fn); });
EMBER_PARITY_CASE_TOL(fp8_linear_m3_bf16_e5m2_inf_nan_codes, 1e-2, 0.1, { return fp8_lin_specials(d, 3, kBFloat16, kFloat8_e5m2); });
EMBER_PARITY_CASE_TOL(fp8_linear_m8_f16_e5m2_inf_nan_codes, 1e-2, 0.1, { return fp8_lin_specials(d, 8, kFloat16, kFloat8_e5m2); });
// Block scales of a weight with K <= 128: one scale column, [ceil(N/128), 1] = [3, 1], which is
// NOT the per-row layout [N, 1] (weight row n takes scale row n / 128). Rows kernel (K = 128) and
// run_rows' mma tiles (M = 9, K = 96).
EMBER_PARITY_CASE_TOL(fp8_linear_rows_m1_block_one_scale_column, 1e-2, 0.1, { return fp8_lin(d, 1, 128, 300, kBFloat16, Fp8Scales::Block128, false); });
EMBER_PARITY_CASE_TOL(fp8_linear_mma_m9_block_one_scale_column, 1e-2, 0.1, { return fp8_lin(d, 9, 96, 300, kBFloat16, Fp8Scales::Block128, true); });

// Fallback, e4m3fn: run_rows' mma tile kernel (bf16/f16 x, M > 8), then the bias add. M = 9.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_m9_bf16_block_bias, 1e-2, 0.1, { return fp8_lin(d, 9, 2048, 1000, kBFloat16, Fp8Scales::Block128, true); });
// Fallback, mma tiles: prefill, M = 64, K = 1024, N = 384, block scales.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_m64_prefill_block, 1e-2, 0.1, { return fp8_lin(d, 64, 1024, 384, kBFloat16, Fp8Scales::Block128, false); });
// Fallback, mma tiles with f16 x, per-row scales (applied in the epilogue) and bias; M = 33.
EMBER_PARITY_CASE_TOL(fp8_linear_mma_m33_f16_rowwise_bias, 1e-2, 0.1, { return fp8_lin(d, 33, 512, 200, kFloat16, Fp8Scales::Rowwise, true); });
// Fallback, K = 1000 (not a multiple of 16: 1000-byte weight rows): run_rows' tiled kernel (wmma).
EMBER_PARITY_CASE_TOL(fp8_linear_tiled_m1_k1000_block, 1e-2, 0.1, { return fp8_lin(d, 1, 1000, 300, kBFloat16, Fp8Scales::Block128, false); });
// Fallback, f32 x with M = 12: run_rows' tiled kernel with FMA (block scales on the staged values).
EMBER_PARITY_CASE_TOL(fp8_linear_tiled_m12_f32_block_bias, 1e-4, 1e-3, { return fp8_lin(d, 12, 640, 200, kFloat32, Fp8Scales::Block128, true); });
// Fallback, K = 1001 on row-aligned views (x [2, 1008] and weight [260, 1024] cropped to 1001
// columns): the rows kernel needs K % 16 == 0, run_rows' decode kernel takes it (a K tail of 9).
EMBER_PARITY_CASE_TOL(fp8_linear_decode_m2_k1001_views, 1e-2, 0.1, {
  const auto [wide, s] = fp8_weight(d, 260, 1024, Fp8Scales::Rowwise);
  const Tensor x = randn_on(d, {2, 1008}, kBFloat16, 33).narrow(1, 0, 1001);
  return {fp8_linear(x, wide.narrow(1, 0, 1001), s, randn_on(d, {260}, kBFloat16, 34))};
});
// Fallback, x rows 2049 * 2 bytes apart (x [4, 2049] cropped to K = 2048; not a multiple of 16):
// run_rows' tiled kernel.
EMBER_PARITY_CASE_TOL(fp8_linear_tiled_x_row_stride_unaligned, 1e-2, 0.1, {
  const auto [w, s] = fp8_weight(d, 300, 2048, Fp8Scales::Block128);
  return {fp8_linear(randn_on(d, {4, 2049}, kBFloat16, 33).narrow(1, 0, 2048), w, s)};
});
// Fallback, x starting 2 bytes into its storage (rows 4128 bytes apart, but not 16-byte aligned).
EMBER_PARITY_CASE_TOL(fp8_linear_tiled_x_base_unaligned, 1e-2, 0.1, {
  const auto [w, s] = fp8_weight(d, 300, 2048, Fp8Scales::Rowwise);
  return {fp8_linear(randn_on(d, {1, 2064}, kFloat16, 33).narrow(1, 1, 2048), w, s, randn_on(d, {300}, kFloat16, 34))};
});
// Fallback, the weight starting 8 bytes into its storage (not 16-byte aligned): tiled kernel.
EMBER_PARITY_CASE_TOL(fp8_linear_tiled_weight_base_unaligned, 1e-2, 0.1, {
  const auto [wide, s] = fp8_weight(d, 300, 2080, Fp8Scales::Rowwise);
  return {fp8_linear(randn_on(d, {1, 2048}, kBFloat16, 33), wide.narrow(1, 8, 2048), s)};
});
// Fallback, e5m2 weights beyond the rows kernel: dequantized to f32, then linear. M = 16 with bias
// and block scales; M = 1 with K = 1000 (not a multiple of 16), f32 x, per-row scales.
EMBER_PARITY_CASE_TOL(fp8_linear_dequant_e5m2_m16_block_bias, 1e-2, 0.1, {
  return fp8_lin(d, 16, 2048, 300, kBFloat16, Fp8Scales::Block128, true, kFloat8_e5m2);
});
EMBER_PARITY_CASE_TOL(fp8_linear_dequant_e5m2_m1_k1000_f32, 1e-4, 1e-3, {
  return fp8_lin(d, 1, 1000, 200, kFloat32, Fp8Scales::Rowwise, true, kFloat8_e5m2);
});
// The front end's own cases, on every device: K = 0 (the bias, broadcast) and M = 0 ([0, N]).
EMBER_PARITY_CASE(fp8_linear_k0_bias, {
  const Tensor w = empty({40, 0}, kFloat8_e4m3fn, d), s = full({40, 1}, 2.0, kFloat32, d);
  return {fp8_linear(empty({3, 0}, kBFloat16, d), w, s, randn_on(d, {40}, kBFloat16, 34))};
});
EMBER_PARITY_CASE(fp8_linear_m0, {
  const auto [w, s] = fp8_weight(d, 40, 64, Fp8Scales::Block128);
  return {fp8_linear(empty({0, 64}, kBFloat16, d), w, s)};
});

}  // namespace ember::test
