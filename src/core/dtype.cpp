#include "ember/dtype.h"

#include <array>

#include "ember/error.h"

namespace ember {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view safetensors;  // safetensors' dtype string
  size_t itemsize;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo{{
    {"bool", "BOOL", 1},        {"uint8", "U8", 1},          {"int8", "I8", 1},
    {"uint16", "U16", 2},       {"int16", "I16", 2},         {"uint32", "U32", 4},
    {"int32", "I32", 4},        {"uint64", "U64", 8},        {"int64", "I64", 8},
    {"float16", "F16", 2},      {"bfloat16", "BF16", 2},     {"float32", "F32", 4},
    {"float64", "F64", 8},      {"complex64", "C64", 8},     {"complex128", "C128", 16},
    {"float8_e4m3fn", "F8_E4M3", 1}, {"float8_e5m2", "F8_E5M2", 1},
}};

const DTypeInfo& info(DType d) { return kInfo[static_cast<size_t>(d)]; }

}  // namespace

size_t itemsize(DType d) { return info(d).itemsize; }
std::string_view name(DType d) { return info(d).name; }

DType dtype_from_name(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == s || kInfo[i].safetensors == s) return static_cast<DType>(i);
  }
  if (s == "float" ) return kFloat32;
  if (s == "half") return kFloat16;
  if (s == "double") return kFloat64;
  if (s == "long") return kInt64;
  if (s == "int") return kInt32;
  fail("dtype", "unknown dtype name: expected a torch or safetensors dtype name, got \"{}\"", s);
}

bool is_floating_point(DType d) {
  return d == kFloat16 || d == kBFloat16 || d == kFloat32 || d == kFloat64 || is_fp8(d);
}
bool is_complex(DType d) { return d == kComplex64 || d == kComplex128; }
bool is_fp8(DType d) { return d == kFloat8_e4m3fn || d == kFloat8_e5m2; }
bool is_integral(DType d, bool include_bool) {
  switch (d) {
    case kBool: return include_bool;
    case kUInt8: case kInt8: case kUInt16: case kInt16: case kUInt32: case kInt32: case kUInt64: case kInt64:
      return true;
    default: return false;
  }
}
bool is_unsigned(DType d) {
  return d == kBool || d == kUInt8 || d == kUInt16 || d == kUInt32 || d == kUInt64;
}

DType to_real(DType d) {
  if (d == kComplex64) return kFloat32;
  if (d == kComplex128) return kFloat64;
  return d;
}
DType to_complex(DType d) {
  if (d == kFloat64 || d == kComplex128) return kComplex128;
  return kComplex64;
}

DType promote_types(DType a, DType b) {
  // torch.promote_types, read off torch 2.15 (tests/core/dtype_test.cpp checks all 17x17 against
  // a fixture saved from torch). 'x' marks pairs torch refuses.
  constexpr auto x = static_cast<DType>(255);
  constexpr DType b1 = kBool, u8 = kUInt8, i8 = kInt8, u16 = kUInt16, i16 = kInt16, u32 = kUInt32,
                  i32 = kInt32, u64 = kUInt64, i64 = kInt64, f16 = kFloat16, bf = kBFloat16,
                  f32 = kFloat32, f64 = kFloat64, c64 = kComplex64, c128 = kComplex128,
                  e4 = kFloat8_e4m3fn, e5 = kFloat8_e5m2;
  static constexpr DType table[kNumDTypes][kNumDTypes] = {
      /* b1  */ {b1, u8, i8, x, i16, x, i32, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* u8  */ {u8, u8, i16, x, i16, x, i32, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* i8  */ {i8, i16, i8, x, i16, x, i32, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* u16 */ {x, x, x, u16, x, x, x, x, x, f16, bf, f32, f64, x, x, x, x},
      /* i16 */ {i16, i16, i16, x, i16, x, i32, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* u32 */ {x, x, x, x, x, u32, x, x, x, f16, bf, f32, f64, x, x, x, x},
      /* i32 */ {i32, i32, i32, x, i32, x, i32, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* u64 */ {x, x, x, x, x, x, x, u64, x, f16, bf, f32, f64, x, x, x, x},
      /* i64 */ {i64, i64, i64, x, i64, x, i64, x, i64, f16, bf, f32, f64, c64, c128, x, x},
      /* f16 */ {f16, f16, f16, f16, f16, f16, f16, f16, f16, f16, f32, f32, f64, c64, c128, x, x},
      /* bf  */ {bf, bf, bf, bf, bf, bf, bf, bf, bf, f32, bf, f32, f64, c64, c128, x, x},
      /* f32 */ {f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f64, c64, c128, x, x},
      /* f64 */ {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, c128, c128, x, x},
      /* c64 */ {c64, c64, c64, x, c64, x, c64, x, c64, c64, c64, c64, c128, c64, c128, x, x},
      /* c128*/ {c128, c128, c128, x, c128, x, c128, x, c128, c128, c128, c128, c128, c128, c128, x, x},
      /* e4  */ {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, e4, x},
      /* e5  */ {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, e5},
  };
  const DType r = table[static_cast<int>(a)][static_cast<int>(b)];
  EMBER_CHECK(r != x, "promote_types", "promotion of {} and {} is not supported (torch refuses it too): "
              "expected a supported pair, got ({}, {}); cast one operand first", name(a), name(b), name(a), name(b));
  return r;
}

}  // namespace ember
