// apply_rotary_emb against transformers' formulation evaluated by torch in each dtype
// (scripts/fixtures/make_rotary_fixtures.py): bit for bit, since both round each product and
// the sum to the dtype; and its errors.
#include <gtest/gtest.h>

#include <ember/safetensors.h>

#include "compare.h"

using namespace ember;

TEST(RotaryEmb, EqualsTransformersBitForBit) {
  static const auto t = load_safetensors(test::fixture_path("rotary.safetensors"));
  for (const std::string name : {"bf16", "f16", "f32", "f64"}) {
    SCOPED_TRACE(name);
    const Tensor y = apply_rotary_emb(t.at(name + ".x"), t.at(name + ".cos"), t.at(name + ".sin"));
    const Tensor& expected = t.at(name + ".y");
    ASSERT_EQ(y.dtype(), expected.dtype());
    EXPECT_EQ(y.to(kFloat64).to_vector<double>(), expected.to(kFloat64).to_vector<double>());
  }
}

TEST(RotaryEmb, StridedInputAndErrors) {
  const Tensor x = randn({2, 6, 3, 8}, kFloat32, Device::cpu(), 1);
  const Tensor c = randn({6, 8}, kFloat32, Device::cpu(), 2), s = randn({6, 8}, kFloat32, Device::cpu(), 3);
  const Tensor viewed = x.transpose(1, 2);  // [2, 3, 6, 8], not contiguous
  EXPECT_TRUE(test::allclose(apply_rotary_emb(viewed, c, s), apply_rotary_emb(viewed.contiguous(), c, s), 0, 0));
  EXPECT_EQ(test::error_of([&] { apply_rotary_emb(randn({2, 6, 7}, kFloat32, Device::cpu(), 4), c.narrow(1, 0, 7), s.narrow(1, 0, 7)); }),
            "[apply_rotary_emb] head dim: expected an even size, got 7");
  EXPECT_EQ(test::error_of([&] { apply_rotary_emb(viewed, c.narrow(0, 0, 5), s); }),
            "[apply_rotary_emb] cos shape: expected [6, 8], got [5, 8]");
  EXPECT_EQ(test::error_of([&] { apply_rotary_emb(viewed, c, s.to(kFloat64)); }),
            "[apply_rotary_emb] sin dtype: expected float32 (x's), got float64");
  EXPECT_EQ(test::error_of([&] { apply_rotary_emb(randn({8}, kFloat32, Device::cpu(), 5), c, s); }),
            "[apply_rotary_emb] x: expected [..., L, D], got 1 dims");
}
