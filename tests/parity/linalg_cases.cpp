// Parity cases for torch.linalg: CUDA against the CPU (LAPACK) reference. Factors that are unique
// (LU with partial pivoting, solutions, inverses, determinants, singular values) are compared
// directly; Q and U/V are only unique up to signs or phases, so those cases return quantities
// that do not depend on them (Q R, Q^T Q, U diag(S) Vh, U^T U).
#include <algorithm>
#include <complex>
#include <numeric>
#include <random>

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

// ---- small-matrix kernels (n <= 16), the shared-memory LU (n <= 64) and the library paths ----

bool is_complex_dtype(DType dt) { return dt == kComplex64 || dt == kComplex128; }

/// Host values [batch, rows, cols] (row-major) as a tensor of `dtype` on d.
Tensor from_host(const std::vector<std::complex<double>>& v, std::vector<int64_t> shape, DType dtype, Device d) {
  if (is_complex_dtype(dtype)) return tensor<std::complex<double>>(v, std::move(shape)).to(dtype).to(d);
  std::vector<double> re(v.size());
  std::transform(v.begin(), v.end(), re.begin(), [](std::complex<double> z) { return z.real(); });
  return tensor<double>(std::move(re), std::move(shape)).to(dtype).to(d);
}

/// [batch, n, n] matrices P L U with unit-lower L whose entries score (|re| + |im|) below half the
/// pivot's, so partial pivoting has no near ties and every implementation picks the same rows:
/// LU and pivots are comparable element by element. With `singular`, every third matrix has
/// exact zero columns from j = b % n on (info = j + 1, exactly, on every device).
Tensor plu_matrices(Device d, int64_t batch, int64_t n, DType dtype, uint64_t seed, bool singular) {
  const bool cx = is_complex_dtype(dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  std::vector<std::complex<double>> out(static_cast<size_t>(batch * n * n));
  std::vector<std::complex<double>> L(static_cast<size_t>(n * n)), U(static_cast<size_t>(n * n));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  // Random triangular factors grow ill-conditioned exponentially with n; scaling the
  // off-diagonals by 8/n keeps large cases comparable (|L| < 1 still fixes the pivot order).
  const double off = std::min(1.0, 8.0 / static_cast<double>(n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(i * n + j);
        L[at] = i == j ? 1.0 : i < j ? 0.0 : off * (cx ? std::complex<double>(0.2 * uni(gen), 0.2 * uni(gen)) : 0.45 * uni(gen));
        if (i == j) {
          const double mag = 1.5 + 0.5 * uni(gen);
          U[at] = cx ? std::polar(mag, 3.14159 * uni(gen)) : std::complex<double>(uni(gen) < 0 ? -mag : mag);
        } else {
          U[at] = i > j ? 0.0 : off * (cx ? std::complex<double>(uni(gen), uni(gen)) : uni(gen));
        }
      }
    }
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen);
    const int64_t zero_from = singular && b % 3 == 0 ? b % n : n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < n; ++c) {
        std::complex<double> acc = 0;
        for (int64_t t = 0; t <= std::min(i, c); ++t) acc += L[static_cast<size_t>(i * n + t)] * U[static_cast<size_t>(t * n + c)];
        out[static_cast<size_t>(b * n * n + perm[static_cast<size_t>(i)] * n + c)] = c >= zero_from ? 0.0 : acc;
      }
    }
  }
  return from_host(out, {batch, n, n}, dtype, d);
}

std::vector<Tensor> small_lu_all_sizes(Device d, DType dtype) {
  std::vector<Tensor> out;
  for (int64_t n = 1; n <= 16; ++n) {
    auto [LU, pivots, info] = linalg::lu_factor_ex(plu_matrices(d, 1000, n, dtype, 100 + n, true));
    out.insert(out.end(), {LU, pivots, info});
  }
  return out;
}
EMBER_PARITY_CASE_TOL(linalg_small_lu_factor_f32, 1e-4, 1e-5, { return small_lu_all_sizes(d, kFloat32); });
EMBER_PARITY_CASE_TOL(linalg_small_lu_factor_f64, 1e-10, 1e-12, { return small_lu_all_sizes(d, kFloat64); });
EMBER_PARITY_CASE_TOL(linalg_small_lu_factor_c64, 1e-4, 1e-5, { return small_lu_all_sizes(d, kComplex64); });
EMBER_PARITY_CASE_TOL(linalg_small_lu_factor_c128, 1e-10, 1e-12, { return small_lu_all_sizes(d, kComplex128); });

/// Inverses of n = 1..16 (one launch each on CUDA) and the info of a batch with singular matrices.
std::vector<Tensor> small_inv_all_sizes(Device d, DType dtype) {
  std::vector<Tensor> out;
  for (int64_t n = 1; n <= 16; ++n) {
    out.push_back(linalg::inv(plu_matrices(d, 1000, n, dtype, 200 + n, false)));
    out.push_back(std::get<1>(linalg::inv_ex(plu_matrices(d, 1000, n, dtype, 300 + n, true))));
  }
  return out;
}
EMBER_PARITY_CASE_TOL(linalg_small_inv_f32, 1e-3, 1e-4, { return small_inv_all_sizes(d, kFloat32); });
EMBER_PARITY_CASE_TOL(linalg_small_inv_f64, 1e-9, 1e-11, { return small_inv_all_sizes(d, kFloat64); });
EMBER_PARITY_CASE_TOL(linalg_small_inv_c64, 1e-3, 1e-4, { return small_inv_all_sizes(d, kComplex64); });
EMBER_PARITY_CASE_TOL(linalg_small_inv_c128, 1e-9, 1e-11, { return small_inv_all_sizes(d, kComplex128); });

// The goal shapes of the small inverse: fp32 2x2, 3x3, 4x4 over a large batch, strided input.
EMBER_PARITY_CASE_TOL(linalg_inv_f32_2_3_4_strided, 1e-3, 1e-4, {
  std::vector<Tensor> out;
  for (int64_t n : {2, 3, 4}) {
    const Tensor A = plu_matrices(d, 20000, n, kFloat32, 400 + n, false);
    out.push_back(linalg::inv(A));
    out.push_back(linalg::inv(A.transpose(-2, -1)));
  }
  return out;
});

/// lu_solve after lu_factor for small n: A X = B, A^H X = B and X A = B, 3 right-hand sides.
std::vector<Tensor> small_lu_solve_cases(Device d, DType dtype) {
  std::vector<Tensor> out;
  for (int64_t n : {1, 2, 3, 4, 5, 8, 13, 16}) {
    auto [LU, pivots] = linalg::lu_factor(plu_matrices(d, 1000, n, dtype, 500 + n, false));
    const Tensor B = randn_on(d, {1000, n, 3}, dtype, 600 + static_cast<uint64_t>(n));
    out.push_back(linalg::lu_solve(LU, pivots, B));
    out.push_back(linalg::lu_solve(LU, pivots, B, true, true));
    out.push_back(linalg::lu_solve(LU, pivots, B.narrow(-1, 0, 1), true, true));  // one column, A^H X = B
    out.push_back(linalg::lu_solve(LU, pivots, B.transpose(-2, -1), false, false));
    out.push_back(linalg::solve(plu_matrices(d, 1000, n, dtype, 700 + n, false), B.select(-1, 0)));
  }
  return out;
}
EMBER_PARITY_CASE_TOL(linalg_small_lu_solve_f32, 1e-3, 1e-4, { return small_lu_solve_cases(d, kFloat32); });
EMBER_PARITY_CASE_TOL(linalg_small_lu_solve_c64, 1e-3, 1e-4, { return small_lu_solve_cases(d, kComplex64); });
EMBER_PARITY_CASE_TOL(linalg_small_lu_solve_c128, 1e-9, 1e-11, { return small_lu_solve_cases(d, kComplex128); });

/// First columns whose entries tie on |re| + |im| (LAPACK's score) while their |z| differ, or
/// where the largest |re| + |im| is not the largest |z|: pivots must follow LAPACK, not |z|.
Tensor complex_tie_matrices(Device d, int64_t batch, int64_t n, DType dtype, uint64_t seed) {
  const std::complex<double> ties[] = {{1, 2}, {3, 0}, {0.5, 2.5}, {-2, -1}, {0, 3}, {-1.5, 1.5}, {2, 2}, {3.5, 0}};
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  std::vector<std::complex<double>> v(static_cast<size_t>(batch * n * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c)
        v[static_cast<size_t>((b * n + r) * n + c)] =
            c == 0 ? ties[(static_cast<size_t>(b) + static_cast<size_t>(r) * 3) % 8] : std::complex<double>(uni(gen), uni(gen));
  return from_host(v, {batch, n, n}, dtype, d);
}
EMBER_PARITY_CASE_TOL(linalg_lu_complex_pivot_ties, 1e-4, 1e-5, {
  std::vector<Tensor> out;
  for (DType dt : {kComplex64, kComplex128}) {
    for (int64_t n : {4, 20}) {
      auto [LU, pivots, info] = linalg::lu_factor_ex(complex_tie_matrices(d, 64, n, dt, 800 + n));
      out.insert(out.end(), {LU, pivots, info});
    }
  }
  return out;
});

// The shared-memory LU (n = 64, batch 64) and cuSOLVER (n = 300): factors, solves, determinants.
EMBER_PARITY_CASE_TOL(linalg_lu_n64_batch64, 1e-3, 1e-4, {
  std::vector<Tensor> out;
  for (DType dt : {kFloat32, kComplex64}) {
    const Tensor A = plu_matrices(d, 64, 64, dt, 900, true);
    auto [LU, pivots, info] = linalg::lu_factor_ex(A);
    const Tensor good = plu_matrices(d, 64, 64, dt, 901, false);
    auto [sign, logabsdet] = linalg::slogdet(good);
    out.insert(out.end(), {LU, pivots, info, linalg::solve(good, randn_on(d, {64, 64, 5}, dt, 902)), sign, logabsdet});
  }
  return out;
});
EMBER_PARITY_CASE_TOL(linalg_lu_n300_f64, 1e-8, 1e-10, {
  const Tensor A = plu_matrices(d, 1, 300, kFloat64, 1000, false).squeeze(0);
  auto [LU, pivots] = linalg::lu_factor(A);
  const Tensor B = randn_on(d, {300, 4}, kFloat64, 1001);
  auto [sign, logabsdet] = linalg::slogdet(A);
  return {LU, pivots, linalg::lu_solve(LU, pivots, B), linalg::lu_solve(LU, pivots, B, true, true),
          linalg::inv(A), sign, logabsdet};
});
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_batched, 1e-4, 1e-4, {
  const Tensor R = std::get<1>(linalg::qr(cpu_randn({200, 6, 6}, kFloat32, 1100))).to(d);
  const Tensor B = randn_on(d, {200, 6, 3}, kFloat32, 1101);
  return {linalg::solve_triangular(R, B, true), linalg::solve_triangular(R.transpose(-2, -1), B, false, true, true),
          linalg::solve_triangular(R, B.transpose(-2, -1), true, false)};
});
// ---- the batched triangular solve (n <= 64: one kernel, linalg_triangular.cu) -------------------

/// Random [shape..., rows, cols] values (complex parts too for complex dtypes) on d.
Tensor random_values(Device d, const std::vector<int64_t>& shape, DType dtype, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  std::vector<std::complex<double>> v(static_cast<size_t>(count));
  for (auto& z : v) z = {normal(gen), normal(gen)};
  return from_host(v, shape, dtype, d);
}

/// [batch, n, n] triangular matrices that stay well conditioned at n = 64: triangle entries
/// scaled by min(1, 2/n), diagonal magnitudes in [1, 2] with random signs or phases. The other
/// triangle holds entries of size 1000, so a solver that reads it cannot pass.
Tensor triangular_matrices(Device d, int64_t batch, int64_t n, bool upper, DType dtype, uint64_t seed) {
  const bool cx = is_complex_dtype(dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  const double off = std::min(1.0, 2.0 / static_cast<double>(n));
  std::vector<std::complex<double>> v(static_cast<size_t>(batch * n * n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        std::complex<double>& z = v[static_cast<size_t>((b * n + i) * n + j)];
        const std::complex<double> unit_random(uni(gen), cx ? uni(gen) : 0.0);
        if (i == j) {
          const double mag = 1.5 + 0.5 * uni(gen);
          z = cx ? std::polar(mag, 3.14159 * uni(gen)) : std::complex<double>(uni(gen) < 0 ? -mag : mag);
        } else {
          z = (upper ? j > i : j < i) ? off * unit_random : 1000.0 * unit_random;
        }
      }
    }
  }
  return from_host(v, {batch, n, n}, dtype, d);
}

/// Every variant over n in {1, 7, 33, 64} (panel padding, one and two panels) and k in {1, 5, 64,
/// 300} (several matrices per block, one chunk, several chunks): upper and lower, X A = B and
/// A X = B, unitriangular or not, on a batch of 3.
std::vector<Tensor> triangular_solve_cases(Device d, DType dtype) {
  std::vector<Tensor> out;
  uint64_t seed = 1400;
  for (int64_t n : {1, 7, 33, 64}) {
    for (int64_t k : {1, 5, 64, 300}) {
      for (bool upper : {false, true}) {
        const Tensor A = triangular_matrices(d, 3, n, upper, dtype, seed++);
        const Tensor B = random_values(d, {3, n, k}, dtype, seed++), Bt = random_values(d, {3, k, n}, dtype, seed++);
        for (bool unit : {false, true}) {
          out.push_back(linalg::solve_triangular(A, B, upper, true, unit));
          out.push_back(linalg::solve_triangular(A, Bt, upper, false, unit));
        }
      }
    }
  }
  return out;
}
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_f32, 1e-4, 1e-4, { return triangular_solve_cases(d, kFloat32); });
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_f64, 1e-10, 1e-10, { return triangular_solve_cases(d, kFloat64); });
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_c64, 1e-4, 1e-4, { return triangular_solve_cases(d, kComplex64); });
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_c128, 1e-10, 1e-10, { return triangular_solve_cases(d, kComplex128); });

// Batch broadcasting, views and partial blocks: A [2, 1, n, n] against B [1, 3, n, k]; one A for
// a batch of B; A as the transposed view of an upper batch (column-major, no copy) and every
// second matrix of a batch; B as a narrowed view and as a transposed one; 300 small matrices
// with one and three right-hand sides (blocks of several matrices, the last one partial).
EMBER_PARITY_CASE_TOL(linalg_solve_triangular_small_broadcast_views, 1e-4, 1e-4, {
  std::vector<Tensor> out;
  for (DType dt : {kFloat32, kComplex64}) {
    const Tensor lower = triangular_matrices(d, 2, 33, false, dt, 1500).unsqueeze(1);
    const Tensor B = random_values(d, {1, 3, 33, 9}, dt, 1501);
    out.push_back(linalg::solve_triangular(lower, B, false));
    out.push_back(linalg::solve_triangular(lower, B.transpose(-2, -1), false, false, true));
    const Tensor one = triangular_matrices(d, 1, 20, true, dt, 1502).squeeze(0);
    out.push_back(linalg::solve_triangular(one, random_values(d, {4, 20, 6}, dt, 1503), true));
    const Tensor upper = triangular_matrices(d, 6, 64, true, dt, 1504);
    const Tensor wide = random_values(d, {6, 64, 80}, dt, 1505);
    out.push_back(linalg::solve_triangular(upper.transpose(-2, -1), wide.narrow(-1, 7, 70), false));
    out.push_back(linalg::solve_triangular(upper.slice(0, 0, 6, 2), wide.slice(0, 1, 6, 2).narrow(-1, 0, 64).transpose(-2, -1),
                                           true, false));
    const Tensor small = triangular_matrices(d, 300, 5, false, dt, 1506);
    const Tensor rhs = random_values(d, {300, 5, 3}, dt, 1507);
    out.push_back(linalg::solve_triangular(small, rhs.narrow(-1, 0, 1), false));
    out.push_back(linalg::solve_triangular(small, rhs, false, true, true));
    out.push_back(linalg::solve_triangular(small, rhs.transpose(-2, -1), false, false));
  }
  return out;
});
EMBER_PARITY_CASE_TOL(linalg_qr_modes_c128_and_r, 1e-10, 1e-10, {
  const Tensor A = randn_on(d, {3, 30, 12}, kComplex128, 1200);
  auto [Q, R] = linalg::qr(A);
  auto [Qc, Rc] = linalg::qr(A.transpose(-2, -1), "complete");
  const Tensor Rr = std::get<1>(linalg::qr(randn_on(d, {2, 9, 9}, kFloat64, 1201), "r"));
  return {matmul(Q, R), matmul(Qc, Rc), abs(Rr)};
});
EMBER_PARITY_CASE_TOL(linalg_svd_rank_deficient_large_f64, 1e-8, 1e-8, {
  // gesvdj per matrix (beyond 32): tall and wide rank-7 batches, full and reduced vectors.
  std::vector<Tensor> out;
  for (auto [m, n] : {std::pair<int64_t, int64_t>{80, 60}, {40, 70}}) {
    const Tensor A = matmul(randn_on(d, {2, m, 7}, kFloat64, 1300), randn_on(d, {2, 7, n}, kFloat64, 1301));
    auto [U, S, Vh] = linalg::svd(A);
    auto [Ur, Sr, Vhr] = linalg::svd(A, false);
    out.insert(out.end(), {S, matmul(U.transpose(-2, -1), U), matmul(Vh, Vh.transpose(-2, -1)),
                           matmul(Ur.transpose(-2, -1), Ur), matmul(Vhr, Vhr.transpose(-2, -1)), svd_reconstruction(A)});
  }
  return out;
});

}  // namespace
}  // namespace ember::test
