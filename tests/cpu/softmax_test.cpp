// softmax / log_softmax against PyTorch fixtures and a float64 reference on a vocab-sized row.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reduce_fixtures.h"

using namespace ember;

TEST(Softmax, MatchesTorchFixtures) {
  const auto cases = test::load_fixture_cases("reduce_softmax.json");
  ASSERT_GT(cases.size(), 20u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(c.describe(i));
    const int64_t dim = c.args().at("dim");
    const Tensor x = c.viewed_input();
    const Tensor out = c.json.at("op") == "softmax" ? softmax(x, dim) : log_softmax(x, dim);
    EXPECT_TRUE(test::matches_torch(out, c.outputs[0]));
  }
}

TEST(Softmax, VocabRowMatchesFloat64) {
  const int64_t n = 128256;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(8 * std::sin(0.001 * static_cast<double>(i * i % 100003)));
  v[0] = -INFINITY;
  double max = -INFINITY, sum = 0;
  for (float f : v) max = std::max(max, static_cast<double>(f));
  for (float f : v) sum += std::exp(f - max);
  const Tensor x = tensor<float>(v, {1, n});
  const auto p = softmax(x, -1).to_vector<float>();
  const auto lp = log_softmax(x, -1).to_vector<float>();
  for (int64_t i = 0; i < n; i += 97) {
    const double ref = std::exp(v[i] - max) / sum;
    ASSERT_NEAR(p[i], ref, 1e-5 * ref + 1e-12) << i;
    if (i > 0) ASSERT_NEAR(lp[i], v[i] - max - std::log(sum), 1e-5) << i;
  }
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_TRUE(std::isinf(lp[0]));
}

TEST(Softmax, ErrorsLikeTorch) {
  EXPECT_THROW(softmax(zeros({3}, kInt64), 0), Error);
  EXPECT_THROW(log_softmax(zeros({3}, kComplex64), 0), Error);
  EXPECT_THROW(softmax(zeros({3}, kFloat8_e4m3fn), 0), Error);
  EXPECT_THROW(softmax(zeros({3}), 1), Error);
  EXPECT_EQ(softmax(zeros({0, 3}), 0).sizes(), (std::vector<int64_t>{0, 3}));
}
