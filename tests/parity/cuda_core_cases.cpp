// Parity cases for the CUDA core kernels: copy with every dtype cast (dense, strided, broadcast,
// misaligned and slice destinations), fill, the fp8 codecs, the Philox streams and the ranges.
// Uniform/randint and the affine ranges must match the CPU bit for bit (tolerance 0).
#include <cmath>
#include <limits>

#include "parity/harness.h"

namespace ember::test {
namespace {

constexpr DType kAllDTypes[] = {kBool, kUInt8, kInt8, kUInt16, kInt16, kUInt32, kInt32, kUInt64, kInt64,
                                kFloat16, kBFloat16, kFloat32, kFloat64, kComplex64, kComplex128,
                                kFloat8_e4m3fn, kFloat8_e5m2};

bool is_signed_or_inexact(DType t) { return !is_unsigned(t); }

/// Every (src, dst) cast of values that every pair represents without undefined behaviour:
/// non-negative values for all, negative ones only where the destination is signed or inexact.
std::vector<Tensor> all_casts(Device d, bool negative) {
  const std::vector<double> nonneg = {0, 1, 2.5, 3.75, 100, 0.1, 7, 127, 0.5, 1.5};
  const std::vector<double> signed_values = {-1, -2.5, -3.75, -100, -0.1, -7, -127, -0.5, -1.5, 0};
  const Tensor base = tensor<double>(negative ? signed_values : nonneg, {2, 5});
  std::vector<Tensor> outs;
  for (DType src : kAllDTypes) {
    if (negative && !is_signed_or_inexact(src)) continue;
    const Tensor x = base.to(src).to(d);
    for (DType dst : kAllDTypes) {
      if (negative && !is_signed_or_inexact(dst)) continue;
      outs.push_back(x.to(dst));           // dense
      outs.push_back(x.t().to(dst));       // strided source
    }
  }
  return outs;
}

}  // namespace

EMBER_PARITY_CASE_TOL(cuda_cast_all_pairs_nonnegative, 0, 0, { return all_casts(d, false); });
EMBER_PARITY_CASE_TOL(cuda_cast_all_pairs_negative, 0, 0, { return all_casts(d, true); });

EMBER_PARITY_CASE_TOL(cuda_cast_float_specials, 0, 0, {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor<float>({inf, -inf, nan, -0.0f, 65504, 65520, 1e-8f, 448, 464, 465, 480, 57344, 61440,
                                  3.0e38f, 1.17549435e-38f, 1e-45f, 0.0078125f, 0.001953125f, -1e-30f, 2.0f},
                                 {20}).to(d);
  std::vector<Tensor> outs;
  for (DType dst : {kFloat16, kBFloat16, kFloat64, kComplex64, kFloat8_e4m3fn, kFloat8_e5m2}) outs.push_back(x.to(dst));
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_fp8_decode_all_bytes, 0, 0, {
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  const Tensor b = tensor<uint8_t>(bytes, {16, 16}).to(d);
  std::vector<Tensor> outs;
  for (DType f8 : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    const Tensor x = b.view(f8);
    for (DType dst : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32}) {
      if (dst == kInt32) outs.push_back(x.to(kFloat32).slice(0, 0, 7).to(dst));  // finite rows only
      else outs.push_back(x.to(dst));
    }
  }
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_fp8_encode_random, 0, 0, {
  const Tensor x = randn_on(d, {4097}, kFloat32, 21);
  return {(x * 300.0).to(kFloat8_e4m3fn), (x * 40000.0).to(kFloat8_e5m2), (x * 1e-3).to(kFloat8_e4m3fn),
          x.to(kFloat16).to(kFloat8_e5m2), x.to(kBFloat16).to(kFloat8_e4m3fn)};
});

EMBER_PARITY_CASE_TOL(cuda_copy_layouts, 0, 0, {
  const Tensor x = randn_on(d, {9, 33, 5}, kFloat32, 22);
  const Tensor h = x.to(kBFloat16);
  return {
      x.permute({2, 0, 1}).contiguous(),                       // strided gather, same dtype
      x.slice(2, 1, 5).contiguous(),                           // inner slice
      x.flatten().slice(0, 1, 1400).to(kFloat16),              // misaligned dense source
      h.permute({1, 2, 0}).to(kFloat32),                       // strided typed cast
      x.select(2, 3).unsqueeze(2).expand({9, 33, 4}).to(kFloat64),  // broadcast source
      cat({x, x.to(kFloat16).to(kFloat32)}, 1),                // slice destinations
      cat({h.to(kInt32), h.to(kInt32).transpose(0, 2).contiguous().transpose(0, 2)}, 0),
  };
});

EMBER_PARITY_CASE_TOL(cuda_fill_every_dtype, 0, 0, {
  std::vector<Tensor> outs;
  for (DType t : kAllDTypes) {
    outs.push_back(full({3, 37}, 3.5, t, d));
    outs.push_back(full({}, 1, t, d));
    if (is_signed_or_inexact(t)) outs.push_back(full({7}, -2, t, d));
  }
  outs.push_back(full({5}, std::numeric_limits<double>::infinity(), kFloat8_e5m2, d));
  outs.push_back(full({5}, int64_t{1} << 40, kInt64, d));
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_rand_uniform_bits, 0, 0, {
  std::vector<Tensor> outs;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kComplex64, kComplex128, kFloat8_e4m3fn, kFloat8_e5m2}) {
    outs.push_back(rand({7, 4097}, t, d, 1234));
    outs.push_back(rand({3}, t, d, 0));
  }
  return outs;
});

EMBER_PARITY_CASE(cuda_randn_normal, {
  std::vector<Tensor> outs;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kComplex64, kComplex128}) {
    outs.push_back(randn({5, 999}, t, d, 99));
    outs.push_back(randn({1}, t, d, 7));
  }
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_randint_bits, 0, 0, {
  std::vector<Tensor> outs;
  for (DType t : {kInt64, kInt32, kInt16, kInt8, kUInt8, kUInt16, kUInt32, kUInt64, kFloat32, kFloat64, kBool}) {
    outs.push_back(randint(0, 2, {4097}, t, d, 5));
    outs.push_back(randint(0, 100, {3, 33}, t, d, 6));
  }
  outs.push_back(randint(-(int64_t{1} << 62), int64_t{1} << 62, {1001}, kInt64, d, 8));
  outs.push_back(randint(-5, 5, {1001}, kInt32, d, 9));
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_arange_bits, 0, 0, {
  std::vector<Tensor> outs;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8}) {
    outs.push_back(arange(0, 37, 1, t, d));
    outs.push_back(arange(-3, 100, 0.7, is_floating_point(t) ? t : kFloat32, d));
  }
  outs.push_back(arange(1, 0, -0.001, kFloat32, d));
  outs.push_back(arange(-1e6, 1e6, 333.3, kFloat64, d));
  outs.push_back(arange(0, 5000, 3, kInt64, d));
  return outs;
});

EMBER_PARITY_CASE_TOL(cuda_linspace_bits, 0, 0, {
  std::vector<Tensor> outs;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kComplex64, kComplex128, kInt64, kInt32, kInt16, kUInt8}) {
    outs.push_back(linspace(-3, 7.5, 1001, t, d));
    outs.push_back(linspace(0, 1, 2, t, d));
    outs.push_back(linspace(2, 2, 1, t, d));
  }
  outs.push_back(linspace(1, -1, 4097, kFloat32, d));
  return outs;
});

EMBER_PARITY_CASE(cuda_logspace, {
  std::vector<Tensor> outs;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32}) {
    outs.push_back(logspace(-2, 2, 101, 10, t, d));
    outs.push_back(logspace(0, 6, 7, 2, t, d));
  }
  return outs;
});

}  // namespace ember::test
