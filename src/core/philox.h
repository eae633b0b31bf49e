// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and
// ember's random streams built on it. Every function is EMBER_HD so CUDA kernels produce the
// same words, bit for bit, as the CPU backend.
//
// The generator: one call maps a 128-bit counter {c0, c1, c2, c3} and a 64-bit key {k0, k1} to
// four 32-bit words through 10 rounds of
//     (hi0, lo0) = 0xD2511F53 * c0,  (hi1, lo1) = 0xCD9E8D57 * c2     (32x32 -> 64-bit products)
//     c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}
// with the key bumped (k0 += 0x9E3779B9, k1 += 0xBB67AE85) between rounds.
//
// The streams. A call for group g with seed s uses counter {lo32(g), hi32(g), 0, 0} and key
// {lo32(s), hi32(s)} and returns words w[0..3]. Element i of a contiguous output (complex
// outputs count as 2*numel real elements: real and imaginary parts interleaved) is:
//   32-bit streams (float32, and the float32 value behind float16/bfloat16/fp8/complex64):
//     group i / 4, word w = w[i % 4].
//       uniform float32   u = (w >> 8) * 2^-24                          in [0, 1)
//       uniform f16/bf16/fp8: (w >> (32 - d)) * 2^-d, d = significand digits of the format
//         (11, 8, 4, 3): the float32 uniform rounded down to the format's grid, so it is exact
//         there and stays below 1 (rounding to nearest would give 1.0).
//   64-bit streams (float64, complex128, randint): group i / 2, the word pair
//     lo = w[2 * (i % 2)], hi = w[2 * (i % 2) + 1], x = hi * 2^32 + lo.
//       uniform float64   u = (x >> 11) * 2^-53                         in [0, 1)
//       randint in [low, high): low + (x mod (high - low)), in 64-bit wrapping arithmetic. The
//         modulo makes values below 2^64 mod range more likely by at most range / 2^64 relative.
//   normal: Box-Muller on the pair of elements (2m, 2m + 1) (always in one group):
//     u1, u2 their uniforms (float32 uniforms for the 32-bit streams, float64 for the 64-bit
//     ones); r = sqrt(-2 ln(1 - u1)) (1 - u1 is in (0, 1], so never log(0)), t = 2 pi u2;
//     element 2m = r cos t, element 2m + 1 = r sin t, computed in double and rounded once to
//     float for the 32-bit streams (f16/bf16/fp8 then round that float to their format).
#pragma once
#include <cmath>
#include <cstdint>

#include "ember/scalar_types.h"

namespace ember::philox {

struct Words { uint32_t w[4]; };

inline constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u;

/// The Philox-4x32-10 bijection.
EMBER_HD inline Words philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kBump0;
      k1 += kBump1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
  }
  return Words{{c0, c1, c2, c3}};
}

/// The four words of group g of the stream for `seed`.
EMBER_HD inline Words group_words(uint64_t seed, uint64_t group) {
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// The 64-bit value of element pair slot `slot` (0 or 1) of a group.
EMBER_HD inline uint64_t word64(const Words& g, int slot) {
  return (static_cast<uint64_t>(g.w[2 * slot + 1]) << 32) | g.w[2 * slot];
}

EMBER_HD inline float uniform_f32(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }
EMBER_HD inline double uniform_f64(uint64_t x) { return static_cast<double>(x >> 11) * 0x1p-53; }
/// Uniform on the grid of a format with `digits` significand digits (<= 24), as a float.
EMBER_HD inline float uniform_digits(uint32_t w, int digits) {
  return static_cast<float>(w >> (32 - digits)) * (1.0f / static_cast<float>(1u << digits));
}

/// Box-Muller on two uniforms in [0, 1): (r cos t, r sin t).
EMBER_HD inline void box_muller(double u1, double u2, double& z0, double& z1) {
  const double r = ::sqrt(-2.0 * ::log(1.0 - u1));
  const double t = 6.283185307179586476925286766559 * u2;
  z0 = r * ::cos(t);
  z1 = r * ::sin(t);
}

/// low + (x mod (high - low)) with low < high.
EMBER_HD inline int64_t randint_value(uint64_t x, int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + x % range);
}

}  // namespace ember::philox
