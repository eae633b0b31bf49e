// CPU linear algebra through LAPACKE (and cblas trsm) on batches of column-major matrices.
#include <complex>
// LAPACKE's complex types as std::complex (layout-compatible with Fortran COMPLEX).
#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>
#include <cblas.h>

#include <cmath>
#include <vector>

#include "backend.h"
#include "core/shape.h"
#include "cpu/dispatch.h"

namespace ember::cpu {
namespace {

using c64 = std::complex<float>;
using c128 = std::complex<double>;

// Matrices below this many elements are factored one per OpenMP thread when the batch's work
// (about rows * cols * min(rows, cols) each) pays for the threads; larger ones use LAPACK's
// threaded BLAS one after another.
constexpr int64_t kSmallMatrix = 128 * 128;
constexpr int64_t kParallelWork = 1 << 16;

/// One matrix of a column-major batch [B, rows, cols] (strides (.., 1, ld)).
struct Batch {
  char* base;
  int64_t batch_stride, ld;
  template <class T> T* at(int64_t i) const { return reinterpret_cast<T*>(base) + i * batch_stride; }
};

Batch column_major(const Tensor& x, const char* op) {
  EMBER_CHECK(x.dim() == 3 && (x.stride(1) == 1 || x.size(1) <= 1) && x.stride(2) >= std::max<int64_t>(1, x.size(1)),
              op, "backend operand layout: expected a column-major batch [B, rows, cols], got strides {}",
              shape_str(x.strides()));
  return {static_cast<char*>(x.raw_data()), x.stride(0), std::max<int64_t>(1, x.stride(2))};
}

template <class F> void for_each_matrix(int64_t batch, int64_t rows, int64_t cols, F&& f) {
  const int64_t numel = rows * cols;
  if (batch > 1 && numel <= kSmallMatrix && batch * numel * std::min(rows, cols) >= kParallelWork) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i) f(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) f(i);
  }
}

/// Throws after a batch loop (never inside an OpenMP region) for a LAPACK argument error, which
/// is an ember bug rather than a user error.
void check_lapack_args(const char* routine, const std::vector<lapack_int>& infos) {
  for (size_t i = 0; i < infos.size(); ++i) {
    EMBER_CHECK(infos[i] >= 0, routine, "LAPACK arguments: expected valid ones, got an error for argument {} (batch element {})",
                -infos[i], i);
  }
}

template <class T> using real_of = typename std::conditional_t<is_complex_v<T>, T, std::complex<T>>::value_type;

// ---- LAPACK/BLAS by element type --------------------------------------------------------------
lapack_int getrf(int m, int n, float* a, int lda, int* p) { return LAPACKE_sgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, p); }
lapack_int getrf(int m, int n, double* a, int lda, int* p) { return LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, p); }
lapack_int getrf(int m, int n, c64* a, int lda, int* p) { return LAPACKE_cgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, p); }
lapack_int getrf(int m, int n, c128* a, int lda, int* p) { return LAPACKE_zgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, p); }

lapack_int getrs(char t, int n, int k, const float* a, int lda, const int* p, float* b, int ldb) {
  return LAPACKE_sgetrs_work(LAPACK_COL_MAJOR, t, n, k, a, lda, p, b, ldb);
}
lapack_int getrs(char t, int n, int k, const double* a, int lda, const int* p, double* b, int ldb) {
  return LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, t, n, k, a, lda, p, b, ldb);
}
lapack_int getrs(char t, int n, int k, const c64* a, int lda, const int* p, c64* b, int ldb) {
  return LAPACKE_cgetrs_work(LAPACK_COL_MAJOR, t, n, k, a, lda, p, b, ldb);
}
lapack_int getrs(char t, int n, int k, const c128* a, int lda, const int* p, c128* b, int ldb) {
  return LAPACKE_zgetrs_work(LAPACK_COL_MAJOR, t, n, k, a, lda, p, b, ldb);
}

lapack_int geqrf(int m, int n, float* a, int lda, float* tau, float* w, int lw) {
  return LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, w, lw);
}
lapack_int geqrf(int m, int n, double* a, int lda, double* tau, double* w, int lw) {
  return LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, w, lw);
}
lapack_int geqrf(int m, int n, c64* a, int lda, c64* tau, c64* w, int lw) {
  return LAPACKE_cgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, w, lw);
}
lapack_int geqrf(int m, int n, c128* a, int lda, c128* tau, c128* w, int lw) {
  return LAPACKE_zgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, w, lw);
}

lapack_int orgqr(int m, int n, int k, float* a, int lda, const float* tau, float* w, int lw) {
  return LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, w, lw);
}
lapack_int orgqr(int m, int n, int k, double* a, int lda, const double* tau, double* w, int lw) {
  return LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, w, lw);
}
lapack_int orgqr(int m, int n, int k, c64* a, int lda, const c64* tau, c64* w, int lw) {
  return LAPACKE_cungqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, w, lw);
}
lapack_int orgqr(int m, int n, int k, c128* a, int lda, const c128* tau, c128* w, int lw) {
  return LAPACKE_zungqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, w, lw);
}

// gesdd; `rwork` is unused for real types.
lapack_int gesdd(char jobz, int m, int n, float* a, int lda, float* s, float* u, int ldu, float* vt, int ldvt,
                 float* w, int lw, float*, int* iw) {
  return LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, w, lw, iw);
}
lapack_int gesdd(char jobz, int m, int n, double* a, int lda, double* s, double* u, int ldu, double* vt, int ldvt,
                 double* w, int lw, double*, int* iw) {
  return LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, w, lw, iw);
}
lapack_int gesdd(char jobz, int m, int n, c64* a, int lda, float* s, c64* u, int ldu, c64* vt, int ldvt, c64* w,
                 int lw, float* rw, int* iw) {
  return LAPACKE_cgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, w, lw, rw, iw);
}
lapack_int gesdd(char jobz, int m, int n, c128* a, int lda, double* s, c128* u, int ldu, c128* vt, int ldvt,
                 c128* w, int lw, double* rw, int* iw) {
  return LAPACKE_zgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, w, lw, rw, iw);
}

void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_DIAG diag, int m, int n, const float* a, int lda, float* b, int ldb) {
  cblas_strsm(CblasColMajor, side, uplo, CblasNoTrans, diag, m, n, 1.0f, a, lda, b, ldb);
}
void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_DIAG diag, int m, int n, const double* a, int lda, double* b, int ldb) {
  cblas_dtrsm(CblasColMajor, side, uplo, CblasNoTrans, diag, m, n, 1.0, a, lda, b, ldb);
}
void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_DIAG diag, int m, int n, const c64* a, int lda, c64* b, int ldb) {
  const c64 one(1);
  cblas_ctrsm(CblasColMajor, side, uplo, CblasNoTrans, diag, m, n, &one, a, lda, b, ldb);
}
void trsm(CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_DIAG diag, int m, int n, const c128* a, int lda, c128* b, int ldb) {
  const c128 one(1);
  cblas_ztrsm(CblasColMajor, side, uplo, CblasNoTrans, diag, m, n, &one, a, lda, b, ldb);
}

/// The optimal LAPACK workspace size a query (lwork = -1) returned in work[0].
template <class T> int workspace_size(T query) {
  return std::max(1, static_cast<int>(std::real(query)));
}

/// Calls f with the LAPACK element type of dtype (f32, f64, complex64, complex128).
template <class F> void dispatch_lapack(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat32: return f(type_tag<float>{});
    case kFloat64: return f(type_tag<double>{});
    case kComplex64: return f(type_tag<c64>{});
    case kComplex128: return f(type_tag<c128>{});
    default: fail(op, "dtype: expected float32, float64, complex64 or complex128, got {}", name(dtype));
  }
}

int to_int(int64_t v) { return static_cast<int>(v); }

}  // namespace

void lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info) {
  const Batch a = column_major(LU, "lu_factor");
  const int64_t batch = LU.size(0), m = LU.size(1), n = LU.size(2);
  int32_t* piv = pivots.data_ptr<int32_t>();
  int32_t* inf = info.data_ptr<int32_t>();
  const int64_t piv_stride = pivots.stride(0), info_stride = info.stride(0);
  std::vector<lapack_int> status(static_cast<size_t>(batch));
  dispatch_lapack(LU.dtype(), "lu_factor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_matrix(batch, m, n, [&](int64_t i) {
      const lapack_int r = getrf(to_int(m), to_int(n), a.at<T>(i), to_int(a.ld), piv + i * piv_stride);
      inf[i * info_stride] = r > 0 ? r : 0;
      status[i] = std::min<lapack_int>(r, 0);
    });
  });
  check_lapack_args("getrf", status);
}

void lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate) {
  const Batch a = column_major(LU, "lu_solve"), x = column_major(X, "lu_solve");
  const int64_t batch = X.size(0), n = X.size(1), k = X.size(2);
  const int32_t* piv = pivots.data_ptr<int32_t>();
  const int64_t piv_stride = pivots.stride(0);
  std::vector<lapack_int> status(static_cast<size_t>(batch));
  dispatch_lapack(LU.dtype(), "lu_solve", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // conj(A) X = B is A conj(X) = conj(B): conjugate around an untransposed solve.
    const bool conj_around = conjugate && !transpose && is_complex_v<T>;
    const char trans = !transpose ? 'N' : (conjugate && is_complex_v<T>) ? 'C' : 'T';
    for_each_matrix(batch, n, std::max(n, k), [&](int64_t i) {
      T* xb = x.at<T>(i);
      auto conj_x = [&] {
        if constexpr (is_complex_v<T>) {
          for (int64_t c = 0; c < k; ++c)
            for (int64_t r = 0; r < n; ++r) xb[r + c * x.ld] = std::conj(xb[r + c * x.ld]);
        }
      };
      if (conj_around) conj_x();
      status[i] = getrs(trans, to_int(n), to_int(k), a.at<T>(i), to_int(a.ld), piv + i * piv_stride, xb, to_int(x.ld));
      if (conj_around) conj_x();
    });
  });
  check_lapack_args("getrs", status);
}

void inv(const Tensor& A, const Tensor& X, const Tensor& info) {
  const Batch x = column_major(X, "inv");
  const int64_t batch = A.size(0), n = A.size(1);
  const int64_t as0 = A.stride(0), as1 = A.stride(1), as2 = A.stride(2);
  int32_t* inf = info.data_ptr<int32_t>();
  const int64_t info_stride = info.stride(0);
  std::vector<lapack_int> status(static_cast<size_t>(batch));
  dispatch_lapack(A.dtype(), "inv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = A.data_ptr<T>();
    for_each_matrix(batch, n, n, [&](int64_t i) {
      // getrf on a column-major copy, then getrs with the identity: LAPACK's getri-free inverse.
      std::vector<T> lu(static_cast<size_t>(n * n));
      std::vector<lapack_int> piv(static_cast<size_t>(n));
      for (int64_t c = 0; c < n; ++c)
        for (int64_t r = 0; r < n; ++r) lu[static_cast<size_t>(r + c * n)] = a[i * as0 + r * as1 + c * as2];
      const lapack_int r = getrf(to_int(n), to_int(n), lu.data(), to_int(n), piv.data());
      inf[i * info_stride] = r > 0 ? r : 0;
      T* xi = x.at<T>(i);
      for (int64_t c = 0; c < n; ++c)
        for (int64_t row = 0; row < n; ++row) xi[row + c * x.ld] = T(row == c ? 1 : 0);
      const lapack_int s = getrs('N', to_int(n), to_int(n), lu.data(), to_int(n), piv.data(), xi, to_int(x.ld));
      status[i] = r < 0 ? r : s;
    });
  });
  check_lapack_args("getrf/getrs", status);
}

void lu_det(const Tensor& LU, const Tensor& pivots, const Tensor& det) {
  const Batch a = column_major(LU, "det");
  const int64_t batch = LU.size(0), n = LU.size(1);
  const int32_t* piv = pivots.data_ptr<int32_t>();
  const int64_t piv_stride = pivots.stride(0);
  dispatch_lapack(LU.dtype(), "det", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = det.data_ptr<T>();
    for_each_matrix(batch, n, n, [&](int64_t i) {
      const T* lu = a.at<T>(i);
      T product(1);
      for (int64_t j = 0; j < n; ++j) {
        product *= lu[j + j * a.ld];
        if (piv[i * piv_stride + j] != j + 1) product = -product;
      }
      out[i * det.stride(0)] = product;
    });
  });
}

void lu_slogdet(const Tensor& LU, const Tensor& pivots, const Tensor& sign, const Tensor& logabsdet) {
  const Batch a = column_major(LU, "slogdet");
  const int64_t batch = LU.size(0), n = LU.size(1);
  const int32_t* piv = pivots.data_ptr<int32_t>();
  const int64_t piv_stride = pivots.stride(0);
  dispatch_lapack(LU.dtype(), "slogdet", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = real_of<T>;
    T* s = sign.data_ptr<T>();
    R* l = logabsdet.data_ptr<R>();
    for_each_matrix(batch, n, n, [&](int64_t i) {
      const T* lu = a.at<T>(i);
      T phase(1);
      R log_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const T d = lu[j + j * a.ld];
        const R mag = std::abs(d);
        phase *= mag == 0 ? T(0) : d / mag;  // a zero pivot makes the sign 0 and the log -inf
        log_sum += std::log(mag);
        if (piv[i * piv_stride + j] != j + 1) phase = -phase;
      }
      s[i * sign.stride(0)] = phase;
      l[i * logabsdet.stride(0)] = log_sum;
    });
  });
}

void triangular_solve(const Tensor& A, const Tensor& X, bool upper, bool left, bool unitriangular) {
  const Batch a = column_major(A, "solve_triangular"), x = column_major(X, "solve_triangular");
  const int64_t batch = X.size(0), rows = X.size(1), cols = X.size(2), n = A.size(1);
  dispatch_lapack(A.dtype(), "solve_triangular", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_matrix(batch, n, std::max(rows, cols), [&](int64_t i) {
      trsm(left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, unitriangular ? CblasUnit : CblasNonUnit,
           to_int(rows), to_int(cols), a.at<T>(i), to_int(a.ld), x.at<T>(i), to_int(x.ld));
    });
  });
}

void qr(const Tensor& A, const Tensor& Q, const Tensor& R) {
  const Batch a = column_major(A, "qr");
  const int64_t batch = A.size(0), m = A.size(1), n = A.size(2), k = std::min(m, n);
  const bool want_q = Q.defined();
  const Batch q = want_q ? column_major(Q, "qr") : Batch{};
  const int64_t q_cols = want_q ? Q.size(2) : 0, r_rows = R.size(1);
  std::vector<lapack_int> status(static_cast<size_t>(batch));
  dispatch_lapack(A.dtype(), "qr", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T query;
    geqrf(to_int(m), to_int(n), nullptr, to_int(a.ld), nullptr, &query, -1);
    int lwork = workspace_size(query);
    if (want_q) {
      orgqr(to_int(m), to_int(q_cols), to_int(k), nullptr, to_int(q.ld), nullptr, &query, -1);
      lwork = std::max(lwork, workspace_size(query));
    }
    T* r_base = R.data_ptr<T>();
    const int64_t rs0 = R.stride(0), rs1 = R.stride(1), rs2 = R.stride(2);
    for_each_matrix(batch, m, n, [&](int64_t i) {
      std::vector<T> tau(static_cast<size_t>(k)), work(static_cast<size_t>(lwork));
      T* ai = a.at<T>(i);
      lapack_int r = geqrf(to_int(m), to_int(n), ai, to_int(a.ld), tau.data(), work.data(), lwork);
      T* ri = r_base + i * rs0;
      for (int64_t c = 0; c < n; ++c)
        for (int64_t row = 0; row < r_rows; ++row) ri[row * rs1 + c * rs2] = row <= c ? ai[row + c * a.ld] : T(0);
      if (want_q && r == 0) {
        // Q starts as the k reflectors (orgqr sets any further columns itself), so the reduced Q
        // needs only m x k memory.
        T* qi = q.at<T>(i);
        for (int64_t c = 0; c < k; ++c)
          for (int64_t row = 0; row < m; ++row) qi[row + c * q.ld] = ai[row + c * a.ld];
        r = orgqr(to_int(m), to_int(q_cols), to_int(k), qi, to_int(q.ld), tau.data(), work.data(), lwork);
      }
      status[i] = r;
    });
  });
  check_lapack_args("geqrf/orgqr", status);
}

void svd(const Tensor& A, const Tensor& U, const Tensor& S, const Tensor& Vh) {
  const Batch a = column_major(A, "svd");
  const int64_t batch = A.size(0), m = A.size(1), n = A.size(2), k = std::min(m, n), mx = std::max(m, n);
  const bool want_uv = U.defined();
  const Batch u = want_uv ? column_major(U, "svd") : Batch{}, vh = want_uv ? column_major(Vh, "svd") : Batch{};
  // U [m, m] and Vh [n, n]: all singular vectors; U [m, k] and Vh [k, n]: the reduced ones.
  const char jobz = !want_uv ? 'N' : (U.size(2) == m && Vh.size(1) == n) ? 'A' : 'S';
  std::vector<lapack_int> status(static_cast<size_t>(batch));
  dispatch_lapack(A.dtype(), "svd", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Real = real_of<T>;
    const int64_t lrwork = !is_complex_v<T> ? 1
                           : jobz == 'N'     ? 7 * k
                                             : std::max(5 * k * k + 5 * k, 2 * mx * k + 2 * k * k + k);
    std::vector<int> iwork_query(static_cast<size_t>(8 * k));
    T query;
    Real rwork_query = 0;
    gesdd(jobz, to_int(m), to_int(n), nullptr, to_int(a.ld), nullptr, nullptr, to_int(want_uv ? u.ld : 1), nullptr,
          to_int(want_uv ? vh.ld : 1), &query, -1, &rwork_query, iwork_query.data());
    const int lwork = workspace_size(query);
    Real* s_base = S.data_ptr<Real>();
    for_each_matrix(batch, m, n, [&](int64_t i) {
      std::vector<T> work(static_cast<size_t>(lwork));
      std::vector<Real> rwork(static_cast<size_t>(lrwork));
      std::vector<int> iwork(static_cast<size_t>(8 * k));
      status[i] = gesdd(jobz, to_int(m), to_int(n), a.at<T>(i), to_int(a.ld), s_base + i * S.stride(0),
                        want_uv ? u.at<T>(i) : nullptr, to_int(want_uv ? u.ld : 1), want_uv ? vh.at<T>(i) : nullptr,
                        to_int(want_uv ? vh.ld : 1), work.data(), lwork, rwork.data(), iwork.data());
    });
  });
  for (int64_t i = 0; i < batch; ++i) {
    EMBER_CHECK(status[i] <= 0, "linalg.svd",
                "{}The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
                "repeated singular values (error code: {})",
                batch > 1 ? fmt::format("(Batch element {}): ", i) : "", status[i]);
  }
  check_lapack_args("gesdd", status);
}

}  // namespace ember::cpu
