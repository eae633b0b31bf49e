// Mixture of experts against PyTorch (scripts/fixtures/make_moe_fixtures.py): torch._grouped_mm
// in every mode and dtype, transformers' routing and permutation, whole MoE blocks in float64;
// torch's validation messages; FP8 expert products against float64 loops.
#include <gtest/gtest.h>

#include <ember/safetensors.h>

#include "compare.h"
#include "cuda/block_scale.h"

using namespace ember;

namespace {

const std::map<std::string, Tensor>& fixtures() {
  static const auto t = load_safetensors(test::fixture_path("moe.safetensors"));
  return t;
}
const std::map<std::string, Tensor>& fp8_fixtures() {
  static const auto t = load_safetensors(test::fixture_path("moe_fp8.safetensors"));
  return t;
}
Tensor fx(const std::string& key) { return fixtures().at(key); }

DType dtype_of_label(const std::string& label) { return label == "f32" ? kFloat32 : label == "bf16" ? kBFloat16 : kFloat16; }

// Runs f and returns the ember::Error message ("" when nothing was thrown).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(expr, text) EXPECT_NE(error_of([&] { (void)(expr); }).find(text), std::string::npos) << error_of([&] { (void)(expr); })

}  // namespace

TEST(MoeGroupedMm, EveryModeAndDtypeMatchesTorch) {
  for (const std::string label : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(label);
    const DType d = dtype_of_label(label);
    const auto in = [&](const std::string& k) { return fx("gmm." + k).to(d); };
    // 2D x 3D: weights as transposed views of [G, N, K]; rows 11, 12 lie past offs[-1].
    const Tensor rows = grouped_mm(in("2d3d.a"), in("2d3d.w").transpose(1, 2), fx("gmm.offs_rows"));
    ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{13, 24}));
    EXPECT_ALLCLOSE(rows.narrow(0, 0, 11), fx("gmm.2d3d." + label));
    const Tensor cols = grouped_mm(in("3d2d.a"), in("3d2d.w").t(), fx("gmm.offs_cols"));
    ASSERT_EQ(cols.sizes(), (std::vector<int64_t>{8, 20}));
    EXPECT_ALLCLOSE(cols.narrow(1, 0, 16), fx("gmm.3d2d." + label));
    const Tensor per_group = grouped_mm(in("2d2d.a"), in("2d2d.b"), fx("gmm.offs_k"));
    ASSERT_EQ(per_group.sizes(), (std::vector<int64_t>{3, 8, 16}));
    EXPECT_ALLCLOSE(per_group, fx("gmm.2d2d." + label));
    EXPECT_TENSOR_EQ(per_group.select(0, 1), zeros({8, 16}, d));  // the empty group
    EXPECT_ALLCLOSE(grouped_mm(in("3d3d.a"), in("3d3d.w").transpose(1, 2)), fx("gmm.3d3d." + label));
  }
}

TEST(MoeGroupedMm, MatchesAFloat64LoopWithEmptyGroupsAndOddSizes) {
  const Tensor a = randn({37, 40}, kFloat32, Device::cpu(), 1);
  const Tensor w = randn({5, 19, 40}, kFloat32, Device::cpu(), 2);  // [G, N, K]
  const std::vector<int32_t> ends = {0, 9, 9, 30, 35};
  const Tensor out = grouped_mm(a, w.transpose(1, 2), tensor(ends));
  const auto av = a.to_vector<float>(), wv = w.to_vector<float>();
  int64_t start = 0;
  for (int64_t g = 0; g < 5; ++g) {
    for (int64_t r = start; r < ends[g]; ++r) {
      for (int64_t n = 0; n < 19; ++n) {
        double s = 0;
        for (int64_t k = 0; k < 40; ++k) s += double(av[r * 40 + k]) * wv[(g * 19 + n) * 40 + k];
        EXPECT_NEAR(out.select(0, r).select(0, n).item<double>(), s, 1e-4 * (1 + std::abs(s)));
      }
    }
    start = ends[g];
  }
}

TEST(MoeGroupedMm, OutputRowsArePaddedTo16BytesLikeTorch) {
  const Tensor out = grouped_mm(randn({4, 16}, kFloat32, Device::cpu(), 3),
                                randn({3, 8, 16}, kFloat32, Device::cpu(), 4).narrow(1, 0, 6).transpose(1, 2),
                                tensor(std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(out.strides(), (std::vector<int64_t>{8, 1}));
}

TEST(MoeGroupedMm, OffsetsPastTheEndAreClamped) {
  const Tensor a = randn({6, 16}, kFloat32, Device::cpu(), 5), w = randn({2, 8, 16}, kFloat32, Device::cpu(), 6);
  const Tensor out = grouped_mm(a, w.transpose(1, 2), tensor(std::vector<int32_t>{4, 1000}));
  EXPECT_ALLCLOSE(out.narrow(0, 4, 2), mm(a.narrow(0, 4, 2), w.select(0, 1).t()));
  const Tensor decreasing = grouped_mm(a, w.transpose(1, 2), tensor(std::vector<int32_t>{4, 2}));  // group 1 empty
  EXPECT_ALLCLOSE(decreasing.narrow(0, 0, 4), mm(a.narrow(0, 0, 4), w.select(0, 0).t()));
}

TEST(MoeGroupedMm, ValidatesLikeTorch) {
  const Tensor a = randn({10, 16}, kFloat32, Device::cpu(), 7), b = randn({3, 16, 8}, kFloat32, Device::cpu(), 8);
  const Tensor offs = tensor(std::vector<int32_t>{3, 3, 8});
  EXPECT_ERROR_HAS(grouped_mm(a.to(kFloat64), b, offs), "Expected mat_a to be Float32, BFloat16 or Float16 matrix");
  EXPECT_ERROR_HAS(grouped_mm(a, b.to(kInt32), offs), "Expected mat_b to be Float32, BFloat16 or Float16 matrix");
  EXPECT_ERROR_HAS(grouped_mm(a.select(0, 0), b, offs), "mat_a has to be 2 or 3d");
  EXPECT_ERROR_HAS(grouped_mm(a, b.unsqueeze(0), offs), "mat_b has to be 2 or 3d");
  EXPECT_ERROR_HAS(grouped_mm(a, b.to(kBFloat16), offs), "to have the same dtype");
  EXPECT_ERROR_HAS(grouped_mm(a, randn({3, 8, 8}, kFloat32, Device::cpu(), 9), offs), "contraction dimension of mat_a and mat_b must match");
  EXPECT_ERROR_HAS(grouped_mm(a, randn({3, 16, 7}, kFloat32, Device::cpu(), 9), offs), "strides should be multiple of 16 bytes");
  EXPECT_ERROR_HAS(grouped_mm(randn({10, 32}, kFloat32, Device::cpu(), 9).slice(1, 0, 32, 2), b, offs), "Invalid strides/sizes");
  EXPECT_ERROR_HAS(grouped_mm(a, b), "Have to provide offsets if there is a 2d matrix");
  EXPECT_ERROR_HAS(grouped_mm(randn({3, 5, 16}, kFloat32, Device::cpu(), 9), b, offs), "no offset if both matrices are 3d");
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs.to(kInt64)), "Offsets have to be int32");
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs.view({3, 1})), "offs has to be 1D");
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs, zeros({8}), std::nullopt), "Bias not supported yet");
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs, kBFloat16), "Grouped gemm output dtype must match `mat_a` dtype");
  EXPECT_ERROR_HAS(grouped_mm(a, b, tensor(std::vector<int32_t>{3, 8})), "matrix batch sizes have to match");
  EXPECT_ERROR_HAS(grouped_mm(randn({3, 5, 16}, kFloat32, Device::cpu(), 9), randn({2, 16, 8}, kFloat32, Device::cpu(), 9)),
                   "batched dimension has to match");
  // torch checks bias before out_dtype and offs dtype before bias.
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs, zeros({8}), kBFloat16), "Bias not supported yet");
  EXPECT_ERROR_HAS(grouped_mm(a, b, offs.to(kInt64), zeros({8}), std::nullopt), "Offsets have to be int32");
}

// out[r, n] = sum_k (a[r, k] * sa[r]) * (w[g, n, k] * scale(g, n, k)) in float64.
static Tensor scaled_reference(const Tensor& a, const Tensor& sa, const Tensor& w, const Tensor& scale, const std::vector<int32_t>& ends,
                               const std::string& kind) {
  const int64_t t = a.size(0), kk = a.size(1), n = w.size(1);
  const auto av = a.to(kFloat64).to_vector<double>(), wv = w.to(kFloat64).to_vector<double>();
  const auto sv = scale.to(kFloat64).contiguous().to_vector<double>();
  const auto sav = sa.defined() ? sa.to(kFloat64).to_vector<double>() : std::vector<double>(t, 1.0);
  const int64_t kb = (kk + 127) / 128, nb = (n + 127) / 128;
  std::vector<double> out(t * n, 0.0);
  int64_t start = 0;
  for (size_t g = 0; g < ends.size(); ++g) {
    for (int64_t r = start; r < ends[g]; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < kk; ++k) {
          const double sc = kind == "tensor" ? sv[g] : kind == "row" ? sv[g * n + j] : sv[(g * nb + j / 128) * kb + k / 128];
          s += av[r * kk + k] * sav[sav.size() == 1 ? 0 : r] * wv[(g * n + j) * kk + k] * sc;
        }
        out[r * n + j] = s;
      }
    start = ends[g];
  }
  return tensor(out, {t, n});
}

TEST(MoeScaledGroupedMm, TensorRowAndBlockScalesMatchFloat64) {
  const int64_t g = 3, n = 200, k = 272, t = 9;
  const std::vector<int32_t> ends = {2, 2, 7};  // empty expert 1, rows 7, 8 unwritten
  const Tensor w = (randn({g, n, k}, kFloat32, Device::cpu(), 10) * Scalar(50)).to(kFloat8_e4m3fn);
  const Tensor x = randn({t, k}, kFloat32, Device::cpu(), 11);
  const Tensor scales[] = {rand({g}, kFloat32, Device::cpu(), 12), rand({g, n}, kFloat32, Device::cpu(), 13),
                           rand({g, 2, 3}, kFloat32, Device::cpu(), 14)};
  const char* kinds[] = {"tensor", "row", "block"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(kinds[i]);
    // Weight-only FP8 (bf16 activations) and FP8 activations with per-row scales.
    const Tensor xb = x.to(kBFloat16);
    const Tensor out = scaled_grouped_mm(xb, w.transpose(1, 2), std::nullopt, scales[i], tensor(ends), kFloat32);
    EXPECT_ALLCLOSE(out.narrow(0, 0, 7), scaled_reference(xb, Tensor(), w, scales[i], ends, kinds[i]).narrow(0, 0, 7).to(kFloat32),
                    1e-4, 1e-3);
    const Tensor xq = x.to(kFloat8_e4m3fn), sa = rand({t}, kFloat32, Device::cpu(), 15);
    const Tensor out8 = scaled_grouped_mm(xq, w.transpose(1, 2), sa, scales[i], tensor(ends), kBFloat16);
    EXPECT_ALLCLOSE(out8.narrow(0, 0, 7), scaled_reference(xq, sa, w, scales[i], ends, kinds[i]).narrow(0, 0, 7).to(kBFloat16));
  }
  EXPECT_ERROR_HAS(scaled_grouped_mm(x.to(kBFloat16), w.transpose(1, 2), std::nullopt, rand({g, 3, 3}, kFloat32, Device::cpu(), 1),
                                     tensor(ends)),
                   "weight scale shape");
  EXPECT_ERROR_HAS(scaled_grouped_mm(x.to(kFloat8_e4m3fn), w.transpose(1, 2), std::nullopt, scales[0], tensor(ends)), "scale_a");
}

TEST(MoeRoute, SoftmaxAndSigmoidWithBiasMatchTransformers) {
  const Tensor logits = fx("route.logits");
  MoeRouteOptions qwen{.top_k = 4};
  const auto [w, ids] = moe_route(logits, qwen);
  EXPECT_TENSOR_EQ(ids, fx("route.softmax.ids"));
  EXPECT_ALLCLOSE(w, fx("route.softmax.weights"));
  MoeRouteOptions lfm2{.top_k = 4, .scoring = MoeScoring::Sigmoid, .norm_eps = 1e-6, .routed_scaling = 2.5,
                       .expert_bias = fx("route.bias")};
  const auto [w2, ids2] = moe_route(logits, lfm2);
  EXPECT_TENSOR_EQ(ids2, fx("route.sigmoid.ids"));
  EXPECT_ALLCLOSE(w2, fx("route.sigmoid.weights"));
}

TEST(MoeRoute, TiesGoToTheLowerExpertAndValidation) {
  const Tensor logits = tensor(std::vector<float>{1, 3, 3, 0, 3}, {1, 5});
  const auto [w, ids] = moe_route(logits, MoeRouteOptions{.top_k = 2, .norm_topk = false});
  EXPECT_TENSOR_EQ(ids, tensor(std::vector<int32_t>{1, 2}, {1, 2}));
  EXPECT_ERROR_HAS(moe_route(logits, MoeRouteOptions{.top_k = 6}), "top_k");
  EXPECT_ERROR_HAS(moe_route(logits, MoeRouteOptions{.top_k = 2, .expert_bias = zeros({4})}), "expert_bias");
}

TEST(MoePermute, MatchesArgsortHistcCumsum) {
  const MoePermutation p = moe_permute(fx("perm.ids"), 8);
  EXPECT_TENSOR_EQ(p.order, fx("perm.order"));
  EXPECT_TENSOR_EQ(p.inverse, fx("perm.inverse"));
  EXPECT_TENSOR_EQ(p.tokens, fx("perm.tokens"));
  EXPECT_TENSOR_EQ(p.counts, fx("perm.counts"));
  EXPECT_TENSOR_EQ(p.offsets, fx("perm.offsets"));
  const MoePermutation p64 = moe_permute(fx("perm.ids").to(kInt64), 8);
  EXPECT_TENSOR_EQ(p64.order, fx("perm.order"));
  EXPECT_ALLCLOSE(moe_unpermute(fx("perm.y"), p.inverse, fx("perm.weights")), fx("perm.unpermuted"));
}

namespace {

MoeLayerOptions layer_options(const std::string& name) {
  MoeLayerOptions o;
  o.route.top_k = name == "lfm2" ? 2 : 4;
  if (name == "lfm2") {
    o.route.scoring = MoeScoring::Sigmoid;
    o.route.norm_eps = 1e-6;
    o.route.expert_bias = fx("layer.lfm2.bias");
  }
  if (name == "qwen35_shared") {
    o.shared = MoeSharedExpert{fx("layer.qwen35_shared.shared_gate_up").to(kFloat32), fx("layer.qwen35_shared.shared_down").to(kFloat32),
                               fx("layer.qwen35_shared.shared_gate").to(kFloat32)};
  }
  return o;
}

}  // namespace

TEST(MoeLayer, BlocksMatchAFloat64TorchReference) {
  for (const std::string name : {"qwen3", "qwen3_bf16", "lfm2", "qwen35_shared"}) {
    SCOPED_TRACE(name);
    const DType d = name == "qwen3_bf16" ? kBFloat16 : kFloat32;
    const std::string k = "layer." + name + ".";
    const Tensor x = fx(k + "x").to(d), router = fx(k + "router").to(d);
    const Tensor gate_up = fx(k + "gate_up").to(d), down = fx(k + "down").to(d);
    const MoeLayerOptions o = layer_options(name);
    // The routing the reference took (margins far above rounding by construction).
    const auto [w, ids] = moe_route(linear(x.to(kFloat32), router.to(kFloat32)), o.route);
    EXPECT_TENSOR_EQ(ids, fx(k + "ids"));
    const Tensor out = moe_layer(x, router, gate_up, down, o);
    EXPECT_ALLCLOSE(out, fx(k + "out").to(d), d == kFloat32 ? 1e-5 : 1e-2, d == kFloat32 ? 1e-5 : 1e-2);
    // Separate gate and up views give the same block.
    MoeExperts split;
    const int64_t inter = down.size(2);
    split.gate = gate_up.narrow(1, 0, inter).contiguous();
    split.up = gate_up.narrow(1, inter, inter).contiguous();
    split.down = down;
    EXPECT_ALLCLOSE(moe_layer(x, router, split, o), out, 1e-6, 1e-6);
  }
}

TEST(MoeLayer, Fp8BlockScaledExpertsMatchFloat64) {
  const auto f = [](const std::string& k) { return fp8_fixtures().at("layer.fp8_block." + k); };
  MoeExperts e;
  e.gate_up = f("gate_up").view(kFloat8_e4m3fn);
  e.gate_up_scale = f("gate_up_scale");
  e.down = f("down").view(kFloat8_e4m3fn);
  e.down_scale = f("down_scale");
  MoeLayerOptions o;
  o.route.top_k = 1;
  const Tensor out = moe_layer(f("x"), f("router"), e, o);
  EXPECT_ALLCLOSE(out, f("out").to(kFloat32), 1e-4, 1e-4);
}

TEST(MoeLayer, Validation) {
  const Tensor x = randn({2, 32}, kFloat32, Device::cpu(), 1), router = randn({8, 32}, kFloat32, Device::cpu(), 2);
  const Tensor gate_up = randn({8, 32, 32}, kFloat32, Device::cpu(), 3), down = randn({8, 32, 16}, kFloat32, Device::cpu(), 4);
  MoeLayerOptions o;
  o.route.top_k = 2;
  EXPECT_ERROR_HAS(moe_layer(x, router, gate_up.narrow(1, 0, 30), down, o), "gate_up shape");
  EXPECT_ERROR_HAS(moe_layer(x, router.narrow(0, 0, 7), gate_up, down, o), "gate_up shape");
  EXPECT_ERROR_HAS(moe_layer(x.to(kBFloat16), router, gate_up, down, o), "router_weight");
  MoeExperts fp8;
  fp8.gate_up = gate_up.to(kFloat8_e4m3fn);
  fp8.down = down.to(kFloat8_e4m3fn);
  EXPECT_ERROR_HAS(moe_layer(x, router, fp8, o), "gate_up_scale");
  o.route.top_k = 9;
  EXPECT_ERROR_HAS(moe_layer(x, router, gate_up, down, o), "top_k");
}

// The CUDA kernels' scale lookup (cuda/block_scale.h, host code too) against the CPU reference:
// through identity activations scaled_grouped_mm returns the decoded weights, code(n, k) times the
// scale of block (n / 128, k / 128), here with a strided scale tensor and partial last blocks.
TEST(MoeBlockScale, OffsetMatchesTheCpuReferenceDecoding) {
  const Device cpu = Device::cpu();
  const int64_t g_count = 2, n = 300, k = 272, nb = 3, kb = 3;
  std::vector<float> values(static_cast<size_t>(g_count * nb * kb));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f + static_cast<float>(i) / 64.f;  // distinct, exact products
  // [G, NB, KB] stored K-block-major: strides (NB, 1, G * NB).
  const Tensor scale = tensor(values, {g_count, nb, kb}).permute({2, 0, 1}).contiguous().permute({1, 2, 0});
  ASSERT_FALSE(scale.is_contiguous());
  const Tensor codes = (randn({g_count, n, k}, kFloat32, cpu, 70) * Scalar(20)).to(kFloat8_e4m3fn);
  std::vector<float> eye(static_cast<size_t>(k * k), 0.f);
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1.f;
  const Tensor identity = tensor(eye, {k, k});
  const Tensor decoded = scaled_grouped_mm(cat({identity, identity}), codes.transpose(1, 2), std::nullopt, scale,
                                           tensor(std::vector<int32_t>{static_cast<int32_t>(k), static_cast<int32_t>(2 * k)}),
                                           kFloat32);  // [G * K, N]: row g * K + k is expert g's column k
  const std::vector<float> out = decoded.contiguous().to_vector<float>();
  const std::vector<float> code = codes.to(kFloat32).contiguous().to_vector<float>();
  const float* s = scale.data_ptr<float>();
  int64_t mismatches = 0;
  for (int64_t g = 0; g < g_count; ++g)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const float expected = code[static_cast<size_t>((g * n + r) * k + c)] *
                               s[cuda::gmm::block_scale_offset(g, r, c, scale.stride(0), scale.stride(1), scale.stride(2))];
        mismatches += out[static_cast<size_t>((g * k + c) * n + r)] != expected;
      }
  EXPECT_EQ(mismatches, 0);
  // The block boundaries: n picks the row of blocks, k the column.
  EXPECT_EQ(cuda::gmm::block_scale_offset(1, 127, 128, 100, 10, 1), 101);
  EXPECT_EQ(cuda::gmm::block_scale_offset(1, 128, 127, 100, 10, 1), 110);
  EXPECT_EQ(cuda::gmm::block_scale_offset(0, 299, 271, 100, 10, 1), 22);
}
