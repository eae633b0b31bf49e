// scaled_dot_product_attention on the CPU against PyTorch (scripts/fixtures/make_attention_fixtures.py):
// batch and head broadcasting, GQA, top-left causal, bool and float masks with partial broadcast,
// E != Ev, odd sizes, every dtype; strided (KV-cache) views; fully masked rows giving zeros; the
// validation messages.
#include <cmath>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include <ember/safetensors.h>

#include "compare.h"

using namespace ember;

namespace {

const SafetensorsFile& fixture_file() {
  static const SafetensorsFile f(test::fixture_path("attention.safetensors"));
  return f;
}
Tensor fx(const std::string& key) { return fixture_file().get(key); }

struct CaseArgs {
  bool causal = false, gqa = false;
  std::optional<double> scale;
};

// Metadata "causal=0 gqa=1 scale=default".
CaseArgs parse_args(const std::string& text) {
  CaseArgs a;
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "causal") a.causal = value == "1";
    else if (key == "gqa") a.gqa = value == "1";
    else if (key == "scale" && value != "default") a.scale = std::stod(value);
  }
  return a;
}

Tensor run_case(const std::string& name, const CaseArgs& a) {
  const std::optional<Tensor> mask = fixture_file().contains(name + ".mask") ? std::optional<Tensor>(fx(name + ".mask")) : std::nullopt;
  return scaled_dot_product_attention(fx(name + ".q"), fx(name + ".k"), fx(name + ".v"), mask, a.causal, a.scale, a.gqa);
}

std::string error_of(const std::function<void()>& f) { return test::error_of(f); }

}  // namespace

TEST(AttentionCpu, EveryFixtureCaseMatchesTorch) {
  const auto& cases = fixture_file().metadata();
  ASSERT_GE(cases.size(), 20u);
  for (const auto& [name, args] : cases) {
    SCOPED_TRACE(name);
    const Tensor out = run_case(name, parse_args(args));
    const Tensor expected = fx(name + ".out");
    ASSERT_EQ(out.sizes(), expected.sizes());
    ASSERT_EQ(out.dtype(), expected.dtype());
    if (fixture_file().contains(name + ".out64")) {
      // f16/bf16: one rounding away from the exact result; torch rounds the probabilities too.
      EXPECT_ALLCLOSE(out.to(kFloat32), fx(name + ".out64"), out.dtype() == kBFloat16 ? 8e-3 : 1e-3, 1e-3);
      EXPECT_ALLCLOSE(out.to(kFloat32), expected.to(kFloat32), 2e-2, 2e-2);
    } else {
      EXPECT_ALLCLOSE(out, expected);
    }
  }
}

TEST(AttentionCpu, SpecCasesHaveTorchShapes) {
  EXPECT_EQ(fx("spec_batch_broadcast.out").sizes(), (std::vector<int64_t>{2, 1, 1, 64}));
  EXPECT_EQ(run_case("spec_batch_broadcast", {}).sizes(), (std::vector<int64_t>{2, 1, 1, 64}));
  EXPECT_EQ(run_case("multi_batch", {}).sizes(), (std::vector<int64_t>{3, 2, 2, 4, 8}));
  EXPECT_EQ(run_case("rank2", {}).sizes(), (std::vector<int64_t>{5, 16}));
}

TEST(AttentionCpu, StridedViewsAndKvCacheNarrowingMatch) {
  // q as the transpose of a [B, L, H, E] projection, k and v the first S rows of a longer cache
  // (not contiguous: the batch and head strides span the longer length).
  const Tensor q = fx("gqa_f32.q"), k = fx("gqa_f32.k"), v = fx("gqa_f32.v");
  const int64_t S = k.size(2);
  const Tensor q_view = q.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(q_view.is_contiguous());
  auto cache_of = [&](const Tensor& x) {
    const Tensor cache = cat({x, randn({x.size(0), x.size(1), 9, x.size(3)}, x.dtype(), Device::cpu(), 3)}, 2);
    return cache.narrow(2, 0, S);
  };
  const Tensor k_cache = cache_of(k), v_cache = cache_of(v);
  ASSERT_FALSE(k_cache.is_contiguous());
  EXPECT_ALLCLOSE(scaled_dot_product_attention(q_view, k_cache, v_cache, {}, false, {}, true), fx("gqa_f32.out"));
  // A key stored transposed (unit stride along S) and a value with element stride 2.
  const Tensor k_t = k.transpose(2, 3).contiguous().transpose(2, 3);
  const Tensor v_s = stack({v, zeros_like(v)}, 4).reshape({v.size(0), v.size(1), S, 2 * v.size(3)}).slice(3, 0, 2 * v.size(3), 2);
  ASSERT_NE(v_s.stride(3), 1);
  EXPECT_ALLCLOSE(scaled_dot_product_attention(q, k_t, v_s, {}, false, {}, true), fx("gqa_f32.out"));
}

TEST(AttentionCpu, FullyMaskedRowsAreZeros) {
  for (DType d : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    SCOPED_TRACE(std::string(name(d)));
    const Tensor q = randn({2, 3, 5, 16}, d, Device::cpu(), 1), k = randn({2, 3, 7, 16}, d, Device::cpu(), 2);
    const Tensor v = randn({2, 3, 7, 16}, d, Device::cpu(), 3);
    // Row 2 of batch 1 attends nothing (bool); the others attend everything.
    std::vector<bool> allowed(2 * 5 * 7, true);
    for (int j = 0; j < 7; ++j) allowed[(5 + 2) * 7 + j] = false;
    const Tensor bool_mask = tensor<bool>(allowed, {2, 1, 5, 7});
    const Tensor plain = scaled_dot_product_attention(q, k, v);
    const Tensor masked = scaled_dot_product_attention(q, k, v, bool_mask);
    EXPECT_TENSOR_EQ(masked.select(0, 1).select(1, 2), zeros({3, 16}, d));
    EXPECT_TENSOR_EQ(masked.select(0, 0), plain.select(0, 0));
    EXPECT_TENSOR_EQ(masked.select(0, 1).narrow(1, 0, 2), plain.select(0, 1).narrow(1, 0, 2));
    // The same with an additive -inf mask of q's dtype and of float32.
    const Tensor ninf = where(bool_mask, zeros({1}, d), full({1}, -std::numeric_limits<double>::infinity(), d));
    EXPECT_TENSOR_EQ(scaled_dot_product_attention(q, k, v, ninf), masked);
    EXPECT_TENSOR_EQ(scaled_dot_product_attention(q, k, v, ninf.to(kFloat32)), masked);
  }
  // No keys at all: every row is fully masked.
  const Tensor q = randn({1, 2, 3, 8}, kFloat32, Device::cpu(), 4);
  EXPECT_TENSOR_EQ(scaled_dot_product_attention(q, zeros({1, 2, 0, 8}), zeros({1, 2, 0, 5})), zeros({1, 2, 3, 5}));
}

TEST(AttentionCpu, CausalIsTopLeftAndMatchesAnExplicitMask) {
  const Tensor q = randn({1, 2, 9, 8}, kFloat32, Device::cpu(), 5), k = randn({1, 2, 4, 8}, kFloat32, Device::cpu(), 6);
  const Tensor v = randn({1, 2, 4, 8}, kFloat32, Device::cpu(), 7);
  std::vector<bool> tril(9 * 4);
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 4; ++j) tril[static_cast<size_t>(i * 4 + j)] = j <= i;
  EXPECT_TENSOR_EQ(scaled_dot_product_attention(q, k, v, {}, true), scaled_dot_product_attention(q, k, v, tensor<bool>(tril, {9, 4})));
  // Query 0 attends key 0 only: its output is v[..., 0, :].
  EXPECT_ALLCLOSE(scaled_dot_product_attention(q, k, v, {}, true).narrow(2, 0, 1), v.narrow(2, 0, 1));
}

TEST(AttentionCpu, ErrorsNameTheProblem) {
  const Tensor q = randn({2, 4, 3, 8}, kFloat32, Device::cpu(), 8), k = randn({2, 2, 5, 8}, kFloat32, Device::cpu(), 9);
  const Tensor v = randn({2, 2, 5, 8}, kFloat32, Device::cpu(), 10);
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << message;
  };
  const std::string op = "[scaled_dot_product_attention] ";
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(randn({8}, kFloat32, Device::cpu(), 1), k, v); }),
                  op + "rank: expected query, key and value with at least 2 dims, got 1, 4 and 4"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, randn({2, 2, 5, 7}, kFloat32, Device::cpu(), 1), v, {}, false, {}, true); }),
                  op + "key head dim: expected 8 (query's last dim), got 7"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, v); }),
                  op + "heads: expected query, key and value head counts equal or 1"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(randn({2, 6, 3, 8}, kFloat32, Device::cpu(), 1), randn({2, 4, 5, 8}, kFloat32, Device::cpu(), 2), randn({2, 4, 5, 8}, kFloat32, Device::cpu(), 3), {}, false, {}, true); }),
                  op + "heads (enable_gqa): expected key and value head counts dividing the query's 6, got 4 and 4"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, v, ones({3, 3, 5}, kBool), false, {}, true); }),
                  op + "attn_mask shape: expected a shape broadcastable to [2, 4, 3, 5], got [3, 3, 5]"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, v, ones({2, 2, 4, 3, 5}, kBool), false, {}, true); }),
                  op + "attn_mask shape: expected a shape broadcastable to [2, 4, 3, 5], got [2, 2, 4, 3, 5]"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k.to(kBFloat16), v, {}, false, {}, true); }),
                  op + "dtype: expected key and value of query's dtype float32, got bfloat16 and float32"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q.to(kInt32), k.to(kInt32), v.to(kInt32)); }),
                  op + "query dtype: expected float16, bfloat16, float32 or float64, got int32"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, v, ones({3, 5}, kFloat64), false, {}, true); }),
                  op + "attn_mask dtype: expected bool, float32 or float32 (query's), got float64"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, v, ones({3, 5}, kBool), true, {}, true); }),
                  op + "attn_mask: expected no attn_mask when is_causal is set, got a mask of shape [3, 5]"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(q, k, randn({2, 2, 6, 8}, kFloat32, Device::cpu(), 1), {}, false, {}, true); }),
                  op + "value sequence length: expected 5 (key's dim -2), got 6"));
  EXPECT_TRUE(has(error_of([&] { scaled_dot_product_attention(randn({3, 4, 3, 8}, kFloat32, Device::cpu(), 1), k, v, {}, false, {}, true); }),
                  op + "batch dims: expected query, key and value batch shapes that broadcast, got [3], [2] and [2]"));
}
