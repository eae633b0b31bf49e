// torch.linalg on batches of matrices [..., m, n] (leading dims are batch dims and broadcast where
// torch broadcasts them). float32, float64, complex64 and complex128; other dtypes are refused.
// LAPACK conventions: pivots are 1-based kInt32, info (kInt32) is the first zero pivot (1-based)
// or 0. Factor-shaped results (LU, Q, R, U, Vh) have column-major matrices, like torch's.
#pragma once
#include <string_view>
#include <tuple>

#include "ember/tensor.h"

namespace ember::linalg {

/// (LU, pivots, info) of A [..., m, n]: P L U = A with unit-lower L and upper U packed in LU,
/// pivots [..., min(m, n)]. Never throws for singular input (info says so).
std::tuple<Tensor, Tensor, Tensor> lu_factor_ex(const Tensor& A);
/// (LU, pivots); throws ember::Error naming the batch element when U has a zero diagonal.
std::tuple<Tensor, Tensor> lu_factor(const Tensor& A);
/// Solves A X = B (left) or X A = B, with A^H instead of A when adjoint, from lu_factor's output;
/// B [..., n, k] (left) or [..., k, n]; batch dims broadcast.
Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left = true, bool adjoint = false);
/// Solves A X = B (left) or X A = B for triangular A (its upper or lower triangle; diagonal taken
/// as 1 when unitriangular). A singular A gives inf/NaN, like torch, rather than an error.
Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left = true, bool unitriangular = false);
/// (X, info) with A X = B (left) or X A = B; B may be a vector batch [..., n] (torch's rule).
std::tuple<Tensor, Tensor> solve_ex(const Tensor& A, const Tensor& B, bool left = true);
/// solve_ex, throwing ember::Error for a singular A (naming the batch element).
Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
/// (inverse, info); never throws for singular input.
std::tuple<Tensor, Tensor> inv_ex(const Tensor& A);
/// The inverse; throws ember::Error naming the batch element and the zero diagonal element of U.
Tensor inv(const Tensor& A);
/// Determinant [...] through LU (0 for singular input; 1 for 0x0 matrices).
Tensor det(const Tensor& A);
/// (sign, logabsdet): sign has A's dtype (|sign| = 1, or 0 when singular), logabsdet the real
/// dtype (-inf when singular); det = sign * exp(logabsdet).
std::tuple<Tensor, Tensor> slogdet(const Tensor& A);
/// (Q, R) with Q R = A. mode "reduced": Q [..., m, k], R [..., k, n] (k = min(m, n)), Q formed in
/// O(m k) memory; "complete": Q [..., m, m], R [..., m, n]; "r": Q empty, R [..., k, n].
std::tuple<Tensor, Tensor> qr(const Tensor& A, std::string_view mode = "reduced");
/// (U, S, Vh) with U diag(S) Vh = A, S descending real; full_matrices: U [..., m, m] and
/// Vh [..., n, n], else U [..., m, k], Vh [..., k, n]. U and Vh orthonormal even for rank-deficient A.
std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices = true);
/// The singular values [..., min(m, n)], descending.
Tensor svdvals(const Tensor& A);

}  // namespace ember::linalg
