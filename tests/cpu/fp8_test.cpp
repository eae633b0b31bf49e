// FP8 quantization and scaled_mm against PyTorch (scripts/fixtures/make_fp8_fixtures.py).
#include <gtest/gtest.h>

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
