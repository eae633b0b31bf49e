// Decode GEMV on CUDA: matrix-vector products with one side a single row or column, where the
// work is reading the matrix once at full memory bandwidth (src/cuda/gemv.cu).
#pragma once
#include "ember/tensor.h"

namespace ember::cuda {

/// True when bmm(a, b) -> out is a matrix-vector product the GEMV kernels take: batch 1,
/// M == 1 or N == 1, f32/f16/bf16, the vector and the output unit-stride, the matrix unit-stride
/// along K or along its output dim.
bool gemv_applies(const Tensor& a, const Tensor& b, const Tensor& out);
/// out = a @ b (+ bias[n] when bias is defined); requires gemv_applies(a, b, out).
void gemv(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

}  // namespace ember::cuda
