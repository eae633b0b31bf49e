// The bf16 arithmetic shared by the standalone probes (bench/moe_probe.cu, bench/gemv_probe.cu,
// bench/fp8_gemv_probe.cu, bench/moe_cluster_probe.cu): one 16-byte chunk (8 bf16) of weights
// dotted with one of x, unpacked by shifts (the same arithmetic as __bfloat162float), added to
// acc; e4m3 chunks as floats; random bf16 inputs, a GEMV's float64 reference, and the check of a
// probe's bf16 output against its float64 reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "probe_timing.cuh"

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16), acc);
    acc = fmaf(__uint_as_float(ws[i] & 0xFFFF0000u), __uint_as_float(xs[i] & 0xFFFF0000u), acc);
  }
  return acc;
}

// The 16 e4m3 values of a 16-byte chunk as 8 float pairs (pair j: bytes 2j and 2j + 1), for the
// MoE probes' FP8 experts.
__device__ __forceinline__ void e4m3x16_to_float2(const uint4& w, float2 (&f)[8]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>(ws[j / 2] >> (16 * (j % 2)));
    f[j] = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
  }
}

// A bf16 given as raw bits, as a double.
inline double bf16_bits_to_double(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// n bf16 values in [-1, 1), a hash of their index and the seed.
static __global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ seed;
    h ^= h >> 15, h *= 0x85EBCA77u, h ^= h >> 13, h *= 0xC2B2AE3Du, h ^= h >> 16;
    p[i] = __float2bfloat16_rn(static_cast<float>(h >> 8) * (2.f / 16777216.f) - 1.f);
  }
}

// float64 reference y of a bf16 GEMV given as raw bits: rows, y = W x with W [n, k]; columns,
// y = x B with B [k, n].
inline std::vector<double> gemv_reference(const std::vector<uint16_t>& w, const std::vector<uint16_t>& x, int64_t k, int64_t n, bool rows) {
  std::vector<double> xd(k), y(n, 0.0);
  for (int64_t i = 0; i < k; ++i) xd[i] = bf16_bits_to_double(x[i]);
  if (rows) {
    for (int64_t r = 0; r < n; ++r) {
      const uint16_t* wr = &w[static_cast<size_t>(r * k)];
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += bf16_bits_to_double(wr[i]) * xd[i];
      y[r] = acc;
    }
  } else {
    for (int64_t i = 0; i < k; ++i) {
      const uint16_t* br = &w[static_cast<size_t>(i * n)];
      for (int64_t c = 0; c < n; ++c) y[c] += bf16_bits_to_double(br[c]) * xd[i];
    }
  }
  return y;
}

// max |y - ref| / ref_max over n bf16 outputs given as raw bits; a NaN output counts as infinite.
inline double max_relative_error(const uint16_t* y_bits, const double* ref, int n, double ref_max) {
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(y_bits[i]) << 16;
    float y;
    std::memcpy(&y, &bits, 4);
    const double e = std::fabs(y - ref[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
  }
  return err / ref_max;
}

struct CheckedTime {
  double err;  // max_relative_error of one launch's output
  float us;    // per launch, a graph launching every copy once (time_graph)
};
// A probe variant's check and time: `launch(copy, stream)` runs it on weight copy `copy`. One
// launch on the last copy writes y (n bf16 on the device, filled with NaN first so a kernel that
// skips outputs fails), checked against ref; then every copy once per replay, timed.
template <class Launch>
CheckedTime check_and_time(Launch launch, int copies, void* y, int n, const std::vector<double>& ref, double ref_max) {
  std::vector<uint16_t> y_host(n);
  CHECK(cudaMemset(y, 0xff, n * sizeof(uint16_t)));
  launch(copies - 1, cudaStream_t{});
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(y_host.data(), y, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  const double err = max_relative_error(y_host.data(), ref.data(), n, ref_max);
  const float us = time_graph([&](cudaStream_t stream) { for (int c = 0; c < copies; ++c) launch(c, stream); }, copies);
  return {err, us};
}
