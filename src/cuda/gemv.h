// Decode GEMV on CUDA: matrix-vector products with one side a single row or column, where the
// work is reading the matrix once at full memory bandwidth (src/cuda/gemv.cu).
#pragma once
#include "ember/tensor.h"

namespace ember::cuda {

/// Most rows of x the small-batch path takes (decode with a few sequences).
constexpr int64_t kGemvMaxRows = 8;

/// True when bmm(a, b) -> out is a product the GEMV kernels take: batch 1, f32/f16/bf16, and
/// either M == 1 or N == 1 with the vector and the output unit-stride and the matrix unit-stride
/// along K or along its output dim, or 2..kGemvMaxRows rows of x against a matrix unit-stride
/// along K (x @ W^T with W [N, K], the nn.Linear layout; 16-bit weights up to 32 MiB and 6144
/// outputs, where these kernels beat cuBLAS).
bool gemv_applies(const Tensor& a, const Tensor& b, const Tensor& out);
/// True when a baddbmm bias (expanded to out's [1, M, N]) is a vector along the output dim the
/// GEMV kernels can add as they write.
bool gemv_bias_applies(const Tensor& bias, const Tensor& out);
/// out = a @ b (+ bias along the output dim when bias is defined); requires gemv_applies(a, b,
/// out) and, with a bias, gemv_bias_applies(bias, out).
void gemv(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

}  // namespace ember::cuda
