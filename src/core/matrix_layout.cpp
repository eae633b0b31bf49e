#include "core/matrix_layout.h"

#include <algorithm>
#include <climits>

#include "ops/dispatch.h"

namespace ember {

std::optional<MatrixLayout> matrix_layout(const Tensor& x3) {
  const int64_t rows = x3.size(1), cols = x3.size(2), rs = x3.stride(1), cs = x3.stride(2);
  // A size-1 dim's stride is never used, so it may take whatever value the library wants.
  if (rs > INT_MAX || cs > INT_MAX) return std::nullopt;
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    return MatrixLayout{false, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    return MatrixLayout{true, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  }
  return std::nullopt;
}

Tensor blas_readable(const Tensor& x3) {
  if (matrix_layout(x3)) return x3;
  if (x3.size(0) > 1 && x3.stride(0) == 0) return x3.select(0, 0).contiguous().unsqueeze(0).expand(x3.sizes());
  return x3.contiguous();
}

Tensor converted(const Tensor& x3, DType dtype) {
  const bool broadcast_batch = x3.size(0) > 1 && x3.stride(0) == 0;
  const Tensor src = broadcast_batch ? x3.slice(0, 0, 1) : x3;
  Tensor dst = empty(src.sizes(), dtype, x3.device());
  ops::copy_into(src, dst);
  return broadcast_batch ? dst.expand(x3.sizes()) : dst;
}

}  // namespace ember
