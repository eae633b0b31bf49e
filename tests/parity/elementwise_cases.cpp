// Parity cases for the elementwise CUDA kernels: CPU results are the reference.
#include "parity/harness.h"

using namespace ember;
using test::randint_on;
using test::randn_on;

namespace {
// Special values that every float kernel must treat like the CPU: NaN, +-inf, +-0, a subnormal.
Tensor specials_on(Device d, DType dtype) {
  return tensor<float>({NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 1.0f, -2.5f, 0.5f, 3.7f, -100.0f})
      .to(dtype)
      .to(d);
}
}  // namespace

EMBER_PARITY_CASE(elementwise_unary_f32_odd, {
  Tensor x = randn_on(d, {4097}, kFloat32, 1);
  return {neg(x), ember::abs(x), ember::exp(x), ember::log(ember::abs(x)), ember::sqrt(ember::abs(x)), rsqrt(ember::abs(x)),
          sigmoid(x), silu(x), gelu(x), gelu(x, "tanh"), ember::tanh(x), ember::sin(x), ember::cos(x), ember::erf(x),
          ember::log1p(ember::abs(x)), ember::expm1(x), reciprocal(x), square(x), relu(x), ember::floor(x * 3),
          ember::ceil(x * 3), ember::round(x * 3), ember::trunc(x * 3), sign(x), logical_not(x)};
});

EMBER_PARITY_CASE(elementwise_unary_specials, {
  std::vector<Tensor> out;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor x = specials_on(d, t);
    for (Tensor r : {ember::exp(x), ember::log(x), ember::sqrt(x), sigmoid(x), silu(x), gelu(x), ember::round(x), sign(x), relu(x)})
      out.push_back(r);
  }
  return out;
});

EMBER_PARITY_CASE(elementwise_unary_sizes_one_and_seven, {
  return {ember::exp(randn_on(d, {1}, kFloat32, 2)), sigmoid(randn_on(d, {7}, kFloat16, 3)),
          silu(randn_on(d, {7}, kBFloat16, 4))};
});

// f16 and bf16 take sigmoid and silu through the hardware exp2 and reciprocal: wide inputs
// (saturated, overflowing exp).
EMBER_PARITY_CASE(elementwise_sigmoid_silu_half_types_wide_range, {
  std::vector<Tensor> out;
  for (DType t : {kBFloat16, kFloat16}) {
    const Tensor x = (randn_on(d, {4097}, kFloat32, 7) * 30).to(t);
    out.push_back(sigmoid(x));
    out.push_back(silu(x));
  }
  return out;
});

EMBER_PARITY_CASE(elementwise_unary_integer_inputs, {
  Tensor i = randint_on(d, -50, 50, {7, 9}, kInt32, 5);
  Tensor u = randint_on(d, 0, 250, {7, 9}, kUInt8, 6);
  return {ember::exp(i), ember::sqrt(u), neg(u), ember::abs(i), square(i), sign(i), logical_not(u)};
});

EMBER_PARITY_CASE(elementwise_binary_f32_broadcast_strided, {
  Tensor a = randn_on(d, {33, 65}, kFloat32, 7).t();   // transposed
  Tensor b = randn_on(d, {65, 1}, kFloat32, 8);         // broadcast column
  return {a + b, a - b, a * b, a / b, maximum(a, b), minimum(a, b), ember::pow(ember::abs(a), b)};
});

EMBER_PARITY_CASE(elementwise_binary_low_precision, {
  std::vector<Tensor> out;
  for (DType t : {kFloat16, kBFloat16}) {
    Tensor a = randn_on(d, {4097}, t, 9), b = randn_on(d, {4097}, t, 10);
    out.push_back(a + b);
    out.push_back(a * b);
    out.push_back(a / b);
    out.push_back(a + 0.1);  // one-element second operand: computed in float
  }
  return out;
});

EMBER_PARITY_CASE(elementwise_binary_integers_wrap, {
  Tensor a = randint_on(d, -128, 128, {1000}, kInt8, 11), b = randint_on(d, -128, 128, {1000}, kInt8, 12);
  Tensor u = randint_on(d, 0, 65535, {1000}, kUInt16, 13), v = randint_on(d, 0, 65535, {1000}, kUInt16, 14);
  Tensor e = randint_on(d, -3, 6, {1000}, kInt64, 15), base = randint_on(d, -4, 5, {1000}, kInt64, 16);
  return {a + b, a - b, a * b, maximum(a, b), u * v, u - v, ember::pow(base, e), a / b};
});

EMBER_PARITY_CASE(elementwise_comparisons_per_family, {
  std::vector<Tensor> out;
  Tensor big = tensor<uint64_t>({0, 1, 1ull << 63, (1ull << 63) + 1, ~0ull, 12345}).to(d);
  Tensor big2 = tensor<uint64_t>({1, 1, (1ull << 63) + 1, 1ull << 63, ~0ull - 1, 12345}).to(d);
  for (Tensor r : {eq(big, big2), lt(big, big2), ge(big, big2), gt(big, Scalar(uint64_t{1} << 63))}) out.push_back(r);
  Tensor f = specials_on(d, kFloat32);
  Tensor g = tensor<float>({NAN, INFINITY, 0.0f, -0.0f, 0.0f, 1e-40f, -1.0f, -2.5f, NAN, 3.7f, -INFINITY}).to(d);
  for (Tensor r : {eq(f, g), ne(f, g), lt(f, g), le(f, g), gt(f, g), ge(f, g), logical_and(f, g), logical_or(f, g)})
    out.push_back(r);
  Tensor h = f.to(kFloat16), i = randint_on(d, -3, 3, {11}, kInt32, 31);
  for (Tensor r : {lt(h, i), eq(i, 2), gt(i, 1.5), le(h.to(kBFloat16), h), ne(f.to(kComplex64), g.to(kComplex64))})
    out.push_back(r);
  return out;
});

EMBER_PARITY_CASE(elementwise_heaviside_laguerre_frexp, {
  Tensor x = specials_on(d, kFloat32);
  Tensor v = randn_on(d, {11}, kFloat32, 17);
  Tensor n = randint_on(d, -2, 9, {11}, kInt64, 18);
  auto [m32, e32] = frexp(randn_on(d, {4097}, kFloat32, 19) * 1e-39);  // subnormals
  auto [m16, e16] = frexp(specials_on(d, kFloat16));
  auto [mbf, ebf] = frexp(specials_on(d, kBFloat16));
  return {heaviside(x, v), heaviside(randint_on(d, -2, 3, {9}, kInt32, 20), randint_on(d, 0, 5, {9}, kInt32, 21)),
          special::laguerre_polynomial_l(randn_on(d, {11}, kFloat32, 22), n), m32, e32, m16, e16, mbf, ebf};
});

EMBER_PARITY_CASE(elementwise_where_clamp, {
  Tensor x = randn_on(d, {7, 129}, kFloat32, 23);
  Tensor cond = randn_on(d, {7, 1}, kFloat32, 24) > randn_on(d, {1, 129}, kFloat32, 25);
  Tensor lo = randn_on(d, {129}, kFloat32, 26) - 1, hi = randn_on(d, {7, 1}, kFloat32, 27) + 1;
  return {where(cond, x, randn_on(d, {129}, kFloat64, 28)), clamp(x, -0.5, 0.5), clamp(x, std::nullopt, 0.1),
          clamp(x, lo, hi), clamp(specials_on(d, kFloat32), -1.0, 1.0),
          clamp(randint_on(d, 0, 255, {1000}, kUInt8, 29), 10, 300)};
});

EMBER_PARITY_CASE(elementwise_fp8_and_saturate_cast, {
  Tensor x = randn_on(d, {4097}, kFloat32, 30) * 300;
  Tensor e4 = x.to(kFloat8_e4m3fn), e5 = x.to(kFloat8_e5m2);
  return {saturate_cast(x * 10, kFloat8_e4m3fn), saturate_cast(x * 1000, kFloat8_e5m2), saturate_cast(specials_on(d, kFloat32), kFloat8_e4m3fn),
          saturate_cast(x.to(kFloat64) * 1e36, kBFloat16), e4 * e4, ember::abs(e5), eq(e4, e4), where(e4 > e4, e4, e4)};
});
