// Index arithmetic of 128x128 block scales of FP8 expert weights, shared by the CUDA kernels
// (grouped_mm.cu, moe.cu) and plain host code, so the unit tests check the very functions the
// kernels run. No CUDA headers: the CPU-only build includes this too.
#pragma once
#include <cstdint>

#include "ember/scalar_types.h"  // EMBER_HD

namespace ember::cuda::gmm {

/// Width of a scale block along N and along K.
inline constexpr int64_t kScaleBlock = 128;

/// Offset of the scale of weight element (n, k) of expert g in a [G, ceil(N/128), ceil(K/128)]
/// scale tensor with element strides (s0, s1, s2): blocks are 128 x 128 tiles of the [N, K]
/// weight, so n picks the row of blocks and k the column, whatever the layout of the weight.
EMBER_HD constexpr int64_t block_scale_offset(int64_t g, int64_t n, int64_t k, int64_t s0, int64_t s1, int64_t s2) {
  return g * s0 + (n / kScaleBlock) * s1 + (k / kScaleBlock) * s2;
}

}  // namespace ember::cuda::gmm
