// FP8 quantization and scaled_mm against PyTorch (scripts/fixtures/make_fp8_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>

#include <ember/safetensors.h>

#include "compare.h"

using namespace ember;

namespace {

const std::map<std::string, Tensor>& fixtures() {
  static const auto t = load_safetensors(test::fixture_path("fp8.safetensors"));
  return t;
}
Tensor fx(const std::string& key) { return fixtures().at(key); }
Tensor fp8(const std::string& key) { return fx(key).view(kFloat8_e4m3fn); }

}  // namespace

TEST(Fp8, QuantizeMatchesTheTorchRecipe) {
  const Tensor x = fx("quant.x");
  const std::pair<const char*, Fp8Granularity> cases[] = {{"tensorwise", Fp8Granularity::Tensorwise},
                                                          {"rowwise", Fp8Granularity::Rowwise},
                                                          {"block", Fp8Granularity::Block128}};
  for (const auto& [label, g] : cases) {
    const auto [q, scale] = quantize_fp8(x, g);
    SCOPED_TRACE(label);
    EXPECT_ALLCLOSE(scale, fx(std::string("quant.") + label + ".scale"), 1e-6, 0);
    // Codes may differ by one where x / scale lands within float rounding of a code midpoint.
    const Tensor expected = fp8(std::string("quant.") + label + ".q");
    EXPECT_ALLCLOSE(q.to(kFloat32), expected.to(kFloat32), 0.0625, 1e-3);
    const Tensor back = dequantize_fp8(q, scale);
    EXPECT_ALLCLOSE(back, x, 0.07, 1e-2);
  }
}

TEST(Fp8, ScaledMmMatchesTorch) {
  for (const char* shape : {"1x64x48", "3x96x40", "17x80x33"}) {
    SCOPED_TRACE(shape);
    const std::string key = std::string("smm.") + shape;
    const Tensor a = fp8(key + ".a"), b = fp8(key + ".w").t();
    const Tensor sa_t = scalar_tensor(0.37, kFloat32), sb_t = scalar_tensor(1.9, kFloat32);
    const Tensor sa_r = fx(key + ".sa_r"), sb_r = fx(key + ".sb_r"), bias = fx(key + ".bias");
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_t, sb_t, {}, kFloat32), fx(key + ".tensorwise.f32"), 1e-5, 1e-4);
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_t, sb_t), fx(key + ".tensorwise.bf16"));
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_r, sb_r), fx(key + ".rowwise.bf16"));
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_r, sb_r, {}, kFloat16), fx(key + ".rowwise.f16"));
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_r, sb_r, bias), fx(key + ".rowwise.bias.bf16"));
    // fp8 output saturates like torch's: compare as values (one code of rounding slack).
    EXPECT_ALLCLOSE(scaled_mm(a, b, sa_t, sb_t, {}, kFloat8_e4m3fn).to(kFloat32),
                    fp8(key + ".tensorwise.fp8").to(kFloat32), 0.0625, 1e-3);
  }
}

TEST(Fp8, ScaledMmMatchesFloat64OfDequantizedOperands) {
  const Tensor a = randn({5, 64}, kFloat32, Device::cpu(), 3).to(kFloat8_e4m3fn);
  const Tensor w = randn({24, 64}, kFloat32, Device::cpu(), 4).to(kFloat8_e4m3fn);
  const Tensor sa = rand({5, 1}, kFloat32, Device::cpu(), 5), sb = rand({1, 24}, kFloat32, Device::cpu(), 6);
  const Tensor ref = mul(mul(mm(a.to(kFloat64), w.t().to(kFloat64)), sa.to(kFloat64)), sb.to(kFloat64));
  EXPECT_ALLCLOSE(scaled_mm(a, w.t(), sa, sb, {}, kFloat32).to(kFloat64), ref, 1e-5, 1e-5);
}

// use_fast_accum (torch's flag) lets a GPU add the products with less precision; the CPU backend
// ignores it: the same float64-checked products, and the same validation.
TEST(Fp8, ScaledMmFastAccumIsExactOnCpu) {
  const Tensor a = randn({1, 512}, kFloat32, Device::cpu(), 7).to(kFloat8_e4m3fn);
  const Tensor w = randn({40, 512}, kFloat32, Device::cpu(), 8).to(kFloat8_e4m3fn);
  const Tensor sa = full({1, 1}, 0.5, kFloat32), sb = rand({1, 40}, kFloat32, Device::cpu(), 9);
  const Tensor ref = mul(mul(mm(a.to(kFloat64), w.t().to(kFloat64)), sa.to(kFloat64)), sb.to(kFloat64));
  EXPECT_ALLCLOSE(scaled_mm(a, w.t(), sa, sb, {}, kFloat32, true).to(kFloat64), ref, 1e-5, 1e-5);
  EXPECT_TENSOR_EQ(scaled_mm(a, w.t(), sa, sb, {}, kBFloat16, true), scaled_mm(a, w.t(), sa, sb));
  EXPECT_THROW(scaled_mm(a, w.t(), sa, sb, scalar_tensor(1.0, kFloat32), kFloat32, true), Error);
}

TEST(Fp8, ScaledMmEmptyContractionIsZeros) {
  const Tensor a = empty({3, 0}, kFloat8_e4m3fn), b = empty({0, 5}, kFloat8_e4m3fn);
  const Tensor one = scalar_tensor(1.0, kFloat32);
  EXPECT_TENSOR_EQ(scaled_mm(a, b, one, one), zeros({3, 5}, kBFloat16));
}

TEST(Fp8, ScaledMmRejectsLikeTorch) {
  const Tensor a = zeros({4, 32}, kFloat8_e4m3fn), b = zeros({16, 32}, kFloat8_e4m3fn).t();
  const Tensor one = scalar_tensor(1.0, kFloat32);
  const auto message = [](const std::function<void()>& f) { return test::error_of(f); };
  EXPECT_NE(message([&] { scaled_mm(a.to(kFloat32), b, one, one); }).find("expected a float8_e4m3fn or float8_e5m2 matrix"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, zeros({16, 32}, kFloat8_e4m3fn), one, one); }).find("cannot be multiplied"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, ones({4}), ones({16})); }).find("Invalid scaling configuration"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, ones({4, 1}, kFloat64), ones({1, 16})); }).find("Invalid scaling configuration"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, ones({1, 4}).t(), ones({16, 1}).t()); }).find("contiguous"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, one, one, zeros({16}), kFloat32); }).find("expected no bias"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, one, one, zeros({16}), kBFloat16); }).find("bias dtype: expected bfloat16"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, one, one, zeros({15}, kBFloat16)); }).find("Bias must be size 16"), std::string::npos);
  EXPECT_NE(message([&] { scaled_mm(a, b, one, one, {}, kInt32); }).find("out_dtype: expected"), std::string::npos);
  EXPECT_NE(message([&] { quantize_fp8(zeros({4}), Fp8Granularity::Rowwise); }).find("at least 2 dims"), std::string::npos);
}

// ---- fp8_linear -----------------------------------------------------------------------------------
namespace {

enum class ScaleLayout { Tensorwise, PerRow, Blocks };

// out[..., n] = sum_k x[..., k] * code[n, k] * s(n, k) (+ bias[n]) in float64, the scale s(n, k)
// read from the fp32 scale tensor by `layout` (one value; row n; block (n / 128, k / 128)), not
// through dequantize_fp8. Returns float64 of shape [..., N].
Tensor fp8_linear_reference(const Tensor& x, const Tensor& weight, const Tensor& scale, ScaleLayout layout,
                            const std::optional<Tensor>& bias = {}) {
  const int64_t n = weight.size(0), k = weight.size(1), m = x.numel() / std::max<int64_t>(k, 1);
  const std::vector<double> xv = x.to(kFloat64).to_vector<double>();
  const std::vector<double> codes = weight.to(kFloat64).to_vector<double>();
  const std::vector<float> sv = scale.to_vector<float>();  // logical (row-major) order
  const int64_t scale_cols = layout == ScaleLayout::Blocks ? scale.size(1) : 0;
  const auto s = [&](int64_t r, int64_t c) -> double {
    switch (layout) {
      case ScaleLayout::Tensorwise: return sv.at(0);
      case ScaleLayout::PerRow: return sv.at(static_cast<size_t>(r));
      case ScaleLayout::Blocks: return sv.at(static_cast<size_t>(r / 128 * scale_cols + c / 128));
    }
    return 0;
  };
  const std::vector<double> bv = bias ? bias->to(kFloat64).to_vector<double>() : std::vector<double>(static_cast<size_t>(n), 0.0);
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += xv[static_cast<size_t>(i * k + c)] * (codes[static_cast<size_t>(r * k + c)] * s(r, c));
      out[static_cast<size_t>(i * n + r)] = acc + bv[static_cast<size_t>(r)];
    }
  std::vector<int64_t> shape = x.sizes();
  shape.back() = n;
  return tensor<double>(std::move(out), shape);
}

// Codes of randn values (e4m3fn: up to 448; e5m2 to 57344) and positive scales spread over a factor
// of ~20, so that a scale applied to the wrong row or block shows.
Tensor fp8_codes(int64_t n, int64_t k, uint64_t seed, DType dtype = kFloat8_e4m3fn) {
  return (randn({n, k}, kFloat32, Device::cpu(), seed) * 3.0).to(dtype);
}
Tensor spread_scales(std::vector<int64_t> shape, uint64_t seed) {
  return rand(std::move(shape), kFloat32, Device::cpu(), seed) * 0.2 + 0.01;
}

// x f32 (rtol 1e-5: the f32 product code * scale, then f32 sums over K = 200, against float64) or
// bf16/f16 (one rounding of the f32 result: half an ulp, 2^-9 relative for bf16).
void expect_fp8_linear_matches(const Tensor& x, const Tensor& w, const Tensor& scale, ScaleLayout layout,
                               const std::optional<Tensor>& bias) {
  const Tensor out = fp8_linear(x, w, scale, bias);
  ASSERT_EQ(out.dtype(), x.dtype());
  const bool f32 = x.dtype() == kFloat32;
  EXPECT_ALLCLOSE(out.to(kFloat64), fp8_linear_reference(x, w, scale, layout, bias), f32 ? 1e-5 : 4e-3, f32 ? 1e-5 : 1e-4);
}

}  // namespace

// N = 130, K = 200: the blocks are partial in both dims ([2, 2] scales covering 128 + 2 rows and
// 128 + 72 columns). Every scale layout the op takes, x f32 and bf16, with and without bias.
TEST(Fp8, LinearMatchesFloat64ForEveryScaleLayout) {
  const int64_t n = 130, k = 200;
  const Tensor w = fp8_codes(n, k, 40);
  const Tensor per_row = spread_scales({n, 1}, 41);
  const Tensor blocks = spread_scales({2, 2}, 42);
  const std::tuple<const char*, Tensor, ScaleLayout> scales[] = {
      {"tensorwise 0-dim", scalar_tensor(0.0173, kFloat32), ScaleLayout::Tensorwise},
      {"tensorwise [1]", full({1}, 0.0173, kFloat32), ScaleLayout::Tensorwise},
      {"tensorwise [1, 1]", full({1, 1}, 0.0173, kFloat32), ScaleLayout::Tensorwise},
      {"per row [N, 1]", per_row, ScaleLayout::PerRow},
      {"per row [N]", per_row.reshape({n}), ScaleLayout::PerRow},
      {"per row, a strided [N, 1] view", cat({per_row, per_row * 3.0}, 1).narrow(1, 0, 1), ScaleLayout::PerRow},
      {"blocks [2, 2]", blocks, ScaleLayout::Blocks},
      {"blocks, a transposed view", blocks.t().contiguous().t(), ScaleLayout::Blocks},
  };
  for (const DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor x = randn({5, k}, kFloat32, Device::cpu(), 43).to(dt);
    const Tensor bias = randn({n}, kFloat32, Device::cpu(), 44).to(dt);
    for (const auto& [label, scale, layout] : scales) {
      SCOPED_TRACE(fmt::format("{}, x {}", label, name(dt)));
      expect_fp8_linear_matches(x, w, scale, layout, std::nullopt);
      expect_fp8_linear_matches(x, w, scale, layout, bias);
    }
  }
}

// e5m2 codes (decoded exactly like e4m3fn), per-row and block scales.
TEST(Fp8, LinearE5m2MatchesFloat64) {
  const int64_t n = 130, k = 200;
  const Tensor w = fp8_codes(n, k, 45, kFloat8_e5m2);
  const Tensor x = randn({3, k}, kFloat32, Device::cpu(), 46);
  const Tensor bias = randn({n}, kFloat32, Device::cpu(), 47);
  expect_fp8_linear_matches(x, w, spread_scales({n, 1}, 48), ScaleLayout::PerRow, bias);
  expect_fp8_linear_matches(x.to(kBFloat16), w, spread_scales({2, 2}, 49), ScaleLayout::Blocks, std::nullopt);
}

// Special codes: an e4m3fn NaN (0x7F, 0xFF) makes its output row NaN; e5m2 +-inf (0x7C, 0xFC) make
// it +-inf times the sign of that x element, e5m2 NaN (0x7E) NaN, like the float64 product.
TEST(Fp8, LinearSpecialCodesPropagate) {
  const int64_t n = 130, k = 200;
  for (const DType dt : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    SCOPED_TRACE(name(dt));
    const bool e4m3 = dt == kFloat8_e4m3fn;
    const Tensor w = fp8_codes(n, k, 51, dt).contiguous();
    auto* codes = static_cast<uint8_t*>(w.raw_data());
    codes[3 * k + 10] = e4m3 ? 0x7F : 0x7C;
    codes[70 * k + 199] = e4m3 ? 0xFF : 0xFC;
    codes[129 * k + 0] = e4m3 ? 0x7F : 0x7E;
    const Tensor x = randn({3, k}, kFloat32, Device::cpu(), 52);
    expect_fp8_linear_matches(x, w, spread_scales({n, 1}, 53), ScaleLayout::PerRow, std::nullopt);
    expect_fp8_linear_matches(x.to(kBFloat16), w, spread_scales({2, 2}, 54), ScaleLayout::Blocks, std::nullopt);
    const std::vector<float> out = fp8_linear(x, w, spread_scales({n, 1}, 53)).to_vector<float>();
    EXPECT_TRUE(std::isnan(out[129]) && (e4m3 ? std::isnan(out[3]) : std::isinf(out[3]))) << "the special rows must not come out finite";
  }
}

// K <= 128 with N > 128: block scales [ceil(N/128), 1] have the per-row layout's trailing 1 but
// one row per 128 weight rows (not one per row).
TEST(Fp8, LinearBlockScalesWithOneColumn) {
  const int64_t n = 300, k = 96;
  const Tensor w = fp8_codes(n, k, 50);
  const Tensor x = randn({4, k}, kFloat32, Device::cpu(), 51);
  expect_fp8_linear_matches(x, w, spread_scales({3, 1}, 52), ScaleLayout::Blocks, std::nullopt);
  expect_fp8_linear_matches(x.to(kBFloat16), w, spread_scales({3, 1}, 52), ScaleLayout::Blocks,
                            randn({n}, kBFloat16, Device::cpu(), 53));
}

// Views: a weight sliced from a wider one (and starting mid-row), x with a row stride past K, and
// an undefined bias Tensor (the same as none).
TEST(Fp8, LinearTakesViewsAndAnUndefinedBias) {
  const Tensor wide = fp8_codes(130, 260, 54);
  const Tensor w = wide.narrow(1, 7, 200);
  const Tensor x = randn({6, 211}, kFloat32, Device::cpu(), 55).narrow(1, 3, 200);
  const Tensor blocks = spread_scales({2, 2}, 56);
  expect_fp8_linear_matches(x, w, blocks, ScaleLayout::Blocks, std::nullopt);
  expect_fp8_linear_matches(x.to(kBFloat16), w, blocks, ScaleLayout::Blocks, randn({130}, kBFloat16, Device::cpu(), 57));
  EXPECT_TENSOR_EQ(fp8_linear(x, w, blocks, Tensor()), fp8_linear(x, w, blocks));
}

// x [2, 3, K] -> [2, 3, N] (the rows of x [6, K]); x [K] -> [N].
TEST(Fp8, LinearKeepsLeadingDims) {
  const Tensor w = fp8_codes(130, 200, 58);
  const Tensor scale = spread_scales({130}, 59);
  const Tensor x = randn({2, 3, 200}, kBFloat16, Device::cpu(), 60);
  const Tensor out = fp8_linear(x, w, scale);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 130}));
  EXPECT_TENSOR_EQ(out, fp8_linear(x.reshape({6, 200}), w, scale).reshape({2, 3, 130}));
  expect_fp8_linear_matches(x, w, scale, ScaleLayout::PerRow, std::nullopt);
  const Tensor x1 = randn({200}, kFloat32, Device::cpu(), 61);
  EXPECT_EQ(fp8_linear(x1, w, scale).sizes(), (std::vector<int64_t>{130}));
  expect_fp8_linear_matches(x1, w, scale, ScaleLayout::PerRow, std::nullopt);
}

// K = 0: zeros, plus the bias (every scale layout that a [5, 0] weight takes).
TEST(Fp8, LinearEmptyContractionIsZerosPlusBias) {
  const Tensor w0 = empty({5, 0}, kFloat8_e4m3fn);
  const Tensor x0 = empty({3, 0}, kBFloat16);
  EXPECT_TENSOR_EQ(fp8_linear(x0, w0, scalar_tensor(2.0, kFloat32)), zeros({3, 5}, kBFloat16));
  const Tensor bias = randn({5}, kBFloat16, Device::cpu(), 62);
  EXPECT_TENSOR_EQ(fp8_linear(x0, w0, ones({5, 1}), bias), bias.reshape({1, 5}).expand({3, 5}).contiguous());
  EXPECT_TENSOR_EQ(fp8_linear(empty({3, 0}), w0, ones({5})), zeros({3, 5}));
  EXPECT_TENSOR_EQ(fp8_linear(empty({2, 3, 0}), w0, ones({5})), zeros({2, 3, 5}));
}

// No rows: x [0, K] -> [0, N] and x [2, 0, K] -> [2, 0, N], in x's dtype.
TEST(Fp8, LinearNoRows) {
  const Tensor w = fp8_codes(5, 64, 63);
  EXPECT_EQ(fp8_linear(empty({0, 64}), w, ones({1})).sizes(), (std::vector<int64_t>{0, 5}));
  const Tensor out = fp8_linear(empty({2, 0, 64}, kBFloat16), w, ones({5, 1}), randn({5}, kBFloat16, Device::cpu(), 62));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(out.dtype(), kBFloat16);
}

TEST(Fp8, LinearRejectsBadArguments) {
  const Tensor x = randn({4, 32}, kBFloat16, Device::cpu(), 64);
  const Tensor w = zeros({16, 32}, kFloat8_e4m3fn), s = ones({16, 1});
  const auto error = [](const std::function<void()>& f) {
    const std::string message = test::error_of(f);
    EXPECT_NE(message.find("[fp8_linear]"), std::string::npos) << message;
    return message;
  };
  const auto has = [](const std::string& message, const char* phrase) {
    return message.find(phrase) != std::string::npos ? ::testing::AssertionSuccess()
                                                     : ::testing::AssertionFailure() << "\"" << message << "\" lacks \"" << phrase << "\"";
  };
  EXPECT_THROW(fp8_linear(x.to(kInt32), w, s), Error);
  EXPECT_TRUE(has(error([&] { fp8_linear(x.to(kInt32), w, s); }), "x dtype: expected float32, float16 or bfloat16, got int32"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w.to(kBFloat16), s); }), "weight dtype: expected float8_e4m3fn or float8_e5m2, got bfloat16"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, zeros({1, 16, 32}, kFloat8_e4m3fn), s); }), "weight: expected a matrix [N, K] (2 dims), got 3 dims"));
  EXPECT_TRUE(has(error([&] { fp8_linear(scalar_tensor(1.0, kBFloat16), w, s); }), "x: expected at least 1 dim"));
  EXPECT_TRUE(has(error([&] { fp8_linear(randn({4, 31}, kBFloat16, Device::cpu(), 65), w, s); }), "cannot be multiplied: expected x [..., 32]"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, s.to(kFloat16)); }), "weight_scale dtype: expected float32, got float16"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, ones({16, 2})); }), "weight_scale shape for a 16x32 weight"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, ones({15})); }), "weight_scale shape"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, ones({1, 2})); }), "weight_scale shape"));  // blocks of a 16x32 weight: [1, 1]
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, s, zeros({16})); }), "bias dtype: expected bfloat16 (x's dtype), got float32"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, s, zeros({15}, kBFloat16)); }), "bias shape: expected [16]"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, s, zeros({1, 16}, kBFloat16)); }), "bias shape: expected [16]"));
  EXPECT_TRUE(has(error([&] { fp8_linear(Tensor(), w, s); }), "x: expected a defined tensor"));
  EXPECT_TRUE(has(error([&] { fp8_linear(x, w, Tensor()); }), "weight_scale: expected a defined tensor"));
}
