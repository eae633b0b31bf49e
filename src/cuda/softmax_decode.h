// Softmax over long rows with few rows (decode: 1..64 x 32k..256k vocabulary), one kernel.
#pragma once
#include "ember/tensor.h"

namespace ember::cuda {

/// True when softmax(x, dim) fits the split-row kernel: dim is the last, unit-stride dim; rows
/// are long (>= 4096) and few; f32/f16/bf16; every row slice fits the kernel's registers.
bool softmax_decode_applies(const Tensor& x, int64_t dim);
/// out = softmax(x, -1) (or log_softmax when `log`); requires softmax_decode_applies.
void softmax_decode(const Tensor& x, bool log, const Tensor& out);

}  // namespace ember::cuda
