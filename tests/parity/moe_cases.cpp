// Mixture of experts: CUDA vs the CPU reference. grouped_mm reaches the few-rows decode kernel
// (about one row per group, K unit-stride), the mma.sync tile kernel (v2: bf16/f16 prefill, K
// unit-stride), the v1 wmma tile kernel (f32, FP8 activations, other layouts), the batch kernel
// (2D x 2D, 3D x 3D) and the transposed rows form (3D x 2D); scaled_grouped_mm its three scale
// layouts on each kernel; the fused layer its decode (<= 128 pairs) and prefill paths. Only rows
// inside the groups are compared, or a pre-filled output whose rows past offs[-1] must survive.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "backend.h"
#include "compare.h"
#include "parity/harness.h"

namespace ember::test {
namespace {

// Cumulative end offsets splitting `rows` over `groups` at random (some groups empty), on d.
Tensor random_offsets(Device d, int64_t rows, int64_t groups, uint64_t seed, int64_t end_short = 0) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<int32_t> cuts(static_cast<size_t>(groups));
  for (auto& c : cuts) c = static_cast<int32_t>(rng() % static_cast<unsigned>(rows - end_short + 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.back() = static_cast<int32_t>(rows - end_short);
  return tensor(cuts).to(d);
}

// The first `valid` rows (the written ones) of a 2D x 3D result.
int64_t valid_rows(const Tensor& offs) { return offs.to(Device::cpu()).to_vector<int32_t>().back(); }

std::vector<Tensor> rows_case(Device d, int64_t t, int64_t g, int64_t n, int64_t k, DType dt, uint64_t seed, int64_t end_short = 0) {
  const Tensor a = randn_on(d, {t, k}, dt, seed);
  const Tensor w = randn_on(d, {g, n, k}, dt, seed + 1);  // [G, N, K]; b = w.transpose(1, 2)
  const Tensor offs = random_offsets(d, t, g, seed + 2, end_short);
  return {grouped_mm(a, w.transpose(1, 2), offs).narrow(0, 0, valid_rows(offs))};
}

// FP8 weights [G, N, K] (values up to ~200) and a decoding scale of kind 0 (tensorwise), 1 (per
// channel) or 2 (128x128 blocks).
Tensor fp8_weights(Device d, int64_t g, int64_t n, int64_t k, uint64_t seed) {
  return (randn_on(d, {g, n, k}, kFloat32, seed) * Scalar(40)).to(kFloat8_e4m3fn);
}
Tensor weight_scale(Device d, int64_t g, int64_t n, int64_t k, int scale_kind, uint64_t seed) {
  return scale_kind == 0   ? rand_on(d, {g}, kFloat32, seed)
         : scale_kind == 1 ? rand_on(d, {g, n}, kFloat32, seed)
                           : rand_on(d, {g, (n + 127) / 128, (k + 127) / 128}, kFloat32, seed);
}

// a_type float8_e4m3fn: FP8 activations with per-row scales; else weight-only FP8.
std::vector<Tensor> scaled_case(Device d, int64_t t, int64_t g, int64_t n, int64_t k, int scale_kind, DType a_type, uint64_t seed,
                                const Tensor& routed_offs = Tensor(), DType out_type = kBFloat16) {
  const Tensor w = fp8_weights(d, g, n, k, seed);
  const Tensor scale = weight_scale(d, g, n, k, scale_kind, seed + 1);
  const Tensor offs = routed_offs.defined() ? routed_offs : random_offsets(d, t, g, seed + 2);
  const Tensor x = randn_on(d, {t, k}, kFloat32, seed + 3);
  const Tensor out = a_type == kFloat8_e4m3fn
                         ? scaled_grouped_mm(x.to(a_type), w.transpose(1, 2), rand_on(d, {t}, kFloat32, seed + 4), scale, offs, out_type)
                         : scaled_grouped_mm(x.to(a_type), w.transpose(1, 2), std::nullopt, scale, offs, out_type);
  return {out.narrow(0, 0, valid_rows(offs))};
}

// Cumulative end offsets of the given group sizes, on d.
Tensor offsets_of(Device d, const std::vector<int32_t>& sizes) {
  std::vector<int32_t> ends(sizes.size());
  std::partial_sum(sizes.begin(), sizes.end(), ends.begin());
  return tensor(ends).to(d);
}

// The end offsets of `tokens` tokens routed to top_k of `experts` at random (moe_permute of
// random expert ids on the CPU): about tokens * top_k / experts rows per group, as in a model.
Tensor routed_offsets(Device d, int64_t tokens, int64_t top_k, int64_t experts, uint64_t seed) {
  return moe_permute(randint_on(Device::cpu(), 0, experts, {tokens, top_k}, kInt32, seed), experts).offsets.to(d);
}

// Group sizes with an empty first and last group, a single row, partial tiles of every height
// and a group of several tiles; 11 rows past the last group.
const std::vector<int32_t> kGroupSizes = {0, 1, 15, 64, 65, 200, 0};
constexpr int64_t kRowsAfter = 11;

// grouped_mm through the backend into an output pre-filled with 7 (the front end allocates an
// uninitialised one): the rows past offs[-1] must still hold 7 on both devices.
std::vector<Tensor> prefilled_rows_case(Device d, int64_t n, int64_t k, DType dt, uint64_t seed) {
  const int64_t g = static_cast<int64_t>(kGroupSizes.size());
  const int64_t t = std::accumulate(kGroupSizes.begin(), kGroupSizes.end(), int64_t{0}) + kRowsAfter;
  const Tensor a = randn_on(d, {t, k}, dt, seed);
  const Tensor b = randn_on(d, {g, n, k}, dt, seed + 1).transpose(1, 2);
  const Tensor offs = offsets_of(d, kGroupSizes);
  const Tensor out = full({t, n}, Scalar(7), dt, d);
  if (d.is_cpu()) cpu::grouped_mm(a, b, offs, out);
  else cuda::grouped_mm(a, b, offs, out);
  return {out};
}

// Router inputs with wide top-k margins: token t leans on routing channel t % 4, whose router
// column orders the experts with a gap of 0.05 (far above any rounding), as the torch fixtures do.
std::pair<Tensor, Tensor> routed_inputs(Device d, int64_t t, int64_t h, int64_t e, DType dt, uint64_t seed) {
  std::vector<float> x = (randn({t, h}, kFloat32, Device::cpu(), seed) * Scalar(0.5)).to_vector<float>();
  std::vector<float> r = (randn({e, h}, kFloat32, Device::cpu(), seed + 1) * Scalar(0.002)).to_vector<float>();
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < 4; ++c) x[i * h + c] = 0.f;
    x[i * h + i % 4] = 4.f;
  }
  for (int64_t c = 0; c < 4; ++c) {
    std::vector<int64_t> order(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t i = 0; i < e; ++i) r[order[i] * h + c] = 0.05f * static_cast<float>(i);
  }
  return {tensor(x, {t, h}).to(dt).to(d), tensor(r, {e, h}).to(dt).to(d)};
}

struct LayerConfig {
  int64_t t, h, e, inter, k;
  DType dt = kBFloat16;
  MoeScoring scoring = MoeScoring::Softmax;
  bool bias = false, shared = false, fp8 = false;
  bool split = false;        // gate and up as two tensors (FP8 block scales of each, any intermediate size)
  bool split_views = false;  // ... cut from one tensor of codes and one of scales
  int64_t down_pad = 0;      // down stored [E, H, I + pad] and narrowed: 16-byte rows for an I that is not a multiple of 8
  bool force_decode = false;  // EMBER_MOE_PATH=decode: the decode kernels where the size rule picks the grouped path
  bool no_fast_paths = false;  // EMBER_DISABLE_FAST_PATHS=1: on sm_90 the decode router's ticket path instead of its cluster (the CPU ignores it)
  bool rowwise = false;       // FP8 with one scale per expert row ([E, N]) instead of 128x128 blocks
  int64_t shared_inter = 48;  // the shared expert's intermediate size
  bool tied = false;          // a zero router: every logit ties, so every token takes experts 0 .. k-1
  int fp8_codes = 0;          // FP8 experts of random codes up to this magnitude and one scale for all rows (fp8_codes below)
  int batched_warps = 0;      // EMBER_MOE_BATCHED_WARPS: the T > 1 decode mma kernels' warps per block (0: their rule)
  int64_t x_pad = 0;          // x's rows this many elements apart beyond H (a narrowed view; the padding holds values)
};
LayerConfig config(int64_t t, int64_t h, int64_t e, int64_t inter, int64_t k, DType dt = kBFloat16) { return {t, h, e, inter, k, dt}; }
LayerConfig lfm2(int64_t t) { return {t, 192, 8, 112, 2, kBFloat16, MoeScoring::Sigmoid, true}; }
LayerConfig with_shared(LayerConfig c, int64_t inter = 48) { c.shared = true; c.shared_inter = inter; return c; }
LayerConfig with_fp8(LayerConfig c) { c.fp8 = true; return c; }
LayerConfig split_fp8(LayerConfig c) { c.fp8 = c.split = true; return c; }
LayerConfig split_fp8_views(LayerConfig c) { c.fp8 = c.split = c.split_views = true; return c; }
LayerConfig with_down_pad(LayerConfig c, int64_t pad) { c.down_pad = pad; return c; }
LayerConfig forced_decode(LayerConfig c) { c.force_decode = true; return c; }
LayerConfig rowwise_fp8(LayerConfig c) { c.fp8 = c.rowwise = true; return c; }
LayerConfig without_fast_paths(LayerConfig c) { c.no_fast_paths = true; return c; }
LayerConfig tied(LayerConfig c) { c.tied = true; return c; }
LayerConfig with_batched_warps(LayerConfig c, int warps) { c.batched_warps = warps; return c; }
LayerConfig with_fp8_codes(LayerConfig c, int max_code) { c.fp8_codes = max_code; return c; }
LayerConfig with_x_pad(LayerConfig c, int64_t pad) { c.x_pad = pad; return c; }

// FP8 codes of `shape` drawn at random from the finite e4m3 codes of magnitude up to max_code
// (0x7E: all of them; never the NaN codes 0x7F, 0xFF), so the kernels' FP8 decoding sees every
// code it may meet, not only those quantize_fp8 makes of normal values (subnormals there are
// ~1e-4 of the codes, too few and too small for a flush to show). With max_code 0x0F the codes are
// e4m3's subnormals and its smallest normals: a decoder that flushed subnormals would zero half
// of the weights (about a quarter of their magnitude).
Tensor fp8_codes(Device d, const std::vector<int64_t>& shape, int max_code, uint64_t seed) {
  const Tensor magnitude = randint_on(d, 0, max_code + 1, shape, kInt32, seed);
  const Tensor sign = randint_on(d, 0, 2, shape, kInt32, seed + 1) * Scalar(0x80);
  return (magnitude + sign).to(kUInt8).view(kFloat8_e4m3fn);
}


// FP8 codes and 128x128 block scales of w [E, N, K], quantised once on the CPU so both devices
// see the same codes.
std::pair<Tensor, Tensor> fp8_block(Device d, const Tensor& w) {
  const auto [q, s] = quantize_fp8(w.to(Device::cpu()).contiguous(), Fp8Granularity::Block128);
  return {q.to(d), s.to(d)};
}

// FP8 codes of w [E, N, K] with one scale per row, [E, N].
std::pair<Tensor, Tensor> fp8_rows(Device d, const Tensor& w) {
  const auto [q, s] = quantize_fp8(w.to(Device::cpu()).contiguous(), Fp8Granularity::Rowwise);
  return {q.to(d), s.squeeze(2).to(d)};
}

std::vector<Tensor> layer_case(Device d, const LayerConfig& c, uint64_t seed) {
  std::optional<ScopedEnv> path, fast_paths, warps;
  if (c.force_decode) path.emplace("EMBER_MOE_PATH", "decode");
  if (c.batched_warps) warps.emplace("EMBER_MOE_BATCHED_WARPS", std::to_string(c.batched_warps).c_str());
  if (c.no_fast_paths) fast_paths.emplace("EMBER_DISABLE_FAST_PATHS", "1");
  auto [x, router] = routed_inputs(d, c.t, c.h, c.e, c.dt, seed);
  if (c.tied) router = zeros({c.e, c.h}, c.dt, d);
  if (c.x_pad) x = cat({x, randn_on(d, {c.t, c.x_pad}, c.dt, seed + 10)}, 1).narrow(1, 0, c.h);
  MoeExperts ex;
  MoeLayerOptions o;
  o.route.top_k = c.k;
  o.route.scoring = c.scoring;
  if (c.scoring == MoeScoring::Sigmoid) o.route.norm_eps = 1e-6;
  if (c.bias) o.route.expert_bias = rand_on(d, {c.e}, kFloat32, seed + 2) * Scalar(0.01);
  const Tensor gate_up = randn_on(d, {c.e, 2 * c.inter, c.h}, kFloat32, seed + 3) * Scalar(0.05);
  // The padding columns hold values too: nothing may read them.
  const Tensor down_padded = randn_on(d, {c.e, c.h, c.inter + c.down_pad}, kFloat32, seed + 4) * Scalar(0.05);
  if (c.fp8_codes) {  // weights of rms ~0.05 as in the other cases: the codes' rms is ~100 (all) or ~0.017 (the smallest)
    const Scalar scale(c.fp8_codes >= 0x78 ? 1.0 / 2000 : 3.0);
    ex.gate_up = fp8_codes(d, {c.e, 2 * c.inter, c.h}, c.fp8_codes, seed + 8);
    ex.gate_up_scale = full({c.e, 2 * c.inter}, scale, kFloat32, d);
    ex.down = fp8_codes(d, {c.e, c.h, c.inter + c.down_pad}, c.fp8_codes, seed + 9);
    ex.down_scale = full({c.e, c.h}, scale, kFloat32, d);
  } else if (c.fp8) {
    if (c.rowwise) {
      std::tie(ex.gate_up, ex.gate_up_scale) = fp8_rows(d, gate_up);
    } else if (c.split) {
      std::tie(ex.gate, ex.gate_scale) = fp8_block(d, gate_up.narrow(1, 0, c.inter));
      std::tie(ex.up, ex.up_scale) = fp8_block(d, gate_up.narrow(1, c.inter, c.inter));
      if (c.split_views) {  // gate's and up's codes, and their block scales, as views of one tensor each
        const Tensor codes = cat({ex.gate.view(kUInt8), ex.up.view(kUInt8)}, 1).view(kFloat8_e4m3fn);
        const Tensor scales = cat({ex.gate_scale, ex.up_scale}, 1);
        const int64_t blocks = ex.gate_scale.size(1);
        ex.gate = codes.narrow(1, 0, c.inter);
        ex.up = codes.narrow(1, c.inter, c.inter);
        ex.gate_scale = scales.narrow(1, 0, blocks);
        ex.up_scale = scales.narrow(1, blocks, blocks);
      }
    } else {
      std::tie(ex.gate_up, ex.gate_up_scale) = fp8_block(d, gate_up);
    }
    // The scales of the padded matrix: as many 128-column blocks as I when the pad stays in the last block.
    std::tie(ex.down, ex.down_scale) = c.rowwise ? fp8_rows(d, down_padded) : fp8_block(d, down_padded);
  } else {
    ex.gate_up = gate_up.to(c.dt);
    ex.down = down_padded.to(c.dt);
  }
  ex.down = ex.down.narrow(2, 0, c.inter);
  if (c.shared) {
    o.shared = MoeSharedExpert{(randn_on(d, {2 * c.shared_inter, c.h}, kFloat32, seed + 5) * Scalar(0.05)).to(c.dt),
                               (randn_on(d, {c.h, c.shared_inter}, kFloat32, seed + 6) * Scalar(0.05)).to(c.dt),
                               (randn_on(d, {1, c.h}, kFloat32, seed + 7) * Scalar(0.05)).to(c.dt)};
  }
  return {moe_layer(x, router, ex, o)};
}

}  // namespace

// ---- grouped_mm ---------------------------------------------------------------------------------
EMBER_PARITY_CASE(moe_gmm_decode_bf16_one_row_groups, { return rows_case(d, 8, 128, 1536, 2048, kBFloat16, 1); });
EMBER_PARITY_CASE(moe_gmm_decode_f16_odd_n, { return rows_case(d, 5, 7, 333, 264, kFloat16, 2, 1); });
EMBER_PARITY_CASE(moe_gmm_decode_f32_k_tail, { return rows_case(d, 12, 3, 40, 36, kFloat32, 3); });
// K = 36 (K % 8 = 4, rows of 72 bytes: the staged rows end in a partial 16-byte piece) with
// padded rows so the operands stay 16-byte aligned, and a group of 9 rows (more than a pass).
EMBER_PARITY_CASE(moe_gmm_decode_bf16_padded_k36_nine_row_group, {
  const Tensor a = randn_on(d, {16, 40}, kBFloat16, 7).narrow(1, 0, 36);
  const Tensor w = randn_on(d, {16, 24, 40}, kBFloat16, 8).narrow(2, 0, 36);  // [G, N, K], rows 80 bytes apart
  std::vector<int32_t> sizes(16, 0);
  sizes[0] = 9, sizes[2] = 1, sizes[3] = 6;
  return {grouped_mm(a, w.transpose(1, 2), offsets_of(d, sizes))};
});
EMBER_PARITY_CASE(moe_gmm_tiled_bf16_prefill, { return rows_case(d, 700, 8, 200, 136, kBFloat16, 4, 3); });
EMBER_PARITY_CASE(moe_gmm_tiled_f16_empty_groups, { return rows_case(d, 300, 33, 72, 64, kFloat16, 5); });
EMBER_PARITY_CASE(moe_gmm_tiled_f32_odd, { return rows_case(d, 133, 4, 45, 52, kFloat32, 6); });
// v2 (mma.sync tiles). Its tile height comes from the mean rows per group and the grid size; on
// the H200 (132 SMs) each case below takes the height in its name (bm16: fewer than 2 blocks
// per SM at any larger height). Tensor-core sums truncate rather than round at each k16 step,
// so with K >= 2048 (outputs ~45) the absolute tolerance near zero is 5e-3.
EMBER_PARITY_CASE_TOL(moe_gmm_mma_bf16_bm16_k2048_unwritten_rows, 1e-2, 5e-3, {
  return prefilled_rows_case(d, 1536, 2048, kBFloat16, 70);
});
EMBER_PARITY_CASE_TOL(moe_gmm_mma_f16_bm16_k2056_n200_unwritten_rows, 1e-3, 5e-3, {
  return prefilled_rows_case(d, 200, 2056, kFloat16, 71);
});
EMBER_PARITY_CASE(moe_gmm_mma_bf16_bm16_k40_n128_unwritten_rows, { return prefilled_rows_case(d, 128, 40, kBFloat16, 72); });
EMBER_PARITY_CASE(moe_gmm_mma_f16_bm64_k64_4096_rows_128_experts, {
  const Tensor a = randn_on(d, {4096, 64}, kFloat16, 73), w = randn_on(d, {128, 768, 64}, kFloat16, 74);
  const Tensor offs = routed_offsets(d, 512, 8, 128, 75);
  return {grouped_mm(a, w.transpose(1, 2), offs)};
});
EMBER_PARITY_CASE(moe_gmm_mma_bf16_bm64_4096_random_rows_128_experts, { return rows_case(d, 4096, 128, 640, 136, kBFloat16, 76); });
EMBER_PARITY_CASE(moe_gmm_mma_f16_bm32_4096_rows_256_experts, {
  const Tensor a = randn_on(d, {4096, 72}, kFloat16, 77), w = randn_on(d, {256, 384, 72}, kFloat16, 78);
  const Tensor offs = routed_offsets(d, 512, 8, 256, 79);
  return {grouped_mm(a, w.transpose(1, 2), offs)};
});
EMBER_PARITY_CASE(moe_gmm_mma_bf16_bm128_2048_rows_16_experts, { return rows_case(d, 2048, 16, 2176, 64, kBFloat16, 80, 5); });
EMBER_PARITY_CASE(moe_gmm_row_major_b_bf16, {
  const Tensor a = randn_on(d, {90, 64}, kBFloat16, 7), b = randn_on(d, {3, 64, 48}, kBFloat16, 8);
  const Tensor offs = random_offsets(d, 90, 3, 9);
  return {grouped_mm(a, b, offs).narrow(0, 0, valid_rows(offs))};
});
EMBER_PARITY_CASE(moe_gmm_3d2d_bf16, {
  const Tensor a = randn_on(d, {4, 24, 64}, kBFloat16, 10), b = randn_on(d, {80, 64}, kBFloat16, 11).t();
  const Tensor offs = random_offsets(d, 80, 4, 12, 5);
  return {grouped_mm(a, b, offs).narrow(1, 0, valid_rows(offs))};
});
EMBER_PARITY_CASE(moe_gmm_3d2d_f32, {
  const Tensor a = randn_on(d, {3, 10, 20}, kFloat32, 13), b = randn_on(d, {20, 36}, kFloat32, 14);
  const Tensor offs = random_offsets(d, 36, 3, 15);
  return {grouped_mm(a, b, offs).narrow(1, 0, valid_rows(offs))};
});
EMBER_PARITY_CASE(moe_gmm_2d2d_bf16_empty_group, {
  const Tensor a = randn_on(d, {40, 96}, kBFloat16, 16), b = randn_on(d, {96, 24}, kBFloat16, 17);
  return {grouped_mm(a, b, tensor(std::vector<int32_t>{30, 30, 96, 96}).to(d))};
});
EMBER_PARITY_CASE(moe_gmm_2d2d_f32, {
  const Tensor a = randn_on(d, {12, 68}, kFloat32, 18).t(), b = randn_on(d, {12, 20}, kFloat32, 19);
  return {grouped_mm(a, b, random_offsets(d, 12, 5, 20))};
});
EMBER_PARITY_CASE(moe_gmm_3d3d_f16, {
  return {grouped_mm(randn_on(d, {5, 33, 40}, kFloat16, 21), randn_on(d, {5, 24, 40}, kFloat16, 22).transpose(1, 2))};
});

// ---- scaled_grouped_mm (FP8 experts) ------------------------------------------------------------
EMBER_PARITY_CASE(moe_scaled_gmm_decode_tensorwise, { return scaled_case(d, 8, 64, 512, 1024, 0, kBFloat16, 30); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_rowwise, { return scaled_case(d, 3, 16, 300, 512, 1, kBFloat16, 31); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_block, { return scaled_case(d, 8, 32, 384, 528, 2, kBFloat16, 32); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_fp8_activations, { return scaled_case(d, 6, 8, 256, 256, 2, kFloat8_e4m3fn, 33); });
EMBER_PARITY_CASE(moe_scaled_gmm_tiled_block, { return scaled_case(d, 400, 4, 260, 384, 2, kBFloat16, 34); });
EMBER_PARITY_CASE(moe_scaled_gmm_tiled_rowwise_fp8_activations, { return scaled_case(d, 300, 3, 128, 256, 1, kFloat8_e4m3fn, 35); });

// v2 with FP8 weights: decoded exactly, block scales on f32 partial sums. Outputs ~1000 (K 2064)
// or ~300 (K 144, 272): absolute tolerances near zero scaled to that.
EMBER_PARITY_CASE_TOL(moe_scaled_gmm_mma_tensorwise_bm16_k2064, 1e-2, 5e-2, {
  return scaled_case(d, 300, 6, 200, 2064, 0, kBFloat16, 81);
});
EMBER_PARITY_CASE_TOL(moe_scaled_gmm_mma_rowwise_f16_bm32_4096_rows_256_experts, 2e-3, 1e-2, {
  return scaled_case(d, 4096, 256, 384, 144, 1, kFloat16, 82, routed_offsets(d, 512, 8, 256, 83), kFloat16);
});
EMBER_PARITY_CASE_TOL(moe_scaled_gmm_mma_block_f32_out_bm64_4096_rows_128_experts, 2e-5, 2e-3, {
  return scaled_case(d, 4096, 128, 600, 272, 2, kBFloat16, 84, routed_offsets(d, 512, 8, 128, 85), kFloat32);
});
EMBER_PARITY_CASE_TOL(moe_scaled_gmm_mma_block_f16_bm16_k2064_unwritten_rows, 1e-2, 5e-2, {
  // Through the backend into a pre-filled output, like prefilled_rows_case; scale already [G, N/128, K/128].
  const int64_t g = static_cast<int64_t>(kGroupSizes.size()), n = 256, k = 2064;
  const int64_t t = std::accumulate(kGroupSizes.begin(), kGroupSizes.end(), int64_t{0}) + kRowsAfter;
  const Tensor a = randn_on(d, {t, k}, kFloat16, 86);
  const Tensor b = fp8_weights(d, g, n, k, 87).transpose(1, 2);
  const Tensor scale = weight_scale(d, g, n, k, 2, 88), offs = offsets_of(d, kGroupSizes);
  const Tensor out = full({t, n}, Scalar(7), kBFloat16, d);
  if (d.is_cpu()) cpu::scaled_grouped_mm(a, b, Tensor(), scale, offs, out);
  else cuda::scaled_grouped_mm(a, b, Tensor(), scale, offs, out);
  return {out};
});

// ---- routing, permutation ------------------------------------------------------------------------
EMBER_PARITY_CASE(moe_route_softmax_top8_of_128, {
  auto [w, ids] = moe_route(randn_on(d, {37, 128}, kFloat32, 40), MoeRouteOptions{.top_k = 8});
  return {w, ids};
});
EMBER_PARITY_CASE(moe_route_sigmoid_bias_scaled_bf16, {
  MoeRouteOptions o{.top_k = 4, .scoring = MoeScoring::Sigmoid, .norm_eps = 1e-6, .routed_scaling = 2.5,
                    .expert_bias = randn_on(d, {32}, kFloat32, 41)};
  auto [w, ids] = moe_route(randn_on(d, {9, 32}, kBFloat16, 42), o);
  return {w, ids};
});
EMBER_PARITY_CASE(moe_route_1000_experts_unnormalised, {
  auto [w, ids] = moe_route(randn_on(d, {3, 1000}, kFloat32, 43), MoeRouteOptions{.top_k = 32, .norm_topk = false});
  return {w, ids};
});
// Integer-valued logits tie often (ties go to the lower expert), NaN sorts after every number,
// infinities and signed zeros in the keys: the CUDA top-k reduces an unsigned order key.
EMBER_PARITY_CASE(moe_route_ties_nan_infinities, {
  std::vector<float> v(12 * 40);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7919) % 5) - 2);
  for (const size_t i : {3, 90, 91, 200, 201, 202}) v[i] = std::numeric_limits<float>::quiet_NaN();
  v[45] = -std::numeric_limits<float>::infinity();
  v[46] = std::numeric_limits<float>::infinity();
  v[130] = -0.f;
  const Tensor logits = tensor<float>(v).reshape({12, 40}).to(d);
  const Tensor bias = tensor<float>(std::vector<float>(40, 0.f)).to(d);  // adds +0 to every -0 key
  auto [w, ids] = moe_route(logits, MoeRouteOptions{.top_k = 7, .scoring = MoeScoring::Sigmoid, .norm_topk = false,
                                                    .expert_bias = bias});
  auto [w2, ids2] = moe_route(logits, MoeRouteOptions{.top_k = 5});
  return {w, ids, w2, ids2};
});
EMBER_PARITY_CASE(moe_permute_many_pairs, {
  const MoePermutation p = moe_permute(randint_on(d, 0, 60, {700, 8}, kInt64, 44), 64);  // experts 60..63 empty
  return {p.order, p.inverse, p.tokens, p.counts, p.offsets};
});
EMBER_PARITY_CASE(moe_permute_out_of_range_ids, {
  const MoePermutation p = moe_permute(randint_on(d, -2, 10, {33, 3}, kInt32, 45), 8);
  return {p.order, p.inverse, p.tokens, p.counts, p.offsets};
});
EMBER_PARITY_CASE(moe_unpermute_bf16, {
  const MoePermutation p = moe_permute(randint_on(d, 0, 16, {11, 4}, kInt32, 46), 16);
  return {moe_unpermute(randn_on(d, {44, 72}, kBFloat16, 47), p.inverse, rand_on(d, {11, 4}, kFloat32, 48))};
});
EMBER_PARITY_CASE(moe_unpermute_bf16_odd_width, {  // 45 columns: one element per thread, not 16-byte vectors
  const MoePermutation p = moe_permute(randint_on(d, 0, 16, {11, 4}, kInt32, 146), 16);
  return {moe_unpermute(randn_on(d, {44, 45}, kBFloat16, 147), p.inverse, rand_on(d, {11, 4}, kFloat32, 148))};
});

// ---- the fused layer -------------------------------------------------------------------------------
EMBER_PARITY_CASE(moe_layer_qwen3_like_decode_bf16, { return layer_case(d, config(1, 256, 32, 96, 8), 50); });
EMBER_PARITY_CASE(moe_layer_qwen3_like_decode_t4_f16, { return layer_case(d, config(4, 256, 32, 96, 8, kFloat16), 51); });
EMBER_PARITY_CASE(moe_layer_qwen3_like_prefill_bf16, { return layer_case(d, config(40, 256, 32, 96, 8), 52); });
EMBER_PARITY_CASE(moe_layer_qwen3_like_f32, { return layer_case(d, config(3, 128, 16, 64, 4, kFloat32), 53); });
EMBER_PARITY_CASE(moe_layer_lfm2_like_decode, { return layer_case(d, lfm2(2), 54); });
EMBER_PARITY_CASE(moe_layer_lfm2_like_prefill, { return layer_case(d, lfm2(100), 55); });
EMBER_PARITY_CASE(moe_layer_qwen35_shared_decode, { return layer_case(d, with_shared(config(2, 256, 32, 64, 8)), 56); });
EMBER_PARITY_CASE(moe_layer_qwen35_shared_prefill, { return layer_case(d, with_shared(config(20, 256, 32, 64, 8)), 57); });
EMBER_PARITY_CASE(moe_layer_fp8_block_decode, { return layer_case(d, with_fp8(config(2, 256, 16, 128, 4)), 58); });
EMBER_PARITY_CASE(moe_layer_fp8_block_prefill, { return layer_case(d, with_fp8(config(50, 256, 16, 128, 4)), 59); });
// The grouped path's gate and up as one product of the merged [E, 2I, H] view (rowwise scales, and
// block scales over I = 256: gate's and up's rows in different blocks), strided x, I % 8 = 4 (the
// glue one element per thread), separate gate and up (two products), and H = 36 (72-byte rows: the
// wmma tiles, the glue one element per thread).
EMBER_PARITY_CASE(moe_layer_t40_fp8_rowwise_prefill, { return layer_case(d, rowwise_fp8(config(40, 256, 16, 96, 8)), 140); });
EMBER_PARITY_CASE(moe_layer_t40_fp8_block_i256_prefill, { return layer_case(d, with_fp8(config(40, 256, 16, 256, 8)), 141); });
EMBER_PARITY_CASE(moe_layer_t40_f16_strided_x_prefill, { return layer_case(d, with_x_pad(config(40, 256, 32, 96, 8, kFloat16), 16), 142); });
EMBER_PARITY_CASE(moe_layer_t40_i100_prefill, { return layer_case(d, with_down_pad(config(40, 256, 16, 100, 4), 4), 143); });
EMBER_PARITY_CASE(moe_layer_t40_fp8_split_prefill, { return layer_case(d, split_fp8(config(40, 256, 16, 128, 4)), 144); });
// Separate gate and up whose codes and block scales lie side by side in one tensor each, at I = 128
// (up's rows start a block) and I = 96 (up's first rows share a block with gate's last): each half
// is read with its own scales.
EMBER_PARITY_CASE(moe_layer_t40_fp8_split_views_prefill, { return layer_case(d, split_fp8_views(config(40, 256, 16, 128, 4)), 146); });
EMBER_PARITY_CASE(moe_layer_t40_fp8_split_views_i96_prefill, { return layer_case(d, split_fp8_views(config(40, 256, 16, 96, 4)), 147); });
EMBER_PARITY_CASE(moe_layer_t40_bf16_h36_prefill, { return layer_case(d, config(40, 36, 16, 20, 4), 145); });
EMBER_PARITY_CASE(moe_layer_odd_sizes_f32, { return layer_case(d, config(5, 36, 6, 20, 3, kFloat32), 60); });

// The decode kernels at T > 1. The routed inputs send token t by channel t % 4, so tokens 4 apart
// share their experts; with top-8 of 8 every expert takes every token. Cases whose pairs
// outnumber the experts force the decode path (the size rule picks grouped).
EMBER_PARITY_CASE(moe_layer_experts_t2_top8_of_8_bf16, { return layer_case(d, forced_decode(config(2, 256, 8, 96, 8)), 61); });
EMBER_PARITY_CASE(moe_layer_experts_t2_top8_of_128_f16_shared, {
  return layer_case(d, with_shared(config(2, 256, 128, 64, 8, kFloat16)), 62);
});
EMBER_PARITY_CASE(moe_layer_experts_t5_top8_of_128_f32, { return layer_case(d, config(5, 128, 128, 64, 8, kFloat32), 63); });
EMBER_PARITY_CASE(moe_layer_experts_t5_top8_of_8_f32_odd_sizes, {  // H % 8 = 4 and I % 8 = 4: both tails
  return layer_case(d, forced_decode(config(5, 36, 8, 20, 8, kFloat32)), 64);
});
EMBER_PARITY_CASE(moe_layer_experts_t16_top8_of_128_bf16, { return layer_case(d, config(16, 256, 128, 96, 8), 65); });
EMBER_PARITY_CASE(moe_layer_experts_t16_top8_of_8_bf16_shared, {
  return layer_case(d, forced_decode(with_shared(config(16, 256, 8, 64, 8))), 66);
});
EMBER_PARITY_CASE(moe_layer_experts_t16_top4_of_8_bf16_i100, {  // I % 8 = 4, down rows padded to 104
  return layer_case(d, forced_decode(with_down_pad(config(16, 256, 8, 100, 4), 4)), 67);
});
EMBER_PARITY_CASE(moe_layer_experts_t2_top20_of_32_bf16_shared, {  // 21 rows per output: more than the down kernel's 16 warps
  return layer_case(d, forced_decode(with_shared(config(2, 256, 32, 64, 20))), 80);
});
EMBER_PARITY_CASE(moe_layer_experts_t16_top4_of_8_fp8_block, { return layer_case(d, forced_decode(with_fp8(config(16, 256, 8, 128, 4))), 68); });
EMBER_PARITY_CASE(moe_layer_experts_t5_top8_of_128_fp8_block_i100_shared, {  // FP8 down rows padded to 112
  return layer_case(d, with_shared(with_down_pad(split_fp8(config(5, 256, 128, 100, 8)), 12)), 69);
});
EMBER_PARITY_CASE(moe_layer_experts_t16_top8_of_8_fp8_block_f32, {
  return layer_case(d, forced_decode(with_fp8(config(16, 128, 8, 128, 8, kFloat32))), 70);
});
// T = 16 with I = 256: the down kernel's h rows of one token (8 x 256 bf16) per pass.
EMBER_PARITY_CASE(moe_layer_experts_t16_top8_of_128_bf16_h_unstaged, { return layer_case(d, config(16, 256, 128, 256, 8), 71); });

// T = 1 decode layers: partial channel groups and element tails (f32 H = 36, I = 20), a shared
// expert in x's dtype beside FP8 experts, I = 1024, FP8 H = 6144, the Qwen3-30B shapes with 16
// experts, and I = 100 (down rows padded to 104).
EMBER_PARITY_CASE(moe_layer_t1_f32_odd_sizes, { return layer_case(d, config(1, 36, 6, 20, 3, kFloat32), 72); });
EMBER_PARITY_CASE(moe_layer_t1_bf16_shared, { return layer_case(d, with_shared(config(1, 256, 32, 64, 8)), 73); });
EMBER_PARITY_CASE(moe_layer_t1_lfm2_sigmoid_bias, { return layer_case(d, lfm2(1), 74); });
EMBER_PARITY_CASE(moe_layer_t1_fp8_split_shared, { return layer_case(d, with_shared(split_fp8(config(1, 256, 16, 128, 4))), 75); });
EMBER_PARITY_CASE(moe_layer_t1_bf16_i1024, { return layer_case(d, config(1, 256, 16, 1024, 8), 76); });
EMBER_PARITY_CASE(moe_layer_t1_fp8_h6144, { return layer_case(d, with_fp8(config(1, 6144, 4, 128, 2)), 77); });
EMBER_PARITY_CASE(moe_layer_t1_qwen3_shapes_bf16, { return layer_case(d, config(1, 2048, 16, 768, 8), 78); });
EMBER_PARITY_CASE(moe_layer_t1_bf16_i100, { return layer_case(d, with_down_pad(config(1, 256, 16, 100, 4), 4), 79); });
// The tensor-core decode kernels on Qwen3-30B's FP8 shapes: H 2048 (gate_up: 8 steps per warp,
// two whole batches), I 768 (down: 3 steps per warp, one batch).
EMBER_PARITY_CASE(moe_layer_t1_qwen3_shapes_fp8, { return layer_case(d, with_fp8(config(1, 2048, 16, 768, 8)), 82); });
// FP8 top-8 with a shared expert whose rows are whole 64-byte steps (I = 64): down_mma's shared
// expert group (rows of x's type, column 0), at T = 1 and with two tokens.
EMBER_PARITY_CASE(moe_layer_t1_fp8_top8_shared_i64, { return layer_case(d, with_shared(with_fp8(config(1, 256, 16, 128, 8)), 64), 83); });
EMBER_PARITY_CASE(moe_layer_t2_fp8_top8_shared_i64, { return layer_case(d, with_shared(with_fp8(config(2, 256, 16, 128, 8)), 64), 84); });
// Qwen3.5-35B-A3B's layout at small sizes: 256 experts (the router's 8 candidates per lane), top-8,
// a shared expert of whole 64-byte rows. The benchmark's rel_err on the full Qwen3.5 shapes read 0
// from session 8's first run on (bf16 with gate_up_mma; FP8 since session 5), which an all-NaN
// result also gave before bench::relative_error counted NaN.
EMBER_PARITY_CASE(moe_layer_t1_e256_top8_shared_bf16, { return layer_case(d, with_shared(config(1, 256, 256, 64, 8), 64), 85); });
EMBER_PARITY_CASE(moe_layer_t1_e256_top8_shared_fp8, { return layer_case(d, with_shared(with_fp8(config(1, 256, 256, 128, 8)), 64), 86); });

// FP8 experts with one scale per row ([E, 2I] for gate_up, [E, H] for down; every layer case
// above uses 128x128 blocks): the mma gate_up and down at T = 1 (top-8) with a shared expert, and
// at T = 2 (top-4: the FFMA down) with I = 96.
EMBER_PARITY_CASE(moe_layer_t1_fp8_rowwise_shared, { return layer_case(d, with_shared(rowwise_fp8(config(1, 256, 16, 128, 8)), 64), 89); });
EMBER_PARITY_CASE(moe_layer_t2_fp8_rowwise_i96, { return layer_case(d, rowwise_fp8(config(2, 512, 16, 96, 4)), 92); });
// Every finite e4m3 code, and only the subnormals and smallest normals, through the mma gate_up and
// down (top-8) at T = 1 and T = 4, and the FFMA down (top-4) at T = 2.
EMBER_PARITY_CASE(moe_layer_t1_fp8_every_code, { return layer_case(d, with_fp8_codes(config(1, 256, 16, 128, 8), 0x7E), 111); });
EMBER_PARITY_CASE(moe_layer_t4_fp8_every_code, { return layer_case(d, with_fp8_codes(config(4, 256, 16, 128, 8), 0x7E), 112); });
EMBER_PARITY_CASE(moe_layer_t2_fp8_every_code_top4, { return layer_case(d, with_fp8_codes(config(2, 256, 16, 128, 4), 0x7E), 113); });
EMBER_PARITY_CASE(moe_layer_t1_fp8_subnormal_codes, { return layer_case(d, with_fp8_codes(config(1, 256, 16, 128, 8), 0x0F), 114); });
EMBER_PARITY_CASE(moe_layer_t4_fp8_subnormal_codes, { return layer_case(d, with_fp8_codes(config(4, 256, 16, 128, 8), 0x0F), 115); });

// The decode router (moe.cu v8). On sm_90 one cluster of 8 blocks x 16 warps where every warp
// has at most one row (the expert rows plus the shared gate's) and T x E <= 8192 (every T = 1
// case above with E <= 127, or 128 without a shared expert); otherwise, and with fast paths
// disabled, a warp per row and a ticket: 300 experts + the shared gate (19 blocks), 128 experts at
// T = 65 (T x E = 8320, forced decode, top-1), and with fast paths disabled at T = 1 with the
// shared gate and at T = 4 with the pairs ordered by expert.
EMBER_PARITY_CASE(moe_layer_t3_e300_top4_shared_ticket_router, { return layer_case(d, with_shared(config(3, 128, 300, 32, 4), 32), 93); });
EMBER_PARITY_CASE(moe_layer_t65_e128_top1_ticket_router, { return layer_case(d, forced_decode(config(65, 64, 128, 16, 1)), 96); });
EMBER_PARITY_CASE(moe_layer_t1_e32_shared_no_fast_paths, {
  return layer_case(d, without_fast_paths(with_shared(config(1, 256, 32, 64, 8), 64)), 94);
});
EMBER_PARITY_CASE(moe_layer_t4_no_fast_paths_ordered_pairs, { return layer_case(d, without_fast_paths(config(4, 256, 32, 96, 8)), 95); });
// The T > 1 decode mma kernels at each block size the rule may pick (or the variable may set): the
// small grids here would take 4 warps. 16-bit rows (gate_up and down) and FP8 rows beside a 16-bit
// shared expert.
EMBER_PARITY_CASE(moe_layer_t16_bf16_batched_warps1, { return layer_case(d, with_batched_warps(forced_decode(config(16, 256, 128, 96, 8)), 1), 120); });
EMBER_PARITY_CASE(moe_layer_t16_bf16_batched_warps2, { return layer_case(d, with_batched_warps(forced_decode(config(16, 256, 128, 96, 8)), 2), 121); });
EMBER_PARITY_CASE(moe_layer_t4_fp8_shared_batched_warps1, {
  return layer_case(d, with_batched_warps(forced_decode(with_shared(with_fp8(config(4, 256, 16, 128, 8)), 64)), 1), 122);
});
EMBER_PARITY_CASE(moe_layer_t4_fp8_shared_batched_warps2, {
  return layer_case(d, with_batched_warps(forced_decode(with_shared(with_fp8(config(4, 256, 16, 128, 8)), 64)), 2), 123);
});
// The T > 1 decode router stages every token's row of x in shared memory when they fit in 64 KB:
// x's rows 16 elements apart beyond H (staged without the gaps), 16 rows of 4 KB (64 KB, above the
// 48 KB a launch gets without opting in), and 9 rows of 8 KB that do not fit (read from global
// memory). With 16-bit x, T <= 16, the rows staged and H a multiple of 32 it is router_mma_kernel, a
// block per 16 router rows: 257 rows x 9 tokens (17 blocks on the ticket path, the second tile of 8
// tokens holding one), hidden 4096 at T = 4 (8 steps per warp in two batches of loads, the second
// after the wait), E = 48 + a shared gate (a cluster of 4 blocks, the last holding the gate's row
// and 15 repeats of it). Otherwise (f32, not staged, H % 32 != 0, T > 16) router_decode_kernel,
// whose warps each take a row against 1 token while rows x T fit one wave of blocks (16 warps per
// SM), else against 2: H = 200 at T = 3 (one cluster), 64 rows x 17 tokens (1 token per warp on the
// H200's 132 SMs, the ticket path), 128 rows x 20 tokens (2 tokens per warp).
// At T = 1 the gate_up grid beyond 6 blocks per SM (224 channel blocks x 4 pairs = 896 >
// 6 x 132 on the H200) takes the kernel built for 7 blocks per SM (16-bit and FP8 weights).
EMBER_PARITY_CASE(moe_layer_t5_strided_x_staged_router, { return layer_case(d, with_x_pad(config(5, 256, 64, 64, 8), 16), 124); });
EMBER_PARITY_CASE(moe_layer_t16_h2048_staged_router_64k, { return layer_case(d, config(16, 2048, 128, 32, 4), 125); });
EMBER_PARITY_CASE(moe_layer_t9_h4096_router_unstaged, { return layer_case(d, config(9, 4096, 64, 32, 4), 126); });
EMBER_PARITY_CASE(moe_layer_t9_e256_shared_mma_router_ticket, { return layer_case(d, with_shared(config(9, 256, 256, 32, 8), 32), 129); });
EMBER_PARITY_CASE(moe_layer_t4_h4096_mma_router_two_batches, { return layer_case(d, config(4, 4096, 32, 32, 4), 130); });
EMBER_PARITY_CASE(moe_layer_t3_e48_shared_mma_router_gate_block, { return layer_case(d, with_shared(config(3, 256, 48, 32, 4), 32), 131); });
EMBER_PARITY_CASE(moe_layer_t3_h200_scalar_router, { return layer_case(d, config(3, 200, 16, 32, 4), 132); });
EMBER_PARITY_CASE(moe_layer_t17_e64_scalar_router_1_token_per_warp, { return layer_case(d, forced_decode(config(17, 256, 64, 32, 4)), 133); });
EMBER_PARITY_CASE(moe_layer_t20_e128_scalar_router_2_tokens_per_warp, { return layer_case(d, config(20, 256, 128, 32, 4), 134); });
EMBER_PARITY_CASE(moe_layer_t1_inter1792_gate_up_7_blocks, { return layer_case(d, config(1, 256, 8, 1792, 4), 127); });
EMBER_PARITY_CASE(moe_layer_t1_fp8_inter1792_gate_up_7_blocks, { return layer_case(d, with_fp8(config(1, 256, 8, 1792, 4)), 128); });
// Exact ties (a zero router): every round of route_token's top-k finds the top key on several
// lanes, and the lowest expert must win (the reduction over expert ids after the one over keys):
// at T = 1 and with the pairs ordered by expert at T = 3 in the clustered decode router, with fast
// paths disabled (its ticket path), with 300 experts (ticket path, 32 candidates per lane), and in
// the prefill path's route_kernel (T x k = 160 pairs).
EMBER_PARITY_CASE(moe_layer_t1_tied_router, { return layer_case(d, tied(config(1, 128, 64, 32, 8)), 97); });
EMBER_PARITY_CASE(moe_layer_t3_tied_router_ordered_pairs, { return layer_case(d, tied(config(3, 128, 32, 32, 4)), 98); });
EMBER_PARITY_CASE(moe_layer_t3_tied_router_no_fast_paths, { return layer_case(d, without_fast_paths(tied(config(3, 128, 32, 32, 4))), 99); });
EMBER_PARITY_CASE(moe_layer_t8_e300_tied_ticket_router, { return layer_case(d, tied(config(8, 64, 300, 16, 2)), 100); });
EMBER_PARITY_CASE(moe_layer_t40_tied_router_prefill, { return layer_case(d, tied(config(40, 64, 16, 32, 4)), 101); });
// T = 1 on the ticket path: 32 experts with the sigmoid and an expert bias (fast paths off), and
// 300 experts with ties (32 candidates per lane).
EMBER_PARITY_CASE(moe_layer_t1_e32_sigmoid_bias_ticket, {
  LayerConfig c = without_fast_paths(config(1, 64, 32, 16, 6));
  c.scoring = MoeScoring::Sigmoid;
  c.bias = true;
  return layer_case(d, c, 136);
});
EMBER_PARITY_CASE(moe_layer_t1_e300_tied_ticket_router, { return layer_case(d, tied(config(1, 64, 300, 16, 6)), 137); });
}  // namespace ember::test
