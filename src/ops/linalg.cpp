// torch.linalg front end: validation, batch broadcasting, column-major work copies and torch's
// error messages for singular input. The backends factor batches of column-major matrices.
#include "ember/linalg.h"

#include <functional>

#include "core/storage.h"
#include "ops/dispatch.h"

namespace ember::linalg {
namespace {

void check_input(const char* op, const Tensor& A, const char* what = "A") {
  ops::check_defined(op, A, what);
  EMBER_CHECK(A.dim() >= 2, op, "{}: expected a tensor with at least 2 dimensions, got a {}-D tensor", what, A.dim());
  const DType d = A.dtype();
  EMBER_CHECK(d == kFloat32 || d == kFloat64 || d == kComplex64 || d == kComplex128, op,
              "{} dtype: expected a floating point or complex tensor (float32, float64, complex64, complex128), got {}",
              what, name(d));
}

void check_square(const char* op, const Tensor& A, const char* what = "A") {
  EMBER_CHECK(A.size(-1) == A.size(-2), op, "{}: expected batches of square matrices, got {} by {} matrices", what,
              A.size(-2), A.size(-1));
}

void check_same_dtype(const char* op, const Tensor& A, const Tensor& B) {
  EMBER_CHECK(A.dtype() == B.dtype(), op, "dtypes: expected A and B to have the same dtype, got A of type {} and B of type {}",
              name(A.dtype()), name(B.dtype()));
}

Shape batch_of(const Tensor& x) { return Shape(x.sizes().begin(), x.sizes().end() - 2); }

Shape with(Shape batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail);
  return batch;
}

/// The batch shape A's and B's batch dims broadcast to.
Shape broadcast_batch(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t sb = i + b.size() >= n ? b[i + b.size() - n] : 1;
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, op,
                "batch dims: expected A's batch shape {} and B's batch shape {} to broadcast, got sizes {} and {} at dim {}",
                shape_str(a), shape_str(b), sa, sb, i);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

/// A new [batch..., rows, cols] tensor with column-major matrices (`full`, what the user gets)
/// and its [B, rows, cols] view for the backend (`batched`).
struct ColumnMajor {
  Tensor full, batched;
};

/// Bytes past the last matrix that every column-major buffer keeps: LAPACK's BLAS may read a few
/// vector widths past a matrix. OpenBLAS 0.3.21 (Debian 12's) does in its gemv_n kernels (OpenBLAS
/// issue 4013): Linalg.SvdOfRankDeficientBatchHasOrthonormalU segfaulted in cgemv_n under cgesdd
/// whenever the batch ended at a page boundary (every CI run under ctest in session 12).
constexpr int64_t kLapackSlackBytes = 256;

ColumnMajor column_major(const Shape& batch, int64_t rows, int64_t cols, DType dtype, Device device) {
  const int64_t numel = shape_numel(batch) * rows * cols, slack = kLapackSlackBytes / static_cast<int64_t>(itemsize(dtype));
  const Tensor t = empty({numel + slack}, dtype, device).narrow(0, 0, numel).view(with(batch, {cols, rows}));
  return {t.transpose(-2, -1), t.view({shape_numel(batch), cols, rows}).transpose(1, 2)};
}

/// A column-major copy of x (which has exactly the wanted sizes [batch..., rows, cols]).
ColumnMajor column_major_copy(const Tensor& x) {
  ColumnMajor m = column_major(batch_of(x), x.size(-2), x.size(-1), x.dtype(), x.device());
  ops::copy_into(x, m.full);
  return m;
}

/// Whether the CPU backend may hand t's memory to LAPACK as it is: on the GPU always; on the CPU
/// only with kLapackSlackBytes of t's storage past its last element (a user's tensor can end at
/// the end of its allocation, or of a memory-mapped file: safetensors' tensors do).
bool lapack_may_read(const Tensor& t) {
  if (!t.device().is_cpu()) return true;
  const auto end = static_cast<size_t>(t.storage_offset() + t.numel()) * t.itemsize();
  return t.storage()->nbytes() >= end + static_cast<size_t>(kLapackSlackBytes);
}

/// x expanded to `batch` as a backend [B, rows, cols] column-major batch: a view when x already
/// is one (a factorization's output) with the slack LAPACK needs, else a copy.
Tensor column_major_batch(const Tensor& x, const Shape& batch) {
  const Tensor e = x.expand(with(batch, {x.size(-2), x.size(-1)}));
  const Tensor rows_first = e.transpose(-2, -1);
  if (rows_first.is_contiguous() && lapack_may_read(rows_first))
    return rows_first.view({shape_numel(batch), x.size(-1), x.size(-2)}).transpose(1, 2);
  return column_major_copy(e).batched;
}

/// Zeros with ones on the diagonal of each [n, n] matrix of x3 [B, n, n].
void fill_identity(const Tensor& x3) {
  EMBER_DISPATCH(x3.device(), fill, x3, Scalar(0));
  const Tensor diagonal(x3.storage(), {x3.size(0), x3.size(1)}, {x3.stride(0), x3.stride(1) + x3.stride(2)},
                        x3.storage_offset(), x3.dtype());
  EMBER_DISPATCH(x3.device(), fill, diagonal, Scalar(1));
}

/// Throws torch's message for the first non-zero info, prefixed by the batch element when A is
/// a batch (copies info to the host, as torch's checks do).
void raise_on_info(const char* op, const Tensor& info, bool batched, const std::function<std::string(int32_t)>& what) {
  const std::vector<int32_t> values = info.to(Device::cpu()).contiguous().to_vector<int32_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == 0) continue;
    if (batched) fail(op, "(Batch element {}): {}", i, what(values[i]));
    fail(op, "{}", what(values[i]));
  }
}

Tensor lu_solve_checked(const char* op, const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  check_input(op, LU, "LU");
  check_square(op, LU, "LU");
  ops::check_defined(op, pivots, "pivots");
  ops::check_defined(op, B, "B");
  ops::check_same_device(op, {&LU, &pivots, &B});
  EMBER_CHECK(B.dim() >= 2, op, "B: expected a tensor with at least 2 dimensions, got a {}-D tensor", B.dim());
  check_same_dtype(op, LU, B);
  const int64_t n = LU.size(-1);
  EMBER_CHECK(pivots.dtype() == kInt32, op, "pivots dtype: expected int32, got {}", name(pivots.dtype()));
  EMBER_CHECK(pivots.sizes() == with(batch_of(LU), {n}), op, "pivots: expected sizes {}, got {}",
              shape_str(with(batch_of(LU), {n})), shape_str(pivots.sizes()));
  EMBER_CHECK(left ? B.size(-2) == n : B.size(-1) == n, op,
              "shapes of A and B for the equation {}: expected compatible ones, got {}x{} and {}x{}",
              left ? "AX = B" : "XA = B", n, n, B.size(-2), B.size(-1));
  const int64_t k = left ? B.size(-1) : B.size(-2);
  const Shape batch = broadcast_batch(op, batch_of(LU), batch_of(B));
  // X A = B is A^T X^T = B^T, and X A^H = B is conj(A) X^T = B^T: solve for X^T.
  const Tensor rhs = left ? B.expand(with(batch, {n, k})) : B.expand(with(batch, {k, n})).transpose(-2, -1);
  ColumnMajor x = column_major_copy(rhs);
  const int64_t nbatch = shape_numel(batch);
  if (nbatch > 0 && n > 0 && k > 0) {
    const Tensor lu3 = column_major_batch(LU, batch);
    const Tensor piv = pivots.expand(with(batch, {n})).contiguous().view({nbatch, n});
    const bool transpose = left ? adjoint : !adjoint, conjugate = adjoint;
    EMBER_DISPATCH(LU.device(), lu_solve, lu3, piv, x.batched, transpose, conjugate);
  }
  return left ? x.full : x.full.transpose(-2, -1);
}

/// lu_factor_ex's work for ops that validated A already.
std::tuple<ColumnMajor, Tensor, Tensor> factor(const Tensor& A) {
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  ColumnMajor lu = column_major_copy(A);
  Tensor pivots = empty(with(batch, {k}), kInt32, A.device());
  Tensor info = zeros(batch, kInt32, A.device());
  if (nbatch > 0 && k > 0) EMBER_DISPATCH(A.device(), lu_factor, lu.batched, pivots.view({nbatch, k}), info.view({nbatch}));
  return {lu, pivots, info};
}

const std::string kInvSingular = "the inversion could not be completed because the input matrix is singular.";

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lu_factor_ex(const Tensor& A) {
  check_input("linalg.lu_factor_ex", A);
  auto [lu, pivots, info] = factor(A);
  return {lu.full, pivots, info};
}

std::tuple<Tensor, Tensor> lu_factor(const Tensor& A) {
  check_input("linalg.lu_factor", A);
  auto [lu, pivots, info] = factor(A);
  raise_on_info("linalg.lu_factor", info, A.dim() > 2, [](int32_t i) {
    return fmt::format("U[{},{}] is zero and using it on lu_solve would result in a division by zero. If you still "
                       "want to perform the factorization, consider calling linalg.lu_factor_ex(A)",
                       i, i);
  });
  return {lu.full, pivots};
}

Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  return lu_solve_checked("linalg.lu_solve", LU, pivots, B, left, adjoint);
}

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unitriangular) {
  const char* op = "linalg.solve_triangular";
  check_input(op, A);
  check_square(op, A);
  check_input(op, B, "B");
  ops::check_same_device(op, {&A, &B});
  check_same_dtype(op, A, B);
  const int64_t n = A.size(-1);
  EMBER_CHECK(left ? B.size(-2) == n : B.size(-1) == n, op,
              "shapes of A and B for the equation {}: expected compatible ones, got {}x{} and {}x{}",
              left ? "AX = B" : "XA = B", n, n, B.size(-2), B.size(-1));
  const Shape batch = broadcast_batch(op, batch_of(A), batch_of(B));
  ColumnMajor x = column_major_copy(B.expand(with(batch, {B.size(-2), B.size(-1)})));
  if (x.full.numel() > 0) {
    EMBER_DISPATCH(A.device(), triangular_solve, column_major_batch(A, batch), x.batched, upper, left, unitriangular);
  }
  return x.full;
}

std::tuple<Tensor, Tensor> solve_ex(const Tensor& A, const Tensor& B, bool left) {
  const char* op = "linalg.solve";
  check_input(op, A);
  check_square(op, A);
  ops::check_defined(op, B, "B");
  ops::check_same_device(op, {&A, &B});
  check_same_dtype(op, A, B);
  // torch's rule: B is a (batch of) vector(s) when 1-D or when its sizes are A's without the last.
  const bool vector_rhs =
      B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == Shape(A.sizes().begin(), A.sizes().end() - 1));
  const Tensor rhs = vector_rhs ? B.unsqueeze(left ? -1 : -2) : B;
  auto [lu, pivots, info] = factor(A);
  const Tensor X = lu_solve_checked(op, lu.full, pivots, rhs, left, false);
  return {vector_rhs ? X.squeeze(left ? -1 : -2) : X, info};
}

Tensor solve(const Tensor& A, const Tensor& B, bool left) {
  auto [X, info] = solve_ex(A, B, left);
  raise_on_info("linalg.solve", info, A.dim() > 2,
                [](int32_t) { return std::string("The solver failed because the input matrix is singular."); });
  return X;
}

std::tuple<Tensor, Tensor> inv_ex(const Tensor& A) {
  const char* op = "linalg.inv";
  check_input(op, A);
  check_square(op, A);
  const int64_t n = A.size(-1);
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  ColumnMajor x = column_major(batch, n, n, A.dtype(), A.device());
  if (nbatch == 0 || n == 0) return {x.full, zeros(batch, kInt32, A.device())};
  // One backend call (factor and solve fused for small matrices); it writes every info entry.
  Tensor info = empty(batch, kInt32, A.device());
  EMBER_DISPATCH(A.device(), inv, A.reshape({nbatch, n, n}), x.batched, info.view({nbatch}));
  return {x.full, info};
}

Tensor inv(const Tensor& A) {
  auto [X, info] = inv_ex(A);
  raise_on_info("linalg.inv", info, A.dim() > 2,
                [](int32_t i) { return fmt::format("The diagonal element {} is zero, {}", i, kInvSingular); });
  return X;
}

Tensor det(const Tensor& A) {
  const char* op = "linalg.det";
  check_input(op, A);
  check_square(op, A);
  const int64_t n = A.size(-1);
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  Tensor out = empty(batch, A.dtype(), A.device());
  if (nbatch == 0) return out;
  if (n == 0) return full(batch, 1, A.dtype(), A.device());
  auto [lu, pivots, info] = factor(A);
  EMBER_DISPATCH(A.device(), lu_det, lu.batched, pivots.view({nbatch, n}), out.view({nbatch}));
  return out;
}

std::tuple<Tensor, Tensor> slogdet(const Tensor& A) {
  const char* op = "linalg.slogdet";
  check_input(op, A);
  check_square(op, A);
  const int64_t n = A.size(-1);
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  if (n == 0) return {full(batch, 1, A.dtype(), A.device()), zeros(batch, to_real(A.dtype()), A.device())};
  Tensor sign = empty(batch, A.dtype(), A.device()), logabsdet = empty(batch, to_real(A.dtype()), A.device());
  if (nbatch == 0) return {sign, logabsdet};
  auto [lu, pivots, info] = factor(A);
  EMBER_DISPATCH(A.device(), lu_slogdet, lu.batched, pivots.view({nbatch, n}), sign.view({nbatch}), logabsdet.view({nbatch}));
  return {sign, logabsdet};
}

std::tuple<Tensor, Tensor> qr(const Tensor& A, std::string_view mode) {
  const char* op = "linalg.qr";
  check_input(op, A);
  EMBER_CHECK(mode == "reduced" || mode == "complete" || mode == "r", op,
              "mode: expected one of 'reduced' (default), 'r', or 'complete', got '{}'", mode);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const bool complete = mode == "complete", want_q = mode != "r";
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  ColumnMajor R = column_major(batch, complete ? m : k, n, A.dtype(), A.device());
  ColumnMajor Q = want_q ? column_major(batch, m, complete ? m : k, A.dtype(), A.device())
                         : ColumnMajor{empty({0}, A.dtype(), A.device()), Tensor()};
  if (nbatch == 0) return {Q.full, R.full};
  if (k == 0) {  // no reflectors: R is zeros, a complete Q the identity
    if (R.full.numel() > 0) EMBER_DISPATCH(A.device(), fill, R.full, Scalar(0));
    if (complete && m > 0) fill_identity(Q.batched);
    return {Q.full, R.full};
  }
  const ColumnMajor work = column_major_copy(A);
  EMBER_DISPATCH(A.device(), qr, work.batched, Q.batched, R.batched);
  return {Q.full, R.full};
}

namespace {
/// (U, S, Vh) or, without vectors, (undefined, S, undefined).
std::tuple<Tensor, Tensor, Tensor> svd_impl(const char* op, const Tensor& A, bool vectors, bool full_matrices) {
  check_input(op, A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape batch = batch_of(A);
  const int64_t nbatch = shape_numel(batch);
  const Tensor S = empty(with(batch, {k}), to_real(A.dtype()), A.device());
  ColumnMajor U, Vh;
  if (vectors) {
    U = column_major(batch, m, full_matrices ? m : k, A.dtype(), A.device());
    Vh = column_major(batch, full_matrices ? n : k, n, A.dtype(), A.device());
  }
  if (nbatch > 0 && k == 0 && vectors && full_matrices) {  // no singular values: any orthonormal bases
    if (m > 0) fill_identity(U.batched);
    if (n > 0) fill_identity(Vh.batched);
  }
  if (nbatch > 0 && k > 0) {
    const ColumnMajor work = column_major_copy(A);
    EMBER_DISPATCH(A.device(), svd, work.batched, U.batched, S.view({nbatch, k}), Vh.batched);
  }
  return {U.full, S, Vh.full};
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> svd(const Tensor& A, bool full_matrices) {
  return svd_impl("linalg.svd", A, true, full_matrices);
}

Tensor svdvals(const Tensor& A) { return std::get<1>(svd_impl("linalg.svdvals", A, false, false)); }

}  // namespace ember::linalg
