// sort, argsort and topk against PyTorch fixtures (NaN as the largest value, stable ties).
#include <gtest/gtest.h>

#include "cpu/reduce_fixtures.h"

using namespace ember;

TEST(Sort, MatchesTorchFixtures) {
  const auto cases = test::load_fixture_cases("reduce_sorting.json");
  ASSERT_GT(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(c.describe(i));
    const std::string op = c.json.at("op");
    const auto& a = c.args();
    const Tensor x = c.viewed_input();
    std::vector<Tensor> out;
    if (op == "sort") {
      auto [v, idx] = sort(x, a.at("dim"), a.at("descending"), a.at("stable"));
      out = {v, idx};
    } else if (op == "argsort") {
      out = {argsort(x, a.at("dim"), a.at("descending"), a.at("stable"))};
    } else {
      auto [v, idx] = topk(x, a.at("k"), a.at("dim"), a.at("largest"), true);
      out = {v, idx};
    }
    const size_t n = c.json.value("values_only", false) ? 1 : out.size();
    for (size_t k = 0; k < n; ++k) EXPECT_TRUE(test::matches_torch(out[k], c.outputs[k])) << "output " << k;
  }
}

TEST(Sort, OddSizesAgreeWithGather) {
  // 4097 values with many ties: values are ordered, indices point at them, ties keep index order.
  std::vector<int32_t> v(4097);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 7919) % 13);
  const Tensor x = tensor<int32_t>(v);
  auto [values, indices] = sort(x, 0, true);
  const auto sv = values.to_vector<int32_t>();
  const auto si = indices.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(sv[i], v[static_cast<size_t>(si[i])]);
    if (i > 0) {
      ASSERT_GE(sv[i - 1], sv[i]);
      if (sv[i - 1] == sv[i]) ASSERT_LT(si[i - 1], si[i]);
    }
  }
  auto [tv, ti] = topk(x, 5, 0, false);
  EXPECT_EQ(tv.to_vector<int32_t>(), std::vector<int32_t>(5, 0));
  EXPECT_EQ(ti.to_vector<int64_t>(), (std::vector<int64_t>{0, 13, 26, 39, 52}));
}

TEST(Sort, ErrorsLikeTorch) {
  EXPECT_THROW(topk(zeros({3}), 4), Error);
  EXPECT_THROW(topk(zeros({3}), -1), Error);
  EXPECT_THROW(topk(zeros({3}, kBool), 1), Error);
  EXPECT_THROW(sort(zeros({3}, kComplex64)), Error);
  EXPECT_THROW(sort(zeros({3}), 1), Error);
  auto [v, i] = topk(scalar_tensor(3.0, kFloat32), 1);
  EXPECT_EQ(v.dim(), 0);
  EXPECT_EQ(i.item<int64_t>(), 0);
  try {
    topk(zeros({2, 3}), 4, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[topk] k (selected index): expected one in [0, 3], got 4");
  }
}
