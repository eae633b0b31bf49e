// Philox streams (src/core/philox.h) and the CPU random backend: published known answers,
// golden values from an independent pure-Python Philox (scripts/fixtures/make_random.py),
// determinism and statistics on 1M samples.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "compare.h"
#include "core/philox.h"

using namespace ember;
using nlohmann::json;

namespace {

json load_fixture() {
  std::ifstream f(test::fixture_path("random.json"));
  EXPECT_TRUE(f.good()) << "missing tests/fixtures/random.json";
  return json::parse(f);
}

std::vector<double> as_doubles(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

struct Moments { double mean, var; };
Moments moments(const std::vector<double>& v) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  const double mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  return {mean, s2 / static_cast<double>(v.size() - 1)};
}

}  // namespace

// Random123's kat_vectors for Philox-4x32-10.
TEST(Random, PhiloxKnownAnswers) {
  auto check = [](uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                  std::array<uint32_t, 4> expected) {
    const philox::Words w = philox::philox4x32_10(c0, c1, c2, c3, k0, k1);
    EXPECT_EQ((std::array<uint32_t, 4>{w.w[0], w.w[1], w.w[2], w.w[3]}), expected);
  };
  check(0, 0, 0, 0, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  check(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  check(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST(Random, GroupWordsMatchIndependentPython) {
  const json fx = load_fixture();
  ASSERT_GE(fx["words"].size(), 15u);
  for (const json& c : fx["words"]) {
    const philox::Words w = philox::group_words(c["seed"].get<uint64_t>(), c["group"].get<uint64_t>());
    for (int k = 0; k < 4; ++k) EXPECT_EQ(w.w[k], c["words"][k].get<uint32_t>()) << c.dump();
  }
}

TEST(Random, StreamsMatchIndependentPython) {
  const json fx = load_fixture();
  const uint64_t seed = fx["seed"].get<uint64_t>();
  auto expect_exact = [&](const char* key, DType dtype) {
    const auto expected = fx[key].get<std::vector<double>>();
    const auto n = static_cast<int64_t>(expected.size());
    EXPECT_EQ(as_doubles(rand({n}, dtype, Device::cpu(), seed)), expected) << key;
  };
  expect_exact("uniform_f32", kFloat32);
  expect_exact("uniform_f64", kFloat64);
  expect_exact("uniform_f16", kFloat16);
  expect_exact("uniform_bf16", kBFloat16);
  expect_exact("uniform_e4m3fn", kFloat8_e4m3fn);
  expect_exact("uniform_e5m2", kFloat8_e5m2);

  // Normals go through libm's log/cos/sin: allow the last bit or two.
  const auto nf = fx["normal_f32"].get<std::vector<double>>();
  const auto got_nf = randn({static_cast<int64_t>(nf.size())}, kFloat32, Device::cpu(), seed).to_vector<float>();
  ASSERT_EQ(got_nf.size(), nf.size());
  for (size_t i = 0; i < nf.size(); ++i) EXPECT_NEAR(got_nf[i], nf[i], 2e-7 * std::abs(nf[i]) + 1e-12) << i;
  const auto nd = fx["normal_f64"].get<std::vector<double>>();
  const auto got_nd = randn({static_cast<int64_t>(nd.size())}, kFloat64, Device::cpu(), seed).to_vector<double>();
  for (size_t i = 0; i < nd.size(); ++i) EXPECT_NEAR(got_nd[i], nd[i], 1e-14 * std::abs(nd[i]) + 1e-300) << i;

  // complex64: real and imaginary parts are consecutive elements of the float32 stream.
  const auto uf = fx["uniform_f32"].get<std::vector<double>>();
  const auto c = rand({3}, kComplex64, Device::cpu(), seed).to_vector<std::complex<float>>();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].real(), uf[2 * i]);
    EXPECT_EQ(c[i].imag(), uf[2 * i + 1]);
  }
  const auto ud = fx["uniform_f64"].get<std::vector<double>>();
  const auto z = rand({4}, kComplex128, Device::cpu(), seed).to_vector<std::complex<double>>();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(z[i], std::complex<double>(ud[2 * i], ud[2 * i + 1]));

  for (const char* key : {"randint_small", "randint_full"}) {
    const json& r = fx[key];
    const auto expected = r["values"].get<std::vector<int64_t>>();
    const Tensor t = randint(r["low"].get<int64_t>(), r["high"].get<int64_t>(), {static_cast<int64_t>(expected.size())},
                             kInt64, Device::cpu(), seed);
    EXPECT_EQ(t.to_vector<int64_t>(), expected) << key;
  }
}

TEST(Random, ElementDependsOnlyOnSeedAndIndex) {
  const Tensor a = rand({1000}, kFloat32, Device::cpu(), 7);
  EXPECT_TENSOR_EQ(rand({1000}, kFloat32, Device::cpu(), 7), a);
  EXPECT_TENSOR_EQ(rand({10, 100}, kFloat32, Device::cpu(), 7).reshape({1000}), a);
  EXPECT_TENSOR_EQ(rand({8, 5, 25}, kFloat32, Device::cpu(), 7).reshape({1000}), a);
  EXPECT_TENSOR_EQ(rand({997}, kFloat32, Device::cpu(), 7), a.slice(0, 0, 997));
  EXPECT_FALSE(test::equal(rand({1000}, kFloat32, Device::cpu(), 8), a));
  EXPECT_TENSOR_EQ(randn({6, 7}, kFloat64, Device::cpu(), 3).reshape({42}), randn({42}, kFloat64, Device::cpu(), 3));
  EXPECT_TENSOR_EQ(randint(-3, 9, {5, 9}, kInt32, Device::cpu(), 3).reshape({45}),
                   randint(-3, 9, {45}, kInt32, Device::cpu(), 3));

  // A strided output holds the stream in logical order.
  const Tensor strided = empty({4, 5}).t();
  cpu::random(RandomKind::Normal, 11, strided);
  EXPECT_TENSOR_EQ(strided, randn({5, 4}, kFloat32, Device::cpu(), 11));

  // Complex outputs are the real stream of twice the length, real and imaginary interleaved.
  const auto c = randn({500}, kComplex64, Device::cpu(), 13).to_vector<std::complex<float>>();
  const auto f = randn({1000}, kFloat32, Device::cpu(), 13).to_vector<float>();
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], std::complex<float>(f[2 * i], f[2 * i + 1])) << i;
  // The 16/8-bit normals are the float32 normals rounded to the format.
  EXPECT_TENSOR_EQ(randn({999}, kBFloat16, Device::cpu(), 13), randn({999}, kFloat32, Device::cpu(), 13).to(kBFloat16));
  EXPECT_TENSOR_EQ(randn({999}, kFloat8_e4m3fn, Device::cpu(), 13),
                   randn({999}, kFloat32, Device::cpu(), 13).to(kFloat8_e4m3fn));
}

TEST(Random, UniformStatistics) {
  constexpr int64_t n = 1 << 20;
  for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    const Tensor t = rand({n}, d, Device::cpu(), 1234);
    const std::vector<double> v = as_doubles(t);
    double lo = 1, hi = 0;
    std::vector<int64_t> bins(16);
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      ++bins[static_cast<size_t>(x * 16)];
    }
    EXPECT_GE(lo, 0.0) << name(d);
    EXPECT_LT(hi, 1.0) << name(d);
    const Moments m = moments(v);
    // 5 standard errors: sd(mean) = sqrt(1/12 / n), sd(var) = sqrt((1/80 - 1/144) / n).
    EXPECT_NEAR(m.mean, 0.5, 5 * std::sqrt(1.0 / 12 / n) + (d == kBFloat16 ? 1.0 / 512 : 0)) << name(d);
    EXPECT_NEAR(m.var, 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n) + (d == kBFloat16 ? 1.0 / 256 : 0)) << name(d);
    for (int64_t b : bins) EXPECT_NEAR(static_cast<double>(b), n / 16.0, 5 * std::sqrt(n / 16.0)) << name(d);
  }
}

TEST(Random, NormalStatistics) {
  constexpr int64_t n = 1 << 20;
  for (DType d : {kFloat32, kFloat64, kFloat16}) {
    const std::vector<double> v = as_doubles(randn({n}, d, Device::cpu(), 99));
    const Moments m = moments(v);
    const double count = static_cast<double>(v.size());
    EXPECT_NEAR(m.mean, 0.0, 5 / std::sqrt(count)) << name(d);
    EXPECT_NEAR(m.var, 1.0, 5 * std::sqrt(2 / count)) << name(d);
    int64_t within1 = 0, beyond3 = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      within1 += std::abs(x) < 1;
      beyond3 += std::abs(x) > 3;
    }
    const double p1 = std::erf(1 / std::sqrt(2.0)), p3 = std::erfc(3 / std::sqrt(2.0));
    EXPECT_NEAR(within1 / count, p1, 5 * std::sqrt(p1 * (1 - p1) / count)) << name(d);
    EXPECT_NEAR(beyond3 / count, p3, 5 * std::sqrt(p3 * (1 - p3) / count)) << name(d);
  }
}

TEST(Random, RandintCoversTheRangeUniformly) {
  constexpr int64_t n = 1 << 20;
  const auto v = randint(-3, 9, {n}, kInt64, Device::cpu(), 42).to_vector<int64_t>();
  std::vector<int64_t> counts(12);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 9);
    ++counts[static_cast<size_t>(x + 3)];
  }
  const double p = 1.0 / 12;
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), n * p, 5 * std::sqrt(n * p * (1 - p)));
  // Other dtypes get the same integers converted.
  const Tensor small = randint(0, 200, {1000}, kInt64, Device::cpu(), 5);
  EXPECT_TENSOR_EQ(randint(0, 200, {1000}, kUInt8, Device::cpu(), 5), small.to(kUInt8));
  EXPECT_TENSOR_EQ(randint(0, 200, {1000}, kFloat32, Device::cpu(), 5), small.to(kFloat32));
  EXPECT_TENSOR_EQ(randint(0, 2, {1000}, kBool, Device::cpu(), 5), randint(0, 2, {1000}, kInt64, Device::cpu(), 5).to(kBool));
  EXPECT_THROW(randint(3, 3, {4}, kInt64, Device::cpu(), 0), Error);
  EXPECT_THROW(rand({4}, kInt32, Device::cpu(), 0), Error);
}
