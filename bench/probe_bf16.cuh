// The bf16 arithmetic shared by the standalone probes (bench/moe_probe.cu, bench/gemv_probe.cu):
// one 16-byte chunk (8 bf16) of weights dotted with one of x, unpacked by shifts (the same
// arithmetic as __bfloat162float), added to acc.
#pragma once

#include <cstdint>

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16), acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xFFFF0000u), __uint_as_float(xs[i] & 0xFFFF0000u), acc);
  }
  return acc;
}
