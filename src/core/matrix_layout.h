// How a BLAS library (OpenBLAS on the CPU, cuBLAS on CUDA) can read the matrices of a [B, rows,
// cols] tensor in place, shared by both backends' products; each maps `transposed` to its enum.
#pragma once
#include <cstdint>
#include <optional>

#include "ember/tensor.h"

namespace ember {

struct MatrixLayout {
  bool transposed;  // stored as the transpose of a row-major matrix (column-major)
  int64_t ld;       // leading dimension
};

/// The in-place layout of each [rows, cols] matrix of x3 ([B, rows, cols]), or nullopt when
/// neither a row-major nor a column-major reading fits its strides (or they exceed int).
std::optional<MatrixLayout> matrix_layout(const Tensor& x3);
/// x3 itself when every matrix is readable in place, else a contiguous copy; a broadcast
/// (stride 0) batch is copied once, not once per batch element.
Tensor blas_readable(const Tensor& x3);
/// x3 converted to `dtype` (contiguous, same device), keeping a broadcast batch broadcast.
Tensor converted(const Tensor& x3, DType dtype);

}  // namespace ember
