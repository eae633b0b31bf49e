// Matrix products against torch (tests/fixtures/matmul.json, made by
// scripts/fixtures/make_matmul_fixtures.py) and against float64 loops.
#include <random>

#include <gtest/gtest.h>

#include "backend.h"
#include "cpu/json_fixture.h"

using namespace ember;
using json = nlohmann::json;

namespace {

Tensor apply_view(const Tensor& x, const std::string& how) {
  if (how == "T") return x.transpose(-2, -1);
  if (how == "step2") return x.slice(-1, 0, x.size(-1), 2);
  return x;
}

const json& fixtures() {
  static const json cases = test::load_json_cases("matmul.json");
  return cases;
}

/// Random values from a fixed seed (integers for integer dtypes), independent of ember's generators.
Tensor random_tensor(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, double bound = 1) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-bound, bound);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = is_integral(dtype) ? std::round(dist(gen)) : dist(gen);
  return tensor<double>(std::move(v), shape).to(dtype);
}

/// a3 @ b3 by float64 loops (complex128), for [B,M,K] @ [B,K,N] of any strides.
Tensor reference_bmm(const Tensor& a3, const Tensor& b3) {
  const auto a = a3.to(kComplex128).contiguous().to_vector<std::complex<double>>();
  const auto b = b3.to(kComplex128).contiguous().to_vector<std::complex<double>>();
  const int64_t B = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  std::vector<std::complex<double>> out(static_cast<size_t>(B * M * N));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) {
        std::complex<double> acc = 0;
        for (int64_t p = 0; p < K; ++p) acc += a[(i * M + r) * K + p] * b[(i * K + p) * N + c];
        out[(i * M + r) * N + c] = acc;
      }
  return tensor<std::complex<double>>(std::move(out), {B, M, N});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Matmul, MatchesTorchFixtures) {
  ASSERT_GT(fixtures().size(), 50u);
  for (const json& c : fixtures()) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const Tensor a = apply_view(test::decode_json_tensor(c.at("a")), c.at("a_view").get<std::string>());
    const Tensor b = apply_view(test::decode_json_tensor(c.at("b")), c.at("b_view").get<std::string>());
    const Tensor expected = test::decode_json_tensor(c.at("out"));
    const std::string op = c.at("op").get<std::string>();
    Tensor actual;
    if (op == "matmul") actual = matmul(a, b);
    else if (op == "mm") actual = mm(a, b);
    else if (op == "bmm") actual = bmm(a, b);
    else if (c.contains("bias")) actual = linear(a, b, test::decode_json_tensor(c.at("bias")));
    else actual = linear(a, b);
    ASSERT_EQ(actual.sizes(), expected.sizes());
    ASSERT_EQ(actual.dtype(), expected.dtype());
    const DType d = expected.dtype();
    if (is_integral(d) || is_fp8(d)) {
      // Integers are exact; fp8 products of a few terms are exact in float32 before the one rounding.
      EXPECT_TENSOR_EQ(actual, expected);
    } else if (d == kFloat32 || d == kComplex64) {
      EXPECT_ALLCLOSE(actual, expected, 1e-5, 1e-5);  // atol for sums that cancel
    } else {
      EXPECT_ALLCLOSE(actual, expected);
    }
  }
}

TEST(Matmul, BackendWritesAnyOutputLayout) {
  // cpu::bmm with column-major, strided and broadcast operands against float64 loops.
  for (DType d : {kFloat32, kFloat64, kComplex64, kBFloat16, kInt32}) {
    SCOPED_TRACE(std::string(name(d)));
    const Tensor a = random_tensor({3, 7, 5}, d, 1, 4);
    const Tensor b_one = random_tensor({1, 5, 6}, d, 2, 4);
    const Tensor b = b_one.expand({3, 5, 6});  // stride-0 batch
    const Tensor expected = reference_bmm(a, b).to(d);
    const Tensor col_major = empty({3, 6, 7}, d).transpose(1, 2);
    cpu::bmm(a, b, col_major);
    const Tensor strided = empty({3, 7, 12}, d).slice(2, 0, 12, 2);
    cpu::bmm(a, b, strided);
    const Tensor a_strided = random_tensor({3, 7, 10}, d, 3, 4).slice(2, 0, 10, 2);
    const Tensor expected_strided = reference_bmm(a_strided, b).to(d);
    const Tensor from_strided = empty({3, 7, 6}, d);
    cpu::bmm(a_strided, b, from_strided);
    const Tensor bias = random_tensor({6}, d, 4, 4).expand({3, 7, 6});
    const Tensor with_bias = empty({3, 6, 7}, d).transpose(1, 2);
    cpu::baddbmm(bias, a, b, with_bias);
    const auto ref = reference_bmm(a, b).to_vector<std::complex<double>>();
    const auto bias_values = bias.to(kComplex128).contiguous().to_vector<std::complex<double>>();
    std::vector<std::complex<double>> sum(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) sum[i] = ref[i] + bias_values[i];
    const Tensor expected_with_bias = tensor<std::complex<double>>(sum, {3, 7, 6}).to(d);
    if (is_integral(d)) {
      EXPECT_TENSOR_EQ(col_major, expected);
      EXPECT_TENSOR_EQ(strided, expected);
      EXPECT_TENSOR_EQ(from_strided, expected_strided);
      EXPECT_TENSOR_EQ(with_bias, expected_with_bias);
    } else {
      const double tol = d == kBFloat16 ? 1e-2 : 1e-5;
      EXPECT_ALLCLOSE(col_major, expected, tol, tol);
      EXPECT_ALLCLOSE(strided, expected, tol, tol);
      EXPECT_ALLCLOSE(from_strided, expected_strided, tol, tol);
      EXPECT_ALLCLOSE(with_bias, expected_with_bias, tol, tol);
    }
  }
}

TEST(Matmul, ManySmallAndOneLargeProduct) {
  // Small matrices go through the OpenMP batch loop, the large one through threaded BLAS.
  const Tensor a = random_tensor({64, 9, 11}, kFloat64, 5), b = random_tensor({64, 11, 10}, kFloat64, 6);
  EXPECT_ALLCLOSE(bmm(a, b), reference_bmm(a, b).to(kFloat64));
  const Tensor x = random_tensor({2, 130, 120}, kFloat32, 7), y = random_tensor({2, 120, 140}, kFloat32, 8);
  EXPECT_ALLCLOSE(matmul(x, y), reference_bmm(x, y).to(kFloat32), 1e-5, 1e-5);
  const Tensor i = random_tensor({3, 70, 90}, kInt64, 9, 1e6), j = random_tensor({90, 80}, kInt64, 10, 1e6);
  EXPECT_TENSOR_EQ(matmul(i, j), reference_bmm(i, j.unsqueeze(0).expand({3, 90, 80})).to(kInt64));
}

TEST(Matmul, IntegerProductsWrapLikeTorch) {
  // int8: 300 * 100 * 100 = 3,000,000 = 0x2DC6C0 -> low byte 0xC0 = -64 (torch gives -64 too).
  const Tensor x = full({2, 300}, 100, kInt8);
  EXPECT_TENSOR_EQ(mm(x, x.t()), full({2, 2}, -64, kInt8));
  const Tensor u = full({1, 3}, 200, kUInt8);  // 3 * 40000 = 120000 mod 256 = 192
  EXPECT_TENSOR_EQ(matmul(u, u.t()), full({1, 1}, 192, kUInt8));
}

TEST(Matmul, EmptyProducts) {
  EXPECT_TENSOR_EQ(matmul(empty({3, 0}), empty({0, 4})), zeros({3, 4}));
  EXPECT_TENSOR_EQ(mm(empty({0, 5}), empty({5, 4})), empty({0, 4}));
  EXPECT_TENSOR_EQ(bmm(empty({2, 3, 0}, kInt32), empty({2, 0, 2}, kInt32)), zeros({2, 3, 2}, kInt32));
  const Tensor bias = tensor<float>({1, 2, 3});
  EXPECT_TENSOR_EQ(linear(empty({2, 0}), empty({3, 0}), bias), bias.unsqueeze(0).expand({2, 3}).contiguous());
  EXPECT_EQ(matmul(empty({0}), empty({0})).dim(), 0);
  EXPECT_EQ(matmul(empty({0}), empty({0})).item<float>(), 0.0f);
}

TEST(Matmul, ValidationErrorsLikeTorch) {
  EXPECT_EQ(error_of([] { mm(zeros({2, 3}), zeros({4, 5})); }),
            "[mm] mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5): expected mat1.size(1) == mat2.size(0), got 3 != 4");
  EXPECT_EQ(error_of([] { matmul(zeros({3}), zeros({4, 5})); }),
            "[matmul] mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5): expected mat1.size(-1) == mat2.size(-2), got 3 != 4");
  EXPECT_EQ(error_of([] { matmul(zeros({2, 3}), zeros({3, 4}, kFloat64)); }),
            "[matmul] operand dtypes: expected m1 and m2 to have the same dtype, got float32 != float64");
  EXPECT_EQ(error_of([] { matmul(zeros({2, 3}), zeros({})); }),
            "[matmul] both arguments to matmul need to be at least 1D: expected dims >= 1, got 2D and 0D");
  EXPECT_EQ(error_of([] { bmm(zeros({2, 2, 3}), zeros({3, 3, 4})); }),
            "[bmm] size of the first two dimensions of batch2: expected [2, 3], got [3, 3]");
  EXPECT_EQ(error_of([] { mm(zeros({3}), zeros({3, 2})); }), "[mm] mat1: expected a matrix, got a 1-D tensor");
  EXPECT_NE(error_of([] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); }).find("batch dims"), std::string::npos);
  EXPECT_EQ(error_of([] { linear(zeros({2, 3}), zeros({4, 5})); }),
            "[linear] mat1 and mat2 shapes cannot be multiplied (2x3 and 5x4): expected input.size(-1) == weight.size(-1), got 3 != 5");
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, kFloat64)), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({1, 4, 3})), Error);
  // dtypes torch's CPU kernels refuse: bool and uint16/32/64 everywhere, fp8 outside mm/addmm.
  for (DType d : {kBool, kUInt16, kUInt32, kUInt64}) EXPECT_THROW(matmul(zeros({2, 2}, d), zeros({2, 2}, d)), Error);
  EXPECT_EQ(error_of([] { bmm(zeros({1, 2, 2}, kFloat8_e4m3fn), zeros({1, 2, 2}, kFloat8_e4m3fn)); }),
            "[bmm] dtype: expected one torch implements for \"bmm\" on the CPU, got float8_e4m3fn");
  EXPECT_THROW(matmul(zeros({2}, kFloat8_e5m2), zeros({2}, kFloat8_e5m2)), Error);
  EXPECT_THROW(matmul(zeros({2, 2}, kFloat8_e5m2), zeros({2}, kFloat8_e5m2)), Error);
  EXPECT_NO_THROW(matmul(zeros({3, 2, 2}, kFloat8_e5m2), zeros({2, 2}, kFloat8_e5m2)));
}

TEST(Matmul, OperandsOnDifferentDevicesAreRefused) {
  if (!cuda::is_available()) GTEST_SKIP() << "needs a GPU: " << cuda::availability().reason;
  EXPECT_THROW(matmul(zeros({2, 2}), zeros({2, 2}, kFloat32, Device::cuda())), Error);
  EXPECT_THROW(linear(zeros({2, 2}), zeros({2, 2}), zeros({2}, kFloat32, Device::cuda())), Error);
}
