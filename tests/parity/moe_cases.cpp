// Mixture of experts: CUDA vs the CPU reference. grouped_mm reaches the few-rows decode kernel
// (rows <= 8 per group on average, K unit-stride), the tiled tensor-core kernel (prefill), the
// batch kernel (2D x 2D, 3D x 3D) and the transposed rows form (3D x 2D); scaled_grouped_mm its
// three scale layouts on both kernels; the fused layer its decode (<= 128 pairs) and prefill paths.
// Only rows inside the groups are compared: the rest is left unwritten.
#include <algorithm>
#include <random>

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

std::vector<Tensor> scaled_case(Device d, int64_t t, int64_t g, int64_t n, int64_t k, int scale_kind, bool fp8_a, uint64_t seed) {
  const Tensor w = (randn_on(d, {g, n, k}, kFloat32, seed) * Scalar(40)).to(kFloat8_e4m3fn);
  const Tensor scale = scale_kind == 0   ? rand_on(d, {g}, kFloat32, seed + 1)
                       : scale_kind == 1 ? rand_on(d, {g, n}, kFloat32, seed + 1)
                                         : rand_on(d, {g, (n + 127) / 128, (k + 127) / 128}, kFloat32, seed + 1);
  const Tensor offs = random_offsets(d, t, g, seed + 2);
  const Tensor x = randn_on(d, {t, k}, kFloat32, seed + 3);
  const Tensor out = fp8_a ? scaled_grouped_mm(x.to(kFloat8_e4m3fn), w.transpose(1, 2), rand_on(d, {t}, kFloat32, seed + 4), scale, offs)
                           : scaled_grouped_mm(x.to(kBFloat16), w.transpose(1, 2), std::nullopt, scale, offs);
  return {out.narrow(0, 0, valid_rows(offs))};
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
};
LayerConfig config(int64_t t, int64_t h, int64_t e, int64_t inter, int64_t k, DType dt = kBFloat16) { return {t, h, e, inter, k, dt}; }
LayerConfig lfm2(int64_t t) { return {t, 192, 8, 112, 2, kBFloat16, MoeScoring::Sigmoid, true}; }
LayerConfig with_shared(LayerConfig c) { c.shared = true; return c; }
LayerConfig with_fp8(LayerConfig c) { c.fp8 = true; return c; }

std::vector<Tensor> layer_case(Device d, const LayerConfig& c, uint64_t seed) {
  const auto [x, router] = routed_inputs(d, c.t, c.h, c.e, c.dt, seed);
  MoeExperts ex;
  MoeLayerOptions o;
  o.route.top_k = c.k;
  o.route.scoring = c.scoring;
  if (c.scoring == MoeScoring::Sigmoid) o.route.norm_eps = 1e-6;
  if (c.bias) o.route.expert_bias = rand_on(d, {c.e}, kFloat32, seed + 2) * Scalar(0.01);
  const Device cpu = Device::cpu();
  const Tensor gate_up = randn_on(d, {c.e, 2 * c.inter, c.h}, kFloat32, seed + 3) * Scalar(0.05);
  const Tensor down = randn_on(d, {c.e, c.h, c.inter}, kFloat32, seed + 4) * Scalar(0.05);
  if (c.fp8) {  // quantised once on the CPU so both devices see the same codes
    const auto [gq, gs] = quantize_fp8(gate_up.to(cpu), Fp8Granularity::Block128);
    const auto [dq, ds] = quantize_fp8(down.to(cpu), Fp8Granularity::Block128);
    ex.gate_up = gq.to(d);
    ex.gate_up_scale = gs.to(d);
    ex.down = dq.to(d);
    ex.down_scale = ds.to(d);
  } else {
    ex.gate_up = gate_up.to(c.dt);
    ex.down = down.to(c.dt);
  }
  if (c.shared) {
    o.shared = MoeSharedExpert{(randn_on(d, {2 * 48, c.h}, kFloat32, seed + 5) * Scalar(0.05)).to(c.dt),
                               (randn_on(d, {c.h, 48}, kFloat32, seed + 6) * Scalar(0.05)).to(c.dt),
                               (randn_on(d, {1, c.h}, kFloat32, seed + 7) * Scalar(0.05)).to(c.dt)};
  }
  return {moe_layer(x, router, ex, o)};
}

}  // namespace

// ---- grouped_mm ---------------------------------------------------------------------------------
EMBER_PARITY_CASE(moe_gmm_decode_bf16_one_row_groups, { return rows_case(d, 8, 128, 1536, 2048, kBFloat16, 1); });
EMBER_PARITY_CASE(moe_gmm_decode_f16_odd_n, { return rows_case(d, 5, 7, 333, 264, kFloat16, 2, 1); });
EMBER_PARITY_CASE(moe_gmm_decode_f32_k_tail, { return rows_case(d, 12, 3, 40, 36, kFloat32, 3); });
EMBER_PARITY_CASE(moe_gmm_tiled_bf16_prefill, { return rows_case(d, 700, 8, 200, 136, kBFloat16, 4, 3); });
EMBER_PARITY_CASE(moe_gmm_tiled_f16_empty_groups, { return rows_case(d, 300, 33, 72, 64, kFloat16, 5); });
EMBER_PARITY_CASE(moe_gmm_tiled_f32_odd, { return rows_case(d, 133, 4, 45, 52, kFloat32, 6); });
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
EMBER_PARITY_CASE(moe_scaled_gmm_decode_tensorwise, { return scaled_case(d, 8, 64, 512, 1024, 0, false, 30); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_rowwise, { return scaled_case(d, 3, 16, 300, 512, 1, false, 31); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_block, { return scaled_case(d, 8, 32, 384, 528, 2, false, 32); });
EMBER_PARITY_CASE(moe_scaled_gmm_decode_fp8_activations, { return scaled_case(d, 6, 8, 256, 256, 2, true, 33); });
EMBER_PARITY_CASE(moe_scaled_gmm_tiled_block, { return scaled_case(d, 400, 4, 260, 384, 2, false, 34); });
EMBER_PARITY_CASE(moe_scaled_gmm_tiled_rowwise_fp8_activations, { return scaled_case(d, 300, 3, 128, 256, 1, true, 35); });

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
EMBER_PARITY_CASE(moe_layer_odd_sizes_f32, { return layer_case(d, config(5, 36, 6, 20, 3, kFloat32), 60); });

}  // namespace ember::test
