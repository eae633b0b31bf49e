// Reductions, argmax/argmin, cumsum and histc against PyTorch fixtures, float64 references
// for long sums, and torch's error cases.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/reduce_fixtures.h"

using namespace ember;
using ember::test::error_of;

namespace {

std::vector<Tensor> run_reduction_case(const test::FixtureCase& c) {
  const std::string op = c.json.at("op");
  const auto& a = c.args();
  const Tensor x = c.viewed_input();
  if (op == "argmax" || op == "argmin") {
    const int64_t dim = a.at("dim");
    const bool keep = a.at("keepdim");
    return {op == "argmax" ? argmax(x, dim, keep) : argmin(x, dim, keep)};
  }
  if (op == "cumsum") {
    std::optional<DType> dt;
    if (a.contains("dtype")) dt = dtype_from_name(a.at("dtype").get<std::string>());
    return {cumsum(x, a.at("dim"), dt)};
  }
  if (op == "histc") return {histc(x, a.at("bins"), a.at("min"), a.at("max"))};
  const auto dims = a.at("dims").get<std::vector<int64_t>>();
  const bool keep = a.at("keepdim");
  if (op == "sum") {
    std::optional<DType> dt;
    if (a.contains("dtype")) dt = dtype_from_name(a.at("dtype").get<std::string>());
    return {sum(x, dims, keep, dt)};
  }
  if (op == "mean") return {mean(x, dims, keep)};
  if (op == "prod") return {prod(x, dims, keep)};
  if (op == "amax") return {amax(x, dims, keep)};
  if (op == "amin") return {amin(x, dims, keep)};
  if (op == "any") return {any(x, dims, keep)};
  if (op == "all") return {all(x, dims, keep)};
  ADD_FAILURE() << "unknown op " << op;
  return {};
}

}  // namespace

TEST(Reduce, MatchesTorchFixtures) {
  const auto cases = test::load_fixture_cases("reduce_reductions.json");
  ASSERT_GT(cases.size(), 200u);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].describe(i));
    const auto out = run_reduction_case(cases[i]);
    ASSERT_EQ(out.size(), cases[i].outputs.size());
    for (size_t k = 0; k < out.size(); ++k) EXPECT_TRUE(test::matches_torch(out[k], cases[i].outputs[k]));
  }
}

// Long float sums against float64 loops: one output (the chunked parallel path), a column sum
// (the contiguous dim kept) and a row sum over a transposed view.
TEST(Reduce, LongSumsMatchFloat64) {
  const int64_t n = (1 << 20) + 7;
  std::vector<float> v(static_cast<size_t>(n));
  double ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) + 0.25);
    ref += v[i];
  }
  const Tensor x = tensor<float>(v);
  EXPECT_NEAR(sum(x).item<double>(), ref, 1e-6 * std::abs(ref));
  EXPECT_NEAR(mean(x).item<double>(), ref / static_cast<double>(n), 1e-6 * std::abs(ref) / static_cast<double>(n));
  const Tensor h = x.slice(0, 0, 4097).to(kFloat16);  // f16 inputs accumulate in a wide type
  const double href = sum(h.to(kFloat64)).item<double>();
  EXPECT_NEAR(sum(h).to(kFloat64).item<double>(), href, 1e-3 * std::abs(href));

  const int64_t rows = 3, cols = 4097;
  const Tensor m = tensor<float>(std::vector<float>(v.begin(), v.begin() + rows * cols), {rows, cols});
  const Tensor col = sum(m, {0}), row = sum(m.t(), {0});
  const auto cv = col.to_vector<float>(), rv = row.to_vector<float>();
  for (int64_t j = 0; j < cols; ++j) {
    double r = 0;
    for (int64_t i = 0; i < rows; ++i) r += v[i * cols + j];
    ASSERT_NEAR(cv[j], r, 1e-6) << "column " << j;
  }
  for (int64_t i = 0; i < rows; ++i) {
    double r = 0;
    for (int64_t j = 0; j < cols; ++j) r += v[i * cols + j];
    EXPECT_NEAR(rv[i], r, 1e-6 * std::abs(r) + 1e-5) << "row " << i;
  }
}

TEST(Reduce, IntegerSumsAreExact) {
  // int64 sums past 2^53, where a float accumulator would round.
  const int64_t big = (int64_t{1} << 60) + 1;
  const Tensor x = tensor<int64_t>({big, 3, -1, big}, {2, 2});
  EXPECT_EQ(sum(x).item<int64_t>(), 2 * big + 2);
  EXPECT_EQ(sum(x, {0}).to_vector<int64_t>(), (std::vector<int64_t>{big - 1, big + 3}));
  EXPECT_EQ(sum(tensor<bool>({true, true, false})).dtype(), kInt64);
  EXPECT_EQ(prod(tensor<int32_t>({-3, 4, 5})).item<int64_t>(), -60);
}

TEST(Reduce, ErrorsLikeTorch) {
  const Tensor x = zeros({2, 3});
  EXPECT_EQ(error_of([&] { sum(x, {0, -2}); }), "[sum] dims: expected each dim at most once, got dim 0 more than once");
  EXPECT_EQ(error_of([&] { sum(x, {2}); }), "[sum] dimension out of range: expected one in [-2, 1], got 2");
  EXPECT_EQ(error_of([&] { mean(zeros({3}, kInt64)); }), "[mean] dtype: expected a floating point or complex type, got int64");
  EXPECT_EQ(error_of([&] { amax(zeros({0, 3}), {0}); }), "[amax] size of reduction dim 0: expected a non-zero size, got 0");
  EXPECT_NE(error_of([&] { amin(zeros({0, 3})); }), "no error");
  EXPECT_EQ(amax(zeros({0, 3}), {1}).sizes(), (std::vector<int64_t>{0}));
  EXPECT_NE(error_of([&] { amax(zeros({3}, kComplex64)); }), "no error");
  EXPECT_NE(error_of([&] { amax(zeros({3}, kUInt16)); }), "no error");
  EXPECT_NE(error_of([&] { sum(zeros({3}, kFloat8_e4m3fn)); }), "no error");
  EXPECT_NE(error_of([&] { argmax(zeros({3}, kBool), 0); }), "no error");
  EXPECT_NE(error_of([&] { argmax(zeros({3}, kComplex64), 0); }), "no error");
  EXPECT_EQ(error_of([&] { argmin(zeros({2, 0}), 1); }), "[argmin] size of reduction dim 1: expected a non-zero size, got 0");
  EXPECT_NE(error_of([&] { cumsum(x, 2); }), "no error");
  EXPECT_EQ(error_of([&] { histc(zeros({3}), 0); }), "[histc] bins: expected > 0, got 0");
  EXPECT_EQ(error_of([&] { histc(zeros({3}), 3, 2, 1); }), "[histc] range: expected max >= min, got min 2 and max 1");
  EXPECT_NE(error_of([&] { histc(zeros({3}), 3, 0, INFINITY); }), "no error");
  EXPECT_NE(error_of([&] { histc(tensor<float>({1, NAN})); }), "no error");
  EXPECT_NE(error_of([&] { histc(zeros({3}, kInt32)); }), "no error");
}

TEST(Reduce, ScalarAndEmptyInputs) {
  const Tensor s = scalar_tensor(2.5, kFloat32);
  EXPECT_EQ(sum(s, {-1}).dim(), 0);
  EXPECT_EQ(argmax(s, 0).item<int64_t>(), 0);
  EXPECT_EQ(cumsum(scalar_tensor(3, kInt32), 0).dtype(), kInt64);
  EXPECT_EQ(sum(zeros({0, 4}), {0}).to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_TRUE(std::isnan(mean(zeros({0, 2}), {0}).to_vector<float>()[1]));
  EXPECT_EQ(histc(zeros({0}), 3).to_vector<float>(), std::vector<float>(3, 0.0f));
}
