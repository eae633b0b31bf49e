// Host scalar types for the 16-bit and 8-bit floating formats.
//
// Each holds its raw bits and converts to and from float exactly as PyTorch's c10 types do,
// bit for bit: round to nearest even; NaN handling and overflow as c10 (see each type).
// The conversions are integer/bit based, apart from the FP8 subnormal step, which relies on
// IEEE float addition rounding to nearest even (never build ember with -ffast-math).
#pragma once
#include <cstdint>
#include <cstring>

// Functions marked EMBER_HD compile for the host and, under nvcc, for the device too, so CUDA
// kernels convert with the very same code (bit-identical results by construction).
#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif

namespace ember {

namespace detail {
EMBER_HD inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
EMBER_HD inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
EMBER_HD inline bool bits_are_nan(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
// m * 2^e for small integers m (exact: every value here is representable).
EMBER_HD inline float scaled(uint32_t m, int e) {
  float v = static_cast<float>(m);
  return v * bits_float(static_cast<uint32_t>(127 + e) << 23);
}

// IEEE binary16, round to nearest even; NaN -> 0x7E00 with the input's sign, overflow -> inf.
EMBER_HD inline uint16_t half_from_float(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u;                 // NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00u;                // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                                     // normal half
    uint32_t r = ax - 0x38000000u;                             // rebias 127 -> 15
    r += 0xFFFu + ((r >> 13) & 1u);                            // round to nearest even
    return sign | static_cast<uint16_t>(r >> 13);
  }
  if (ax <= 0x33000000u) return sign;                          // <= 2^-25 rounds to zero
  const uint32_t e = ax >> 23;                                 // subnormal half
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;                             // value = m >> shift (units of 2^-24)
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

EMBER_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));   // inf / NaN
  if (exp == 0) {                                                          // zero / subnormal
    const float v = scaled(mant, -24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// bfloat16: round to nearest even; any NaN -> 0x7FC0 (c10 round_to_nearest_even).
EMBER_HD inline uint16_t bf16_from_float(float f) {
  const uint32_t x = float_bits(f);
  if (bits_are_nan(x)) return 0x7FC0u;
  return static_cast<uint16_t>((x + ((x >> 16) & 1u) + 0x7FFFu) >> 16);
}
EMBER_HD inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// float8_e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448. Round to nearest even and
// SATURATING, as torch 2.15's c10 (torch/headeronly/util/Float8_e4m3fn.h) and its tensor
// casts: a finite value that rounds past 448 and +-inf become +-448 (0x7E); NaN -> 0x7F|sign.
EMBER_HD inline uint8_t e4m3fn_from_float(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint8_t r;
  if (x >= (1087u << 20)) {                                    // >= 480, inf, NaN
    r = x > 0x7F800000u ? 0x7F : 0x7E;
  } else if (x < (121u << 23)) {                               // < 2^-6: subnormal or zero
    const uint32_t denorm = 141u << 23;                        // 2^14: its ulp is 2^-9
    r = static_cast<uint8_t>(float_bits(bits_float(x) + bits_float(denorm)) - denorm);
  } else {
    const uint32_t odd = (x >> 20) & 1u;
    x += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + odd;
    r = static_cast<uint8_t>(x >> 20);
    if (r == 0x7F) r = 0x7E;                                   // (464, 480) rounds up: saturate
  }
  return r | static_cast<uint8_t>(sign >> 24);
}
EMBER_HD inline float e4m3fn_to_float(uint8_t b) {
  const uint32_t exp = (b >> 3) & 0xFu, mant = b & 7u;
  float v;
  if (exp == 15 && mant == 7) v = bits_float(0x7FC00000u);
  else if (exp == 0) v = scaled(mant, -9);
  else v = scaled(8 + mant, static_cast<int>(exp) - 10);
  return (b & 0x80) ? -v : v;
}

// float8_e5m2: bias 15, has inf; round to nearest even, overflow -> inf, NaN -> 0x7F|sign (c10).
EMBER_HD inline uint8_t e5m2_from_float(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint8_t r;
  if (x >= (143u << 23)) {                                     // >= 65536, inf, NaN
    r = x > (255u << 23) ? 0x7F : 0x7C;
  } else if (x < (113u << 23)) {                               // < 2^-14: subnormal or zero
    const uint32_t denorm = 134u << 23;                        // 2^7: its ulp is 2^-16
    r = static_cast<uint8_t>(float_bits(bits_float(x) + bits_float(denorm)) - denorm);
  } else {
    const uint32_t odd = (x >> 21) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFFu + odd;
    r = static_cast<uint8_t>(x >> 21);
  }
  return r | static_cast<uint8_t>(sign >> 24);
}
EMBER_HD inline float e5m2_to_float(uint8_t b) { return half_to_float(static_cast<uint16_t>(b) << 8); }
}  // namespace detail

#define EMBER_FLOAT_TYPE(Name, Storage, from_fn, to_fn)                                     \
  struct Name {                                                                             \
    Storage bits = 0;                                                                       \
    Name() = default;                                                                       \
    EMBER_HD explicit Name(float f) : bits(detail::from_fn(f)) {}                           \
    EMBER_HD static Name from_bits(Storage b) { Name v; v.bits = b; return v; }             \
    EMBER_HD operator float() const { return detail::to_fn(bits); }                         \
  };

/// IEEE half (torch.float16).
EMBER_FLOAT_TYPE(Half, uint16_t, half_from_float, half_to_float)
/// bfloat16 (torch.bfloat16).
EMBER_FLOAT_TYPE(BFloat16, uint16_t, bf16_from_float, bf16_to_float)
/// float8_e4m3fn (torch.float8_e4m3fn): the cast saturates to +-448, like torch 2.15's.
EMBER_FLOAT_TYPE(Float8_e4m3fn, uint8_t, e4m3fn_from_float, e4m3fn_to_float)
/// float8_e5m2 (torch.float8_e5m2).
EMBER_FLOAT_TYPE(Float8_e5m2, uint8_t, e5m2_from_float, e5m2_to_float)
#undef EMBER_FLOAT_TYPE

}  // namespace ember
