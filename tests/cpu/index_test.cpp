// index_select, gather, index_add, take, cat and stack against PyTorch fixtures, and the
// errors torch raises (out-of-range indices name the index and the size).
#include <gtest/gtest.h>

#include "cpu/reduce_fixtures.h"

using namespace ember;
using ember::test::error_of;

namespace {

Scalar alpha_of(const nlohmann::json& a) {
  if (a.is_boolean()) return Scalar(a.get<bool>());
  if (a.is_number_integer()) return Scalar(a.get<int64_t>());
  return Scalar(a.get<double>());
}

}  // namespace

TEST(Index, MatchesTorchFixtures) {
  const auto cases = test::load_fixture_cases("reduce_indexing.json");
  ASSERT_GT(cases.size(), 80u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(c.describe(i));
    const std::string op = c.json.at("op");
    const auto& a = c.args();
    Tensor out;
    if (op == "index_select") out = index_select(c.viewed_input(), a.at("dim"), c.inputs[1]);
    else if (op == "gather") out = gather(c.viewed_input(), a.at("dim"), c.inputs[1]);
    else if (op == "index_add") out = index_add(c.viewed_input(), a.at("dim"), c.inputs[1], c.inputs[2], alpha_of(a.at("alpha")));
    else if (op == "take") out = take(c.viewed_input(), c.inputs[1]);
    else {
      std::vector<Tensor> ts = c.inputs;
      ts[0] = c.viewed_input();
      out = op == "cat" ? cat(ts, a.at("dim")) : stack(ts, a.at("dim"));
    }
    EXPECT_TRUE(test::matches_torch(out, c.outputs[0]));
  }
}

TEST(Index, OutOfRangeIndicesNameIndexAndSize) {
  const Tensor x = zeros({3, 2});
  EXPECT_EQ(error_of([&] { index_select(x, 0, tensor<int64_t>({0, 3})); }),
            "[index_select] index 3 for dim 0 of size 3: expected one in [0, 3), got 3");
  EXPECT_EQ(error_of([&] { index_select(x, 0, tensor<int32_t>({-1})); }),
            "[index_select] index -1 for dim 0 of size 3: expected one in [0, 3), got -1");
  EXPECT_EQ(error_of([&] { gather(x, 1, tensor<int64_t>({0, 2}, {1, 2})); }),
            "[gather] index 2 for dim 1 of size 2: expected one in [0, 2), got 2");
  EXPECT_EQ(error_of([&] { index_add(x, 0, tensor<int64_t>({3}), zeros({1, 2})); }),
            "[index_add] index 3 for dim 0 of size 3: expected one in [0, 3), got 3");
  EXPECT_EQ(error_of([&] { take(x, tensor<int64_t>({-7})); }), "[take] index -7 into 6 elements: expected one in [-6, 6), got -7");
  EXPECT_EQ(error_of([&] { take(x, tensor<int64_t>({6})); }), "[take] index 6 into 6 elements: expected one in [-6, 6), got 6");
}

TEST(Index, ArgumentErrorsLikeTorch) {
  const Tensor x = zeros({3, 2});
  EXPECT_NE(error_of([&] { index_select(x, 0, tensor<int64_t>({1}, {1, 1})); }), "no error");
  EXPECT_NE(error_of([&] { index_select(x, 0, tensor<float>({1})); }), "no error");
  EXPECT_NE(error_of([&] { index_select(x, 0, tensor<int16_t>({1})); }), "no error");
  EXPECT_NE(error_of([&] { gather(x, 0, tensor<int64_t>({1})); }), "no error");
  EXPECT_NE(error_of([&] { gather(x, 0, zeros({2, 3}, kInt64)); }), "no error");
  EXPECT_EQ(gather(x, 0, zeros({5, 2}, kInt64)).sizes(), (std::vector<int64_t>{5, 2}));
  EXPECT_NE(error_of([&] { take(x, tensor<int32_t>({1})); }), "no error");
  EXPECT_NE(error_of([&] { take(zeros({0}), tensor<int64_t>({0})); }), "no error");
  EXPECT_NE(error_of([&] { index_add(x, 0, tensor<int64_t>({1}), zeros({1, 2}, kFloat64)); }), "no error");
  EXPECT_NE(error_of([&] { index_add(x, 0, tensor<int64_t>({1}), zeros({1, 3})); }), "no error");
  EXPECT_NE(error_of([&] { index_add(x, 0, tensor<int64_t>({1}), zeros({2, 2})); }), "no error");
}

TEST(Join, ErrorsLikeTorch) {
  EXPECT_EQ(error_of([] { cat({}); }), "[cat] tensors: expected a non-empty list, got an empty one");
  EXPECT_NE(error_of([] { cat({zeros({2, 3}), zeros({3})}); }), "no error");
  EXPECT_EQ(error_of([] { cat({zeros({2, 3}), zeros({2, 4})}); }),
            "[cat] size of tensor 1 at dim 1 (all dims but 0 must match): expected 3, got 4");
  EXPECT_NE(error_of([] { cat({zeros({2, 3})}, 2); }), "no error");
  EXPECT_NE(error_of([] { cat({scalar_tensor(1, kFloat32)}); }), "no error");
  EXPECT_NE(error_of([] { cat({zeros({1}, kFloat8_e4m3fn), zeros({1}, kFloat16)}); }), "no error");
  EXPECT_NE(error_of([] { stack({zeros({2, 3}), zeros({2, 4})}); }), "no error");
  EXPECT_NE(error_of([] { stack({}); }), "no error");
  EXPECT_NE(error_of([] { stack({zeros({2, 3})}, 3); }), "no error");
}
