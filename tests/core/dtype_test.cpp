// Dtypes against torch 2.15 CPU (scripts/fixtures/make_dtype_fixtures.py): the host scalar types'
// conversions bit for bit (every fp8 code, edge values, midpoints and their neighbours, random
// bit patterns), Tensor::to between every pair of dtypes, promote_types, names and sizes.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "compare.h"

using namespace ember;

namespace {

constexpr const char* kOrder[kNumDTypes] = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                                            "int64", "float16", "bfloat16", "float32", "float64", "complex64",
                                            "complex128", "float8_e4m3fn", "float8_e5m2"};

const std::map<std::string, Tensor>& fixtures() {
  static const std::map<std::string, Tensor> f = load_safetensors(test::fixture_path("dtype.safetensors"));
  return f;
}

const Tensor& fx(const std::string& key) {
  const auto it = fixtures().find(key);
  if (it == fixtures().end()) throw std::runtime_error("fixture tensor missing: " + key);
  return it->second;
}

/// The fixture stores complex128 as float64 [..., 2]; other dtypes as themselves.
Tensor fx_as(const std::string& key, DType dtype) {
  const Tensor& t = fx(key);
  if (dtype != kComplex128) return t;
  Tensor out = empty({t.size(0)}, kComplex128);
  std::memcpy(out.raw_data(), t.contiguous().raw_data(), t.nbytes());
  return out;
}

bool is_nan_code(DType d, uint64_t code) {
  switch (d) {
    case kFloat16: return (code & 0x7C00) == 0x7C00 && (code & 0x3FF) != 0;
    case kBFloat16: return (code & 0x7F80) == 0x7F80 && (code & 0x7F) != 0;
    case kFloat8_e4m3fn: return (code & 0x7F) == 0x7F;
    case kFloat8_e5m2: return (code & 0x7F) > 0x7C;
    case kFloat32: return (code & 0x7F800000u) == 0x7F800000u && (code & 0x7FFFFFu) != 0;
    case kFloat64: return std::isnan(std::bit_cast<double>(code));
    default: return false;
  }
}

/// Compares the float->format encodings of `inputs` with torch's codes. NaN inputs must give a
/// NaN (of the input's sign, except bf16): torch's own NaN payloads differ between its kernels
/// (bf16: 0xFFFF from contiguous vectorised casts, 0x7FC0 from strided ones; f16 keeps the
/// payload); ember gives c10's scalar results.
template <class Code, class Encode>
void check_encoding(const char* what, DType d, const Tensor& inputs, const Tensor& expected, Encode&& encode) {
  const auto in = inputs.to_vector<float>();
  const auto want = expected.to_vector<Code>();
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GT(in.size(), 1000u);
  const Code sign_bit = static_cast<Code>(Code(1) << (8 * sizeof(Code) - 1));
  int mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Code got = encode(in[i]);
    const bool same_sign = d == kBFloat16 || (got & sign_bit) == (want[i] & sign_bit);
    const bool ok = std::isnan(in[i]) ? is_nan_code(d, got) && same_sign : got == want[i];
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << what << ": input " << std::hexfloat << in[i] << " (bits 0x" << std::hex
                    << std::bit_cast<uint32_t>(in[i]) << "): expected 0x" << +want[i] << ", got 0x" << +got;
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

/// Element-wise bit comparison of two tensors of one dtype over the elements where mask is true
/// (NaN equals NaN; complex parts separately).
void expect_bits_equal(const std::string& what, const Tensor& got, const Tensor& want, const std::vector<bool>& mask) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const Tensor g = got.contiguous(), w = want.contiguous();
  const size_t item = itemsize(got.dtype());
  const size_t part = is_complex(got.dtype()) ? item / 2 : item;
  const DType part_dtype = is_complex(got.dtype()) ? to_real(got.dtype()) : got.dtype();
  const auto* gb = static_cast<const unsigned char*>(g.raw_data());
  const auto* wb = static_cast<const unsigned char*>(w.raw_data());
  int mismatches = 0;
  for (size_t i = 0; i < static_cast<size_t>(g.numel()); ++i) {
    if (!mask[i]) continue;
    for (size_t p = 0; p < item; p += part) {
      uint64_t a = 0, b = 0;
      std::memcpy(&a, gb + i * item + p, part);
      std::memcpy(&b, wb + i * item + p, part);
      const bool ok = a == b || (is_nan_code(part_dtype, a) && is_nan_code(part_dtype, b));
      if (!ok && ++mismatches <= 5) {
        ADD_FAILURE() << what << " element " << i << (p ? " (imag)" : "") << ": expected bits 0x" << std::hex << b
                      << ", got 0x" << a;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

}  // namespace

TEST(DType, NamesSizesAndParsing) {
  for (int code = 0; code < kNumDTypes; ++code) {
    const auto d = static_cast<DType>(code);
    EXPECT_EQ(name(d), kOrder[code]);
    EXPECT_EQ(dtype_from_name(kOrder[code]), d);
    // The fixture's source tensors carry torch's element sizes.
    const Tensor& src = fx("cast_src_" + std::string(kOrder[code]));
    const size_t torch_item = d == kComplex128 ? 16 : src.itemsize();
    EXPECT_EQ(itemsize(d), torch_item) << kOrder[code];
    if (d != kComplex128) {
      EXPECT_EQ(src.dtype(), d) << kOrder[code];
    }
  }
  const std::pair<const char*, DType> safetensors_names[] = {
      {"BOOL", kBool}, {"U8", kUInt8}, {"I8", kInt8}, {"U16", kUInt16}, {"I16", kInt16}, {"U32", kUInt32},
      {"I32", kInt32}, {"U64", kUInt64}, {"I64", kInt64}, {"F16", kFloat16}, {"BF16", kBFloat16},
      {"F32", kFloat32}, {"F64", kFloat64}, {"C64", kComplex64}, {"F8_E4M3", kFloat8_e4m3fn},
      {"F8_E5M2", kFloat8_e5m2}};
  for (const auto& [n, d] : safetensors_names) EXPECT_EQ(dtype_from_name(n), d) << n;
  for (const char* bad : {"", "f32", "float128", "F8_E4M3FNUZ", "complex32", "Float32"}) {
    EXPECT_THROW(dtype_from_name(bad), Error) << bad;
  }
}

TEST(DType, Fp8DecodesEveryCodeLikeTorch) {
  const auto e4 = fx("e4m3fn_decode").to_vector<float>();
  const auto e5 = fx("e5m2_decode").to_vector<float>();
  ASSERT_EQ(e4.size(), 256u);
  ASSERT_EQ(e5.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float a = Float8_e4m3fn::from_bits(static_cast<uint8_t>(c));
    const float b = Float8_e5m2::from_bits(static_cast<uint8_t>(c));
    if (std::isnan(e4[c])) EXPECT_TRUE(std::isnan(a)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(e4[c])) << "e4m3fn code " << c;
    if (std::isnan(e5[c])) EXPECT_TRUE(std::isnan(b)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(b), std::bit_cast<uint32_t>(e5[c])) << "e5m2 code " << c;
  }
  // The tensor casts decode the same way.
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[c] = static_cast<uint8_t>(c);
  EXPECT_TENSOR_EQ(tensor<uint8_t>(all).view(kFloat8_e4m3fn).to(kFloat32), fx("e4m3fn_decode"));
  EXPECT_TENSOR_EQ(tensor<uint8_t>(all).view(kFloat8_e5m2).to(kFloat32), fx("e5m2_decode"));
}

TEST(DType, EncodingsMatchTorch) {
  check_encoding<uint8_t>("e4m3fn", kFloat8_e4m3fn, fx("e4m3fn_encode_in"), fx("e4m3fn_encode_out"),
                          [](float x) { return Float8_e4m3fn(x).bits; });
  check_encoding<uint8_t>("e5m2", kFloat8_e5m2, fx("e5m2_encode_in"), fx("e5m2_encode_out"),
                          [](float x) { return Float8_e5m2(x).bits; });
  check_encoding<uint16_t>("float16", kFloat16, fx("f16_encode_in"), fx("f16_encode_out"),
                           [](float x) { return Half(x).bits; });
  check_encoding<uint16_t>("bfloat16", kBFloat16, fx("bf16_encode_in"), fx("bf16_encode_out"),
                           [](float x) { return BFloat16(x).bits; });
  // Tensor::to gives the same codes as the scalar types.
  for (const auto& [prefix, d] : {std::pair{"e4m3fn", kFloat8_e4m3fn}, std::pair{"e5m2", kFloat8_e5m2}}) {
    const Tensor codes = fx(std::string(prefix) + "_encode_in").to(d).view(kUInt8);
    const auto c = codes.to_vector<uint8_t>();
    check_encoding<uint8_t>(prefix, d, fx(std::string(prefix) + "_encode_in"), fx(std::string(prefix) + "_encode_out"),
                            [&, i = size_t{0}](float) mutable { return c[i++]; });
  }
  for (const auto& [prefix, d] : {std::pair{"f16", kFloat16}, std::pair{"bf16", kBFloat16}}) {
    const auto c = fx(std::string(prefix) + "_encode_in").to(d).view(kUInt16).to_vector<uint16_t>();
    check_encoding<uint16_t>(prefix, d, fx(std::string(prefix) + "_encode_in"), fx(std::string(prefix) + "_encode_out"),
                             [&, i = size_t{0}](float) mutable { return c[i++]; });
  }
}

#ifdef __FLT16_MAX__
// GCC's _Float16 (IEEE binary16 in software, round to nearest even) as an independent reference:
// every half decodes exactly, and a 1-in-257 sweep of all float32 bit patterns encodes alike.
TEST(DType, HalfAgreesWithCompilerFloat16) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto h = static_cast<uint16_t>(c);
    const float ref = static_cast<float>(std::bit_cast<_Float16>(h));
    const float got = Half::from_bits(h);
    if (std::isnan(ref)) EXPECT_TRUE(std::isnan(got)) << c;
    else ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(ref)) << "code " << c;
  }
  int mismatches = 0;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    const auto ref = std::bit_cast<uint16_t>(static_cast<_Float16>(x));
    if (Half(x).bits != ref && ++mismatches <= 5) ADD_FAILURE() << "float bits 0x" << std::hex << u;
  }
  EXPECT_EQ(mismatches, 0);
}
#endif

TEST(DType, PromoteTypesMatchesTorchTable) {
  const Tensor table = fx("promote");
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{kNumDTypes, kNumDTypes}));
  const auto t = table.to_vector<uint8_t>();
  for (int a = 0; a < kNumDTypes; ++a) {
    for (int b = 0; b < kNumDTypes; ++b) {
      const uint8_t want = t[static_cast<size_t>(a * kNumDTypes + b)];
      const auto da = static_cast<DType>(a), db = static_cast<DType>(b);
      if (want == 255) {
        EXPECT_THROW(promote_types(da, db), Error) << kOrder[a] << " + " << kOrder[b];
      } else {
        EXPECT_EQ(promote_types(da, db), static_cast<DType>(want)) << kOrder[a] << " + " << kOrder[b];
      }
    }
  }
}

TEST(DType, CastsBetweenAllPairsMatchTorch) {
  int pairs = 0;
  for (int s = 0; s < kNumDTypes; ++s) {
    const auto ds = static_cast<DType>(s);
    const Tensor src = fx_as("cast_src_" + std::string(kOrder[s]), ds);
    ASSERT_EQ(src.dtype(), ds);
    const auto defined = fx("cast_defined_" + std::string(kOrder[s])).to_vector<bool>();
    for (int t = 0; t < kNumDTypes; ++t) {
      const auto dt = static_cast<DType>(t);
      const std::string key = "cast_" + std::string(kOrder[s]) + "_" + kOrder[t];
      if (!fixtures().count(key)) continue;  // torch refuses this cast
      const std::vector<bool> mask(defined.begin() + t * src.numel(), defined.begin() + (t + 1) * src.numel());
      expect_bits_equal(key, src.to(dt), fx_as(key, dt), mask);
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, kNumDTypes * kNumDTypes);  // torch casts between every pair on the CPU
}
