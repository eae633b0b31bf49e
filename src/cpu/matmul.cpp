// CPU matrix products: BLAS (OpenBLAS cblas) for f32/f64/complex, f32 BLAS for the half and fp8
// types, exact wrapping loops for integers.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>

#include "backend.h"
#include "core/matrix_layout.h"
#include "cpu/loops.h"

namespace ember::cpu {
namespace {

// OpenBLAS runs a gemm on one thread below M*N*K = 4 * 65536 (GEMM_MULTITHREAD_THRESHOLD);
// below that the batch loop itself is spread over OpenMP threads, when the whole batch has
// enough work to pay for them.
constexpr int64_t kSingleThreadGemmWork = 4 * 65536;
constexpr int64_t kParallelBatchWork = 1 << 16;

/// How OpenBLAS reads a matrix in place (core/matrix_layout.h decides; this names its enum).
struct BlasLayout {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

std::optional<BlasLayout> blas_layout(const Tensor& x3) {
  const auto l = matrix_layout(x3);
  if (!l) return std::nullopt;
  return BlasLayout{l->transposed ? CblasTrans : CblasNoTrans, l->ld};
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, bool accumulate, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda, const double* b,
          int ldb, bool accumulate, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, accumulate ? 1.0 : 0.0, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const std::complex<float>* a, int lda,
          const std::complex<float>* b, int ldb, bool accumulate, std::complex<float>* c, int ldc) {
  const std::complex<float> alpha(1), beta(accumulate ? 1.0f : 0.0f);
  cblas_cgemm(CblasRowMajor, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const std::complex<double>* a, int lda,
          const std::complex<double>* b, int ldb, bool accumulate, std::complex<double>* c, int ldc) {
  const std::complex<double> alpha(1), beta(accumulate ? 1.0 : 0.0);
  cblas_zgemm(CblasRowMajor, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}

/// c[i] (+)= a[i] @ b[i] for a BLAS type T; a, b, c [B,M,K], [B,K,N], [B,M,N]. With `accumulate`
/// c already holds the bias. c must be writable in place by BLAS (checked by the caller).
template <class T> void blas_bmm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, bool accumulate) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a_in.size(2);
  EMBER_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "matmul",
              "matrix sizes within BLAS's 32-bit indices: expected M, N, K <= {}, got M={}, N={}, K={}", INT_MAX, m, n, k);
  const BlasLayout cl = *blas_layout(c);
  // Row-major C as it is, or a column-major C computed as C^T = B^T A^T.
  const bool transposed_out = cl.trans == CblasTrans;
  const Tensor a = blas_readable(transposed_out ? b_in.transpose(1, 2) : a_in);
  const Tensor b = blas_readable(transposed_out ? a_in.transpose(1, 2) : b_in);
  const int64_t rows = transposed_out ? n : m, cols = transposed_out ? m : n;
  const BlasLayout al = *blas_layout(a), bl = *blas_layout(b);
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* pc = static_cast<T*>(c.raw_data());
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = c.stride(0);
  auto one = [&](int64_t i) {
    gemm(al.trans, bl.trans, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), pa + i * sa,
         static_cast<int>(al.ld), pb + i * sb, static_cast<int>(bl.ld), accumulate, pc + i * sc, static_cast<int>(cl.ld));
  };
  if (batch > 1 && m * n * k < kSingleThreadGemmWork && batch * m * n * k >= kParallelBatchWork) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

/// Exact integer products: accumulate in uint64 (two's complement wraps like torch's int
/// arithmetic), store truncated to T.
template <class T> void integer_bmm(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  const T* pbias = bias ? static_cast<const T*>(bias->raw_data()) : nullptr;
  T* po = static_cast<T*>(out.raw_data());
  const int64_t as0 = a.stride(0), as1 = a.stride(1), as2 = a.stride(2);
  const int64_t bs0 = b.stride(0), bs1 = b.stride(1), bs2 = b.stride(2);
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2);
  const int64_t cs0 = bias ? bias->stride(0) : 0, cs1 = bias ? bias->stride(1) : 0, cs2 = bias ? bias->stride(2) : 0;
  const bool parallel = batch * m * n * k >= kParallelGrain && batch * m > 1;
#pragma omp parallel if (parallel)
  {
    std::vector<uint64_t> acc(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < batch * m; ++row) {
      const int64_t i = row / m, r = row % m;
      for (int64_t j = 0; j < n; ++j) {
        acc[j] = pbias ? static_cast<uint64_t>(pbias[i * cs0 + r * cs1 + j * cs2]) : 0;
      }
      for (int64_t p = 0; p < k; ++p) {
        const uint64_t av = static_cast<uint64_t>(pa[i * as0 + r * as1 + p * as2]);
        const T* brow = pb + i * bs0 + p * bs1;
        if (bs2 == 1) {
          for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<uint64_t>(brow[j]);
        } else {
          for (int64_t j = 0; j < n; ++j) acc[j] += av * static_cast<uint64_t>(brow[j * bs2]);
        }
      }
      for (int64_t j = 0; j < n; ++j) po[i * os0 + r * os1 + j * os2] = static_cast<T>(acc[j]);
    }
  }
}

void product(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("matmul", "dtype: expected a numeric type, got {}", name(out.dtype()));
    } else if constexpr (std::is_integral_v<T>) {
      integer_bmm<T>(a, b, bias, out);
    } else {
      // BLAS computes in T, or in float for the half and fp8 types; its C is out itself when
      // BLAS can write it in place, else a contiguous buffer copied out (rounding once).
      using C = compute_t<T>;
      const bool in_place = std::is_same_v<C, T> && blas_layout(out).has_value();
      const Tensor c = in_place ? out : empty(out.sizes(), dtype_of<C>());
      if (bias) copy(*bias, c);
      if constexpr (std::is_same_v<C, T>) {
        blas_bmm<T>(a, b, c, bias != nullptr);
      } else {
        blas_bmm<C>(converted(a, dtype_of<C>()), converted(b, dtype_of<C>()), c, bias != nullptr);
      }
      if (!in_place) copy(c, out);
    }
  });
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, const Tensor& out) { product(a, b, nullptr, out); }

void baddbmm(const Tensor& bias, const Tensor& a, const Tensor& b, const Tensor& out) { product(a, b, &bias, out); }

}  // namespace ember::cpu
