// rms_norm against torch.nn.functional.rms_norm fixtures (scripts/fixtures/make_norm_fixtures.py),
// a float64 loop, and its errors.
#include <gtest/gtest.h>

#include <ember/safetensors.h>

#include <cmath>

#include "compare.h"

using namespace ember;

namespace {

const std::map<std::string, Tensor>& fixtures() {
  static const auto t = load_safetensors(test::fixture_path("rms_norm.safetensors"));
  return t;
}

}  // namespace

TEST(RmsNorm, MatchesTorch) {
  const auto& t = fixtures();
  const struct { const char* name; std::vector<int64_t> normalized; } cases[] = {
      {"bf16_weight", {96}}, {"f16_two_dims_default_eps", {4, 40}}, {"f32_weight_long_rows", {4097}},
      {"f64_default_eps", {33}}, {"bf16_head_dim_rows", {128}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string prefix = c.name;
    const Tensor& x = t.at(prefix + ".x");
    const auto w = t.count(prefix + ".w") ? std::optional<Tensor>(t.at(prefix + ".w")) : std::nullopt;
    const double eps = t.at(prefix + ".eps").to_vector<double>()[0];
    const Tensor y = rms_norm(x, c.normalized, w, eps < 0 ? std::nullopt : std::optional<double>(eps));
    // torch sums the squares in float, ember in double: a rounding step apart at most. In
    // f16/bf16, rounding once (not before the weight product, as Hugging Face's modules do)
    // keeps all but a few elements bit-identical.
    const Tensor& expected = t.at(prefix + ".y");
    EXPECT_TRUE(test::allclose(y, expected));
    if (x.dtype() != kFloat16 && x.dtype() != kBFloat16) continue;
    const auto a = y.to(kFloat64).to_vector<double>(), e = expected.to(kFloat64).to_vector<double>();
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != e[i];
    EXPECT_LE(differ, a.size() / 100) << differ << " of " << a.size() << " differ";
  }
}

TEST(RmsNorm, Float32MatchesFloat64Loop) {
  const int64_t rows = 6, n = 1000;
  const Tensor x = randn({rows, n}, kFloat32, Device::cpu(), 11) * 5;
  const Tensor w = randn({n}, kFloat32, Device::cpu(), 12);
  const auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
  const auto y = rms_norm(x.reshape({2, 3, n}), {n}, w, 1e-5).to_vector<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xv[r * n + i]) * xv[r * n + i];
    const double scale = 1 / std::sqrt(sum / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = xv[r * n + i] * scale * wv[i];
      ASSERT_NEAR(y[r * n + i], ref, 2e-6 * std::abs(ref) + 1e-7) << r << ", " << i;
    }
  }
}

TEST(RmsNorm, ZeroRowsAndStridedInput) {
  const Tensor zeros_in = zeros({2, 8}, kFloat32, Device::cpu());
  for (float v : rms_norm(zeros_in, {8}).to_vector<float>()) EXPECT_EQ(v, 0.0f);  // 0 * rsqrt(eps)
  const Tensor x = randn({8, 5}, kFloat32, Device::cpu(), 13);
  EXPECT_TRUE(test::allclose(rms_norm(x.t(), {8}), rms_norm(x.t().contiguous(), {8})));
  EXPECT_EQ(rms_norm(empty({0, 4}, kFloat32, Device::cpu()), {4}).sizes(), (std::vector<int64_t>{0, 4}));
}

TEST(RmsNorm, Errors) {
  const Tensor x = randn({3, 4}, kFloat32, Device::cpu(), 14);
  EXPECT_EQ(test::error_of([&] { rms_norm(x, {5}); }),
            "[rms_norm] normalized_shape: expected x's trailing sizes [4], got [5]");
  EXPECT_EQ(test::error_of([&] { rms_norm(x, {}); }),
            "[rms_norm] normalized_shape: expected 1 to 2 trailing dims of x, got 0 dims");
  EXPECT_EQ(test::error_of([&] { rms_norm(x, {4}, randn({4}, kFloat64, Device::cpu(), 15)); }),
            "[rms_norm] weight dtype: expected float32 (x's), got float64");
  EXPECT_EQ(test::error_of([&] { rms_norm(x, {4}, randn({2, 2}, kFloat32, Device::cpu(), 16)); }),
            "[rms_norm] weight shape: expected [4], got [2, 2]");
  EXPECT_EQ(test::error_of([&] { rms_norm(x.to(kInt32), {4}); }),
            "[rms_norm] dtype: expected float16, bfloat16, float32 or float64, got int32");
  EXPECT_EQ(test::error_of([&] { rms_norm(x, {4}, std::nullopt, -1.0); }),
            "[rms_norm] eps: expected >= 0, got -1");
}
