// Parity cases for torch.linalg: CUDA against the CPU (LAPACK) reference. Factors that are unique
// (LU with partial pivoting, solutions, inverses, determinants, singular values) are compared
// directly; Q and U/V are only unique up to signs or phases, so those cases return quantities
// that do not depend on them (Q R, Q^T Q, U diag(S) Vh, U^T U).
#include "ops/dispatch.h"
#include "parity/harness.h"

namespace ember::test {
namespace {

/// Inputs made on the CPU (well-conditioned ones through a CPU factorization) and moved to d.
Tensor cpu_randn(std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  return randn_on(Device::cpu(), std::move(shape), dtype, seed);
}

/// [B, k, k] with s [B, k] on the diagonals, in `dtype`, on s's device.
Tensor diag_embed(const Tensor& s, DType dtype) {
  const int64_t b = s.size(0), k = s.size(1);
  const Tensor out = zeros({b, k, k}, dtype, s.device());
  ops::copy_into(s, Tensor(out.storage(), {b, k}, {k * k, k + 1}, 0, dtype));
  return out;
}

/// U diag(S) Vh from reduced factors: independent of the singular vectors' signs/phases.
Tensor svd_reconstruction(const Tensor& A) {
  auto [U, S, Vh] = linalg::svd(A, false);
  return matmul(matmul(U, diag_embed(S, A.dtype())), Vh);
}

EMBER_PARITY_CASE_TOL(linalg_lu_factor_c64, 1e-4, 1e-4, {
  auto [LU, pivots] = linalg::lu_factor(randn_on(d, {4, 33, 33}, kComplex64, 1));
  return {LU, pivots};
});
EMBER_PARITY_CASE_TOL(linalg_lu_factor_f32_rectangular, 1e-4, 1e-4, {
  auto [LU, pivots, info] = linalg::lu_factor_ex(randn_on(d, {3, 40, 25}, kFloat32, 2));
  return {LU, pivots, info};
});
EMBER_PARITY_CASE(linalg_lu_factor_ex_singular_info, {
  const Tensor A = tensor<double>({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3}).to(d);
  return {std::get<2>(linalg::lu_factor_ex(A)), std::get<2>(linalg::lu_factor_ex(zeros({2, 4, 4}, kFloat32, d)))};
});
EMBER_PARITY_CASE_TOL(linalg_solve_f32_many_rhs, 1e-3, 1e-3, {
  return {linalg::solve(randn_on(d, {2, 128, 128}, kFloat32, 3), randn_on(d, {2, 128, 64}, kFloat32, 4))};
});
EMBER_PARITY_CASE_TOL(linalg_solve_batched_small_one_rhs, 1e-3, 1e-3, {
  return {linalg::solve(randn_on(d, {64, 16, 16}, kFloat64, 5), randn_on(d, {64, 16}, kFloat64, 6))};
});
EMBER_PARITY_CASE_TOL(linalg_lu_solve_c64_adjoint_and_right, 1e-3, 1e-3, {
  auto [LU, pivots] = linalg::lu_factor(randn_on(d, {3, 48, 48}, kComplex64, 7));
  const Tensor B = randn_on(d, {3, 48, 5}, kComplex64, 8);
  return {linalg::lu_solve(LU, pivots, B, true, true),
          linalg::lu_solve(LU, pivots, B.transpose(-2, -1), false, false),
          linalg::lu_solve(LU, pivots, B.transpose(-2, -1), false, true)};
});
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_c64_blocked, 1e-3, 1e-3, {
  // R of a random 300x300 matrix: triangular, as well conditioned as the matrix; 300 > one 128 block.
  const Tensor R = std::get<1>(linalg::qr(cpu_randn({300, 300}, kComplex64, 9))).to(d);
  const Tensor B = randn_on(d, {300, 7}, kComplex64, 10);
  return {linalg::solve_triangular(R, B, true),
          linalg::solve_triangular(R.transpose(-2, -1), B, false, true, true),
          linalg::solve_triangular(R, B.transpose(-2, -1), true, false)};
});
EMBER_PARITY_CASE_TOL(linalg_inv_many_3x3, 1e-4, 1e-4, {
  // Orthogonal matrices: perfectly conditioned, so every one of the 1000 inverses is comparable.
  const Tensor Q = std::get<0>(linalg::qr(cpu_randn({1000, 3, 3}, kFloat32, 11))).to(d);
  return {linalg::inv(Q), std::get<1>(linalg::inv_ex(Q))};
});
EMBER_PARITY_CASE_TOL(linalg_det_slogdet_c64, 1e-4, 1e-4, {
  const Tensor A = randn_on(d, {16, 8, 8}, kComplex64, 12);
  auto [sign, logabsdet] = linalg::slogdet(A);
  return {linalg::det(A), sign, logabsdet};
});
EMBER_PARITY_CASE_TOL(linalg_qr_tall_skinny_f32, 1e-4, 1e-4, {
  const Tensor A = randn_on(d, {65536, 8}, kFloat32, 13);
  auto [Q, R] = linalg::qr(A);
  return {matmul(Q, R), matmul(Q.transpose(-2, -1), Q)};
});
EMBER_PARITY_CASE_TOL(linalg_qr_c64_modes, 1e-4, 1e-4, {
  const Tensor A = randn_on(d, {4, 50, 20}, kComplex64, 14);
  auto [Q, R] = linalg::qr(A);
  auto [Qc, Rc] = linalg::qr(A, "complete");
  return {matmul(Q, R), matmul(Qc, Rc)};
});
EMBER_PARITY_CASE_TOL(linalg_svd_rank_deficient_f32, 1e-4, 1e-4, {
  // (16, 32, 32) of rank 5: U and V must stay orthonormal across the 27 noise-level values.
  const Tensor A = matmul(randn_on(d, {16, 32, 5}, kFloat32, 15), randn_on(d, {16, 5, 32}, kFloat32, 16));
  auto [U, S, Vh] = linalg::svd(A);
  return {S, matmul(U.transpose(-2, -1), U), matmul(Vh, Vh.transpose(-2, -1)), svd_reconstruction(A)};
});
EMBER_PARITY_CASE_TOL(linalg_svd_c64_wide, 1e-4, 1e-4, {
  const Tensor A = randn_on(d, {3, 20, 45}, kComplex64, 17);
  return {linalg::svdvals(A), svd_reconstruction(A)};
});
EMBER_PARITY_CASE(linalg_svdvals_f64, {
  return {linalg::svdvals(randn_on(d, {5, 64, 40}, kFloat64, 18))};
});

}  // namespace
}  // namespace ember::test
