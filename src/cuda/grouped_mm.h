// Grouped matrix products on CUDA (src/cuda/grouped_mm.cu), shared with the fused MoE layer
// (src/cuda/moe.cu). Every problem is expressed in "rows" form: out[r, n] = sum_k A[r, k] B[g, k, n]
// for the rows r of group g, or in "batch" form: out[g] = A[g][:, ks:ke] @ B[g][ks:ke, :].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ember/tensor.h"

namespace ember::cuda::gmm {

/// fp32 decoding scale of an FP8 weight: value(g, n, k) by kind.
struct WeightScale {
  enum Kind : int { None = 0, Tensorwise = 1, Rowwise = 2, Block128 = 3 };
  const float* ptr = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;  // strides of the [G, R, C] scale tensor
  int kind = None;
};
/// The kind of a normalised [G, R, C] scale for weights with n output channels (front end rules).
WeightScale weight_scale(const Tensor& scale, int64_t n);

struct RowsProblem {
  const void* a = nullptr;  // A [rows, k]
  int64_t a_rs = 0, a_ks = 1;
  DType a_type = kBFloat16;
  const float* scale_a = nullptr;  // fp8 A: per row (scale_a_rows) or one value
  bool scale_a_rows = false;
  const void* b = nullptr;  // B [groups, k, n]
  int64_t b_gs = 0, b_ks = 1, b_ns = 0;
  DType b_type = kBFloat16;
  WeightScale scale_b;
  const int32_t* offs = nullptr;  // [groups] cumulative end offsets; nullptr: one group of all rows
  int64_t groups = 1, rows = 0, n = 0, k = 0;
  void* out = nullptr;  // [rows, n]
  int64_t o_rs = 0, o_ns = 1;
  DType out_type = kBFloat16;
};

/// Runs a rows problem on the current stream: the few-rows decode kernel when the groups are
/// small and both operands are unit-stride along K, else the mma.sync tile kernel (bf16/f16
/// activations, weights of that type or FP8, unit-stride along K, 16-byte aligned rows), else
/// the wmma tile kernel.
void run_rows(const RowsProblem& p, int device);

/// Batch form: out[g] = A[g][:, ks:ke] @ B[g][ks:ke, :] with [ks, ke) from cumulative end offsets
/// over K (offs) or all of K (offs nullptr); an empty range writes zeros.
struct BatchProblem {
  const void* a = nullptr;  // A [groups, m, k] (a_gs 0 for one shared matrix)
  int64_t a_gs = 0, a_ms = 0, a_ks = 1;
  const void* b = nullptr;  // B [groups, k, n]
  int64_t b_gs = 0, b_ks = 0, b_ns = 1;
  DType type = kBFloat16;
  const int32_t* offs = nullptr;
  int64_t groups = 1, m = 0, n = 0, k = 0;
  void* out = nullptr;
  int64_t o_gs = 0, o_ms = 0, o_ns = 1;
};
void run_batch(const BatchProblem& p, int device);

}  // namespace ember::cuda::gmm
