// cuBLAS products other CUDA files call directly (src/cuda/matmul.cu).
#pragma once
#include "ember/tensor.h"

namespace ember::cuda {

/// out [M, N] float32 = a [M, K] @ b [N, K]^T through cuBLAS, for 16-bit a and b of one dtype,
/// each unit-stride along K, and out unit-stride along N (f32 accumulation and output: the MoE
/// router's logits on the grouped path). Returns false, running nothing, for any other form.
bool linear_f32_out(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace ember::cuda
