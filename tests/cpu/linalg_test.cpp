// torch.linalg on the CPU: defining properties on random batches (P L U = A, A X = B,
// Q^H Q = I, U S V^H = A, A inv(A) = I) checked with float64 host loops, values against torch
// (tests/fixtures/linalg.json, made by scripts/fixtures/make_linalg_fixtures.py), torch's errors.
#include <sys/mman.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "core/storage.h"
#include "cpu/json_fixture.h"
#include "cuda/triangular_packing.h"

using namespace ember;
using ember::test::error_of;
using cd = std::complex<double>;

namespace {

constexpr DType kLinalgTypes[] = {kFloat32, kFloat64, kComplex64, kComplex128};

/// A batch of matrices on the host in complex128, for reference arithmetic.
struct Mats {
  int64_t batch = 0, rows = 0, cols = 0;
  std::vector<cd> v;
  cd& at(int64_t b, int64_t r, int64_t c) { return v[static_cast<size_t>((b * rows + r) * cols + c)]; }
  cd at(int64_t b, int64_t r, int64_t c) const { return v[static_cast<size_t>((b * rows + r) * cols + c)]; }
};

Mats host(const Tensor& x) {
  Mats m;
  m.rows = x.size(-2);
  m.cols = x.size(-1);
  m.v = x.to(kComplex128).contiguous().to_vector<cd>();
  m.batch = m.rows * m.cols == 0 ? 0 : static_cast<int64_t>(m.v.size()) / (m.rows * m.cols);
  return m;
}

Mats zeros_like_shape(int64_t batch, int64_t rows, int64_t cols) {
  return {batch, rows, cols, std::vector<cd>(static_cast<size_t>(batch * rows * cols))};
}

Mats mul(const Mats& a, const Mats& b) {
  Mats out = zeros_like_shape(std::max(a.batch, b.batch), a.rows, b.cols);
  for (int64_t i = 0; i < out.batch; ++i)
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t p = 0; p < a.cols; ++p) {
        const cd x = a.at(a.batch == 1 ? 0 : i, r, p);
        for (int64_t c = 0; c < b.cols; ++c) out.at(i, r, c) += x * b.at(b.batch == 1 ? 0 : i, p, c);
      }
  return out;
}

Mats adjoint(const Mats& a) {
  Mats out = zeros_like_shape(a.batch, a.cols, a.rows);
  for (int64_t i = 0; i < a.batch; ++i)
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < a.cols; ++c) out.at(i, c, r) = std::conj(a.at(i, r, c));
  return out;
}

Mats identity(int64_t batch, int64_t n) {
  Mats out = zeros_like_shape(batch, n, n);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < n; ++r) out.at(i, r, r) = 1;
  return out;
}

/// The upper (or lower) triangle of a, with a unit diagonal when unit.
Mats triangle(const Mats& a, bool upper, bool unit) {
  Mats out = a;
  for (int64_t i = 0; i < a.batch; ++i)
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < a.cols; ++c) {
        if (upper ? r > c : r < c) out.at(i, r, c) = 0;
        if (unit && r == c) out.at(i, r, c) = 1;
      }
  return out;
}

/// max |a - b| relative to max(1, max |b|).
double relative_error(const Mats& a, const Mats& b) {
  EXPECT_EQ(a.v.size(), b.v.size());
  double diff = 0, scale = 1;
  for (size_t i = 0; i < std::min(a.v.size(), b.v.size()); ++i) {
    diff = std::max(diff, std::abs(a.v[i] - b.v[i]));
    scale = std::max(scale, std::abs(b.v[i]));
  }
  return diff / scale;
}

/// Residual bound for a backward-stable factorization of small matrices in this dtype.
double tolerance(DType d) { return d == kFloat32 || d == kComplex64 ? 2e-5 : 1e-12; }

/// Uniform(-1, 1) entries (real and imaginary parts), plus `boost` on the diagonal of square matrices.
Tensor random_matrix(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, double boost = 0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  std::vector<cd> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = cd(dist(gen), is_complex(dtype) ? dist(gen) : 0.0);
    if ((i / cols) % rows == i % cols) v[static_cast<size_t>(i)] += boost;
  }
  return tensor<cd>(std::move(v), shape).to(dtype);
}

/// P L U from lu_factor's packed output, pivots applied as LAPACK's row swaps.
Mats reconstruct_lu(const Tensor& LU, const Tensor& pivots) {
  const Mats lu = host(LU);
  const int64_t m = lu.rows, n = lu.cols, k = std::min(m, n);
  Mats l = zeros_like_shape(lu.batch, m, k), u = zeros_like_shape(lu.batch, k, n);
  for (int64_t i = 0; i < lu.batch; ++i) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) l.at(i, r, c) = r == c ? cd(1) : r > c ? lu.at(i, r, c) : cd(0);
    for (int64_t r = 0; r < k; ++r)
      for (int64_t c = 0; c < n; ++c) u.at(i, r, c) = r <= c ? lu.at(i, r, c) : cd(0);
  }
  Mats a = mul(l, u);
  const std::vector<int32_t> piv = pivots.contiguous().to_vector<int32_t>();
  for (int64_t i = 0; i < a.batch; ++i)
    for (int64_t j = k - 1; j >= 0; --j) {
      const int64_t p = piv[static_cast<size_t>(i * k + j)] - 1;
      for (int64_t c = 0; c < n; ++c) std::swap(a.at(i, j, c), a.at(i, p, c));
    }
  return a;
}

}  // namespace

TEST(Linalg, LuFactorReconstructsA) {
  for (DType d : kLinalgTypes) {
    for (auto shape : std::vector<std::vector<int64_t>>{{3, 5, 5}, {2, 6, 4}, {2, 4, 6}, {7, 7}}) {
      SCOPED_TRACE(fmt::format("{} [{}]", name(d), fmt::join(shape, ",")));
      const Tensor A = random_matrix(shape, d, 11);
      auto [LU, pivots, info] = linalg::lu_factor_ex(A);
      EXPECT_EQ(pivots.dtype(), kInt32);
      EXPECT_EQ(LU.sizes(), A.sizes());
      EXPECT_EQ(LU.stride(-2), 1) << "LU matrices are column-major, like torch's";
      for (int32_t v : info.contiguous().to_vector<int32_t>()) EXPECT_EQ(v, 0);
      EXPECT_LT(relative_error(reconstruct_lu(LU, pivots), host(A)), tolerance(d));
    }
  }
}

TEST(Linalg, SolveInvAndLuSolveSatisfyTheirEquations) {
  for (DType d : kLinalgTypes) {
    SCOPED_TRACE(std::string(name(d)));
    const double tol = tolerance(d);
    const Tensor A = random_matrix({4, 6, 6}, d, 21, 2), B = random_matrix({4, 6, 3}, d, 22);
    const Mats a = host(A), b = host(B);
    EXPECT_LT(relative_error(mul(a, host(linalg::solve(A, B))), b), tol);
    const Tensor Bt = random_matrix({4, 3, 6}, d, 23);
    EXPECT_LT(relative_error(mul(host(linalg::solve(A, Bt, false)), a), host(Bt)), tol);
    // Broadcast batch: one A for three right-hand sides, and a batch of vectors.
    const Tensor A1 = A.slice(0, 0, 1), Bb = random_matrix({3, 6, 2}, d, 24);
    EXPECT_LT(relative_error(mul(host(A1), host(linalg::solve(A1, Bb))), host(Bb)), tol);
    const Tensor v = random_matrix({4, 6, 1}, d, 25).squeeze(-1);
    const Tensor x = linalg::solve(A, v);
    EXPECT_EQ(x.sizes(), (std::vector<int64_t>{4, 6}));
    EXPECT_LT(relative_error(mul(a, host(x.unsqueeze(-1))), host(v.unsqueeze(-1))), tol);
    EXPECT_LT(relative_error(mul(a, host(linalg::inv(A))), identity(4, 6)), tol);
    auto [LU, pivots] = linalg::lu_factor(A);
    EXPECT_LT(relative_error(mul(adjoint(a), host(linalg::lu_solve(LU, pivots, B, true, true))), b), tol);
    EXPECT_LT(relative_error(mul(host(linalg::lu_solve(LU, pivots, Bt, false, false)), a), host(Bt)), tol);
    EXPECT_LT(relative_error(mul(host(linalg::lu_solve(LU, pivots, Bt, false, true)), adjoint(a)), host(Bt)), tol);
  }
}

TEST(Linalg, SolveTriangularReadsOneTriangle) {
  for (DType d : kLinalgTypes) {
    const Tensor A = random_matrix({3, 5, 5}, d, 31, 3);  // the other triangle is not zero: it must be ignored
    for (bool upper : {true, false})
      for (bool left : {true, false})
        for (bool unit : {false, true}) {
          SCOPED_TRACE(fmt::format("{} upper={} left={} unit={}", name(d), upper, left, unit));
          const Tensor B = random_matrix(left ? std::vector<int64_t>{3, 5, 2} : std::vector<int64_t>{3, 2, 5}, d, 32);
          const Mats t = triangle(host(A), upper, unit);
          const Mats x = host(linalg::solve_triangular(A, B, upper, left, unit));
          EXPECT_LT(relative_error(left ? mul(t, x) : mul(x, t), host(B)), tolerance(d));
        }
  }
}

// A column-major matrix that ends where readable memory ends (a user's buffer, or a tensor of a
// memory-mapped safetensors file): LAPACK's BLAS may read a few vector widths past a matrix
// (OpenBLAS issue 4013: its gemv_n kernels), so the solves copy such an operand. Here the page
// after the matrix is PROT_NONE: any read past it faults. (Debian 12's OpenBLAS trsm/getrs were
// also seen not to read past these sizes when the matrix was handed over as it is.)
TEST(Linalg, SolvesNeverReadPastAColumnMajorOperand) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (DType d : kLinalgTypes)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{13}, int64_t{64}, int64_t{97}}) {
      SCOPED_TRACE(fmt::format("{} n={}", name(d), n));
      const size_t bytes = static_cast<size_t>(n * n) * itemsize(d), pages = (bytes + page - 1) / page;
      void* region = mmap(nullptr, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(region, MAP_FAILED);
      char* guard = static_cast<char*>(region) + pages * page;
      ASSERT_EQ(mprotect(guard, page, PROT_NONE), 0);
      // The matrix's last byte is the last readable one.
      const auto storage = std::make_shared<Storage>(guard - bytes, bytes, Device::cpu(),
                                                     [region, pages, page](void*) { munmap(region, (pages + 1) * page); });
      Tensor rows(storage, {n, n}, {n, 1}, 0, d);
      const Tensor A = random_matrix({n, n}, d, 41, 3);
      rows.copy_(A.transpose(0, 1));
      const Tensor column_major = rows.transpose(0, 1);  // equal to A
      const Tensor B = random_matrix({n, 3}, d, 42);
      const double tol = tolerance(d);
      for (bool upper : {true, false})
        EXPECT_LT(relative_error(host(linalg::solve_triangular(column_major, B, upper)), host(linalg::solve_triangular(A, B, upper))), tol);
      std::vector<int32_t> identity(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = static_cast<int32_t>(i + 1);
      const Tensor pivots = tensor(identity, {n});
      for (bool adjoint : {false, true})
        EXPECT_LT(relative_error(host(linalg::lu_solve(column_major, pivots, B, true, adjoint)), host(linalg::lu_solve(A, pivots, B, true, adjoint))),
                  tol);
    }
}

TEST(Linalg, DeterminantsAgreeWithLuAndTriangles) {
  for (DType d : kLinalgTypes) {
    SCOPED_TRACE(std::string(name(d)));
    // A triangular matrix's determinant is its diagonal's product (no pivoting can change that).
    const Tensor A = random_matrix({2, 5, 5}, d, 41, 1.5);
    const Mats t = triangle(host(A), true, false);
    std::vector<cd> expected(2, 1.0);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 5; ++j) expected[i] *= t.at(i, j, j);
    const Tensor T = tensor<cd>(t.v, {2, 5, 5}).to(d);
    const auto det = linalg::det(T).to(kComplex128).to_vector<cd>();
    auto [sign, logabs] = linalg::slogdet(T);
    EXPECT_EQ(sign.dtype(), d);
    EXPECT_EQ(logabs.dtype(), to_real(d));
    const auto s = sign.to(kComplex128).to_vector<cd>();
    const auto l = logabs.to(kFloat64).to_vector<double>();
    for (int i = 0; i < 2; ++i) {
      EXPECT_LT(std::abs(det[i] - expected[i]) / std::abs(expected[i]), tolerance(d) * 10);
      EXPECT_LT(std::abs(s[i] * std::exp(l[i]) - expected[i]) / std::abs(expected[i]), tolerance(d) * 10);
    }
  }
}

TEST(Linalg, QrIsOrthonormalTimesUpperTriangular) {
  for (DType d : kLinalgTypes) {
    for (auto shape : std::vector<std::vector<int64_t>>{{3, 7, 4}, {2, 4, 7}, {5, 5}}) {
      for (const char* mode : {"reduced", "complete", "r"}) {
        SCOPED_TRACE(fmt::format("{} [{}] {}", name(d), fmt::join(shape, ","), mode));
        const Tensor A = random_matrix(shape, d, 51);
        auto [Q, R] = linalg::qr(A, mode);
        const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
        const int64_t r_rows = std::string(mode) == "complete" ? m : k;
        EXPECT_EQ(R.size(-2), r_rows);
        EXPECT_EQ(R.size(-1), n);
        const Mats r = host(R);
        EXPECT_EQ(relative_error(triangle(r, true, false), r), 0.0) << "R has non-zeros below the diagonal";
        if (std::string(mode) == "r") {
          EXPECT_EQ(Q.sizes(), (std::vector<int64_t>{0}));
          continue;
        }
        EXPECT_EQ(Q.size(-1), std::string(mode) == "complete" ? m : k);
        const Mats q = host(Q);
        EXPECT_LT(relative_error(mul(adjoint(q), q), identity(q.batch, q.cols)), tolerance(d));
        EXPECT_LT(relative_error(mul(q, r), host(A)), tolerance(d));
      }
    }
  }
}

TEST(Linalg, TallSkinnyQrFormsReducedQInLinearMemory) {
  // (65536, 8): a complete Q would be 16 GiB in float32; the reduced one is 2 MiB.
  const Tensor A = random_matrix({65536, 8}, kFloat32, 61);
  auto [Q, R] = linalg::qr(A);
  ASSERT_EQ(Q.sizes(), (std::vector<int64_t>{65536, 8}));
  ASSERT_EQ(R.sizes(), (std::vector<int64_t>{8, 8}));
  const Mats q = host(Q);
  EXPECT_LT(relative_error(mul(adjoint(q), q), identity(1, 8)), 1e-4);
  EXPECT_LT(relative_error(mul(q, host(R)), host(A)), 1e-4);
}

TEST(Linalg, SvdReconstructsWithOrthonormalFactors) {
  for (DType d : kLinalgTypes) {
    for (auto shape : std::vector<std::vector<int64_t>>{{3, 7, 4}, {2, 4, 7}, {6, 6}}) {
      for (bool full : {true, false}) {
        SCOPED_TRACE(fmt::format("{} [{}] full_matrices={}", name(d), fmt::join(shape, ","), full));
        const Tensor A = random_matrix(shape, d, 71);
        auto [U, S, Vh] = linalg::svd(A, full);
        const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
        EXPECT_EQ(S.dtype(), to_real(d));
        EXPECT_EQ(U.size(-1), full ? m : k);
        EXPECT_EQ(Vh.size(-2), full ? n : k);
        const Mats u = host(U), vh = host(Vh), s = host(S.unsqueeze(-1));
        EXPECT_LT(relative_error(mul(adjoint(u), u), identity(u.batch, u.cols)), tolerance(d));
        EXPECT_LT(relative_error(mul(vh, adjoint(vh)), identity(vh.batch, vh.rows)), tolerance(d));
        Mats us = zeros_like_shape(u.batch, m, k);
        for (int64_t i = 0; i < u.batch; ++i)
          for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < k; ++c) {
              us.at(i, r, c) = u.at(i, r, c) * s.at(i, c, 0);
              if (c > 0) {
                EXPECT_GE(s.at(i, c - 1, 0).real(), s.at(i, c, 0).real()) << "S descending";
              }
            }
        Mats vh_k = zeros_like_shape(vh.batch, k, n);
        for (int64_t i = 0; i < vh.batch; ++i)
          for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) vh_k.at(i, r, c) = vh.at(i, r, c);
        EXPECT_LT(relative_error(mul(us, vh_k), host(A)), tolerance(d));
        EXPECT_LT(relative_error(host(linalg::svdvals(A).unsqueeze(-1)), s), tolerance(d));
      }
    }
  }
}

TEST(Linalg, SvdOfRankDeficientBatchHasOrthonormalU) {
  // (16, 32, 32) of rank 5: 27 singular values at the noise floor, U must still be orthonormal.
  for (DType d : {kFloat32, kComplex64, kFloat64}) {
    SCOPED_TRACE(std::string(name(d)));
    const Tensor A = matmul(random_matrix({16, 32, 5}, d, 81), random_matrix({16, 5, 32}, d, 82));
    auto [U, S, Vh] = linalg::svd(A);
    const Mats u = host(U), vh = host(Vh);
    EXPECT_LT(relative_error(mul(adjoint(u), u), identity(16, 32)), tolerance(d) * 5);
    EXPECT_LT(relative_error(mul(vh, adjoint(vh)), identity(16, 32)), tolerance(d) * 5);
    const auto s = S.to(kFloat64).to_vector<double>();
    for (int64_t i = 0; i < 16; ++i) {
      EXPECT_GT(s[i * 32 + 4], 1e-2);
      EXPECT_LT(s[i * 32 + 5], tolerance(d) * 10 * s[i * 32]);
    }
  }
}

TEST(Linalg, SingularInputErrorsLikeTorch) {
  // A singular matrix whose LU (with pivoting) has its zero pivot at U[3,3], as torch reports.
  const std::vector<double> singular = {1, 2, 3, 2, 4, 6, 1, 0, 1}, eye = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  const Tensor S = tensor<double>(singular, {3, 3});
  std::vector<double> batch_values;
  for (const auto* m : {&eye, &eye, &eye, &singular}) batch_values.insert(batch_values.end(), m->begin(), m->end());
  const Tensor batch = tensor<double>(batch_values, {4, 3, 3});  // identities, then the singular one
  EXPECT_EQ(error_of([&] { linalg::inv(S); }),
            "[linalg.inv] The diagonal element 3 is zero, the inversion could not be completed because the input "
            "matrix is singular.");
  EXPECT_EQ(error_of([&] { linalg::inv(batch); }),
            "[linalg.inv] (Batch element 3): The diagonal element 3 is zero, the inversion could not be completed "
            "because the input matrix is singular.");
  EXPECT_EQ(error_of([&] { linalg::solve(batch, ones({3, 2}, kFloat64)); }),
            "[linalg.solve] (Batch element 3): The solver failed because the input matrix is singular.");
  EXPECT_NE(error_of([&] { linalg::lu_factor(S); }).find("[linalg.lu_factor] U[3,3] is zero"), std::string::npos);
  auto [LU, pivots, info] = linalg::lu_factor_ex(batch);
  EXPECT_EQ(info.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 3}));
  EXPECT_EQ(std::get<1>(linalg::inv_ex(zeros({2, 2}, kComplex64))).item<int32_t>(), 1);
  EXPECT_EQ(std::get<1>(linalg::solve_ex(S, ones({3}, kFloat64))).item<int32_t>(), 3);
  EXPECT_EQ(linalg::det(S).item<double>(), 0.0);
  auto [sign, logabs] = linalg::slogdet(S);
  EXPECT_EQ(sign.item<double>(), 0.0);
  EXPECT_EQ(logabs.item<double>(), -std::numeric_limits<double>::infinity());
}

TEST(Linalg, ValidationErrors) {
  EXPECT_EQ(error_of([] { linalg::inv(zeros({2, 3})); }),
            "[linalg.inv] A: expected batches of square matrices, got 2 by 3 matrices");
  EXPECT_EQ(error_of([] { linalg::det(zeros({3})); }),
            "[linalg.det] A: expected a tensor with at least 2 dimensions, got a 1-D tensor");
  for (DType d : {kInt64, kFloat16, kBFloat16, kBool, kFloat8_e4m3fn}) {
    EXPECT_NE(error_of([d] { linalg::solve(zeros({2, 2}, d), zeros({2, 1}, d)); }).find("expected a floating point or complex tensor"),
              std::string::npos)
        << name(d);
  }
  EXPECT_EQ(error_of([] { linalg::solve(zeros({2, 2}), zeros({2, 1}, kFloat64)); }),
            "[linalg.solve] dtypes: expected A and B to have the same dtype, got A of type float32 and B of type float64");
  EXPECT_EQ(error_of([] { linalg::solve_triangular(zeros({3, 3}), zeros({3, 2}), true, false); }),
            "[linalg.solve_triangular] shapes of A and B for the equation XA = B: expected compatible ones, got 3x3 and 3x2");
  auto [LU, pivots] = linalg::lu_factor(tensor<float>({2, 1, 1, 3}, {2, 2}));
  EXPECT_THROW(linalg::lu_solve(LU, pivots, zeros({2})), Error);
  EXPECT_THROW(linalg::lu_solve(LU, pivots.to(kInt64), zeros({2, 1})), Error);
  EXPECT_THROW(linalg::solve(zeros({2, 3, 3}), zeros({3, 3, 1})), Error);  // batch 2 vs 3
  EXPECT_EQ(error_of([] { linalg::qr(zeros({3, 2}), "x"); }),
            "[linalg.qr] mode: expected one of 'reduced' (default), 'r', or 'complete', got 'x'");
}

TEST(Linalg, EmptyMatrices) {
  EXPECT_TENSOR_EQ(linalg::det(zeros({2, 0, 0})), ones({2}));
  EXPECT_EQ(linalg::inv(zeros({2, 0, 0})).sizes(), (std::vector<int64_t>{2, 0, 0}));
  auto [Q, R] = linalg::qr(zeros({3, 0}), "complete");
  EXPECT_TENSOR_EQ(Q.contiguous(), tensor<float>({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  EXPECT_EQ(R.sizes(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(linalg::svdvals(zeros({4, 0, 3})).sizes(), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(linalg::solve(zeros({0, 3, 3}), zeros({0, 3, 2})).sizes(), (std::vector<int64_t>{0, 3, 2}));
}

TEST(Linalg, MatchesTorchFixtures) {
  const nlohmann::json cases = test::load_json_cases("linalg.json");
  ASSERT_GT(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string label = c.at("name").get<std::string>(), op = c.at("op").get<std::string>();
    SCOPED_TRACE(label);
    const auto& flags = c.at("flags");
    const Tensor A = test::decode_json_tensor(c.at("inputs").at("A"));
    std::vector<Tensor> expected;
    for (const auto& o : c.at("outputs")) expected.push_back(test::decode_json_tensor(o));
    std::vector<Tensor> actual;
    if (op == "lu_factor") {
      auto [LU, pivots] = linalg::lu_factor(A);
      actual = {LU, pivots};
    } else if (op == "lu_solve") {
      auto [LU, pivots] = linalg::lu_factor(A);
      actual = {linalg::lu_solve(LU, pivots, test::decode_json_tensor(c.at("inputs").at("B")), flags.at("left").get<bool>(),
                                 flags.at("adjoint").get<bool>())};
    } else if (op == "solve") {
      actual = {linalg::solve(A, test::decode_json_tensor(c.at("inputs").at("B")), flags.at("left").get<bool>())};
    } else if (op == "solve_triangular") {
      actual = {linalg::solve_triangular(A, test::decode_json_tensor(c.at("inputs").at("B")), flags.at("upper").get<bool>(),
                                         flags.at("left").get<bool>(), flags.at("unitriangular").get<bool>())};
    } else if (op == "inv") {
      actual = {linalg::inv(A)};
    } else if (op == "det") {
      actual = {linalg::det(A)};
    } else if (op == "slogdet") {
      auto [sign, logabs] = linalg::slogdet(A);
      actual = {sign, logabs};
    } else if (op == "qr") {
      auto [Q, R] = linalg::qr(A, flags.at("mode").get<std::string>());
      actual = {Q, R};
    } else {
      ASSERT_EQ(op, "svdvals");
      actual = {linalg::svdvals(A)};
    }
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      if (expected[i].dtype() == kInt32) {
        EXPECT_TENSOR_EQ(actual[i], expected[i]);
      } else {
        // Same LAPACK algorithms as torch; only rounding (blocking, BLAS kernels) may differ.
        const bool single = expected[i].dtype() == kFloat32 || expected[i].dtype() == kComplex64;
        EXPECT_ALLCLOSE(actual[i], expected[i], single ? 1e-4 : 1e-10, single ? 1e-5 : 1e-12) << "output " << i;
      }
    }
  }
}

// The packed triangle of the CUDA triangular solve (cuda/triangular_packing.h, host code too):
// against offsets summed column by column, every stored element has one slot, the slots fill
// [0, packed_size) exactly, and every column starts on a whole vector.
TEST(LinalgTriangularPacking, ColumnsAreAlignedAndSlotsAreABijection) {
  using namespace ember::cuda::linalg_detail;
  for (int align : {1, 2, 4}) {
    for (int np : {4, 8, 16, 32, 48, 64}) {
      SCOPED_TRACE(fmt::format("align {}, order {}", align, np));
      std::vector<int> owner(static_cast<size_t>(packed_size(np, align)), 0);
      int expected_offset = 0;
      for (int c = 0; c < np; ++c) {
        const int first = c / align * align;
        EXPECT_EQ(packed_first_row(c, align), first);
        ASSERT_EQ(packed_column_offset(c, np, align), expected_offset);
        EXPECT_EQ(expected_offset % align, 0);
        for (int i = first; i < np; ++i) {
          const int slot = packed_index(i, c, np, align);
          ASSERT_EQ(slot, expected_offset + i - first);
          ++owner[static_cast<size_t>(slot)];
        }
        expected_offset += np - first;
      }
      EXPECT_EQ(packed_size(np, align), expected_offset);
      EXPECT_EQ(std::count(owner.begin(), owner.end(), 1), static_cast<long>(owner.size()));
    }
  }
}
