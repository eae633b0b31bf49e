// CUDA linear algebra on batches of column-major matrices, the same contract as src/cpu/linalg.cpp
// (LAPACK conventions: 1-based int32 pivots, info = first zero pivot or 0).
//
//   lu_factor         square n <= 16: register kernels (linalg_small.cu; one thread per matrix
//                     for n <= 4); m, n <= 64: one block per matrix in shared memory; larger:
//                     cuSOLVER getrf per matrix. All pivot by |re| + |im| with first-index ties,
//                     so pivots match LAPACK's. info stays on the device (no host synchronisation).
//   lu_solve          n <= 16: one thread per right-hand side (per matrix for n <= 4, k = 1);
//                     larger: cuSOLVER getrs (one matrix) or cuBLAS getrsBatched, after the
//                     pivots are checked on the device.
//   inv               n <= 16: Gauss-Jordan in registers, one launch; larger: LU + solve with I.
//   triangular_solve  n <= 64: one kernel, the triangle in shared memory, one thread per
//                     right-hand side (linalg_triangular.cu); larger: cuBLAS trsm
//                     (trsmBatched over pointer arrays for batches).
//   qr                cuSOLVER geqrf + orgqr/ungqr per matrix; Q starts as the k reflectors, so a
//                     reduced Q needs O(m k) memory.
//   svd               cuSOLVER gesvdjBatched (m, n <= 32) or gesvdj per matrix, like torch; null-space
//                     columns of U and V that lost orthogonality are replaced by an orthonormal
//                     completion. Convergence is checked with one host synchronisation, as torch does.
// One cuBLAS and one cuSOLVER handle per device and thread, bound to the current stream per call;
// workspaces come from the caching allocator (ember::empty on the device).
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <climits>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda/linalg_common.cuh"

namespace ember::cuda {
using namespace linalg_detail;
namespace {

constexpr int kThreads = 256;

// ---- library handles and status checks ---------------------------------------------------------
void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuda", "{} failed: {}", call, cublasGetStatusString(status));
}
void check_cusolver(cusolverStatus_t status, const char* call) {
  if (status != CUSOLVER_STATUS_SUCCESS) fail("cuda", "{} failed: cusolver status {}", call, static_cast<int>(status));
}

/// Handles live as long as the thread (destroying them at thread exit could outlive the CUDA
/// context at process exit).
cublasHandle_t blas_handle(int device) {
  thread_local std::vector<cublasHandle_t> handles;
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  cublasHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, current_raw_stream(device)), "cublasSetStream");
  return h;
}
cusolverDnHandle_t solver_handle(int device) {
  thread_local std::vector<cusolverDnHandle_t> handles;
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  cusolverDnHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) check_cusolver(cusolverDnCreate(&h), "cusolverDnCreate");
  check_cusolver(cusolverDnSetStream(h, current_raw_stream(device)), "cusolverDnSetStream");
  return h;
}

int to_int(int64_t v, const char* op, const char* what) {
  EMBER_CHECK(v <= INT_MAX, op, "{} within the 32-bit range of cuBLAS/cuSOLVER: expected <= {}, got {}", what, INT_MAX, v);
  return static_cast<int>(v);
}

/// Device scratch memory from the caching allocator (freed in stream order).
template <class T> T* scratch(Tensor& holder, int64_t count, Device device) {
  holder = empty({std::max<int64_t>(1, count) * static_cast<int64_t>(sizeof(T))}, kUInt8, device);
  return static_cast<T*>(holder.raw_data());
}

// ---- cuBLAS / cuSOLVER by element type -------------------------------------------------------
template <class T> struct Lib;
#define EMBER_LINALG_LIB(T, LT, P)                                                                              \
  template <> struct Lib<T> {                                                                                   \
    using type = LT;                                                                                            \
    static LT* p(T* x) { return reinterpret_cast<LT*>(x); }                                                    \
    static cusolverStatus_t getrf_size(cusolverDnHandle_t h, int m, int n, T* a, int lda, int* lw) {            \
      return cusolverDn##P##getrf_bufferSize(h, m, n, p(a), lda, lw);                                            \
    }                                                                                                           \
    static cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, T* a, int lda, T* w, int* piv, int* info) { \
      return cusolverDn##P##getrf(h, m, n, p(a), lda, p(w), piv, info);                                          \
    }                                                                                                           \
    static cusolverStatus_t getrs(cusolverDnHandle_t h, cublasOperation_t t, int n, int k, const T* a, int lda,  \
                                  const int* piv, T* b, int ldb, int* info) {                                   \
      return cusolverDn##P##getrs(h, t, n, k, reinterpret_cast<const LT*>(a), lda, piv, p(b), ldb, info);       \
    }                                                                                                           \
    static cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t t, int n, int k, T* const* a,       \
                                        int lda, const int* piv, T* const* b, int ldb, int* info, int batch) {  \
      return cublas##P##getrsBatched(h, t, n, k, reinterpret_cast<const LT* const*>(a), lda, piv,               \
                                     reinterpret_cast<LT* const*>(b), ldb, info, batch);                        \
    }                                                                                                           \
    static cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t s, cublasFillMode_t u, cublasDiagType_t d,    \
                               int m, int n, const T* alpha, const T* a, int lda, T* b, int ldb) {              \
      return cublas##P##trsm(h, s, u, CUBLAS_OP_N, d, m, n, reinterpret_cast<const LT*>(alpha),                \
                             reinterpret_cast<const LT*>(a), lda, p(b), ldb);                                   \
    }                                                                                                           \
    static cublasStatus_t trsm_batched(cublasHandle_t h, cublasSideMode_t s, cublasFillMode_t u,                \
                                       cublasDiagType_t d, int m, int n, const T* alpha, T* const* a, int lda,  \
                                       T* const* b, int ldb, int batch) {                                       \
      return cublas##P##trsmBatched(h, s, u, CUBLAS_OP_N, d, m, n, reinterpret_cast<const LT*>(alpha),         \
                                    reinterpret_cast<const LT* const*>(a), lda, reinterpret_cast<LT* const*>(b), \
                                    ldb, batch);                                                                \
    }                                                                                                           \
    static cusolverStatus_t geqrf_size(cusolverDnHandle_t h, int m, int n, T* a, int lda, int* lw) {            \
      return cusolverDn##P##geqrf_bufferSize(h, m, n, p(a), lda, lw);                                            \
    }                                                                                                           \
    static cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, T* a, int lda, T* tau, T* w, int lw,      \
                                  int* info) {                                                                  \
      return cusolverDn##P##geqrf(h, m, n, p(a), lda, p(tau), p(w), lw, info);                                   \
    }                                                                                                           \
    static cusolverStatus_t gesvdj_size(cusolverDnHandle_t h, cusolverEigMode_t jobz, int econ, int m, int n,   \
                                        T* a, int lda, real_t<T>* s, T* u, int ldu, T* v, int ldv, int* lw,    \
                                        gesvdjInfo_t params) {                                                  \
      return cusolverDn##P##gesvdj_bufferSize(h, jobz, econ, m, n, p(a), lda, s, p(u), ldu, p(v), ldv, lw,      \
                                               params);                                                         \
    }                                                                                                           \
    static cusolverStatus_t gesvdj(cusolverDnHandle_t h, cusolverEigMode_t jobz, int econ, int m, int n, T* a,  \
                                   int lda, real_t<T>* s, T* u, int ldu, T* v, int ldv, T* w, int lw, int* info, \
                                   gesvdjInfo_t params) {                                                       \
      return cusolverDn##P##gesvdj(h, jobz, econ, m, n, p(a), lda, s, p(u), ldu, p(v), ldv, p(w), lw, info,      \
                                    params);                                                                    \
    }                                                                                                           \
    static cusolverStatus_t gesvdj_batched_size(cusolverDnHandle_t h, cusolverEigMode_t jobz, int m, int n,     \
                                                T* a, int lda, real_t<T>* s, T* u, int ldu, T* v, int ldv,      \
                                                int* lw, gesvdjInfo_t params, int batch) {                      \
      return cusolverDn##P##gesvdjBatched_bufferSize(h, jobz, m, n, p(a), lda, s, p(u), ldu, p(v), ldv, lw,     \
                                                      params, batch);                                           \
    }                                                                                                           \
    static cusolverStatus_t gesvdj_batched(cusolverDnHandle_t h, cusolverEigMode_t jobz, int m, int n, T* a,    \
                                           int lda, real_t<T>* s, T* u, int ldu, T* v, int ldv, T* w, int lw,   \
                                           int* info, gesvdjInfo_t params, int batch) {                         \
      return cusolverDn##P##gesvdjBatched(h, jobz, m, n, p(a), lda, s, p(u), ldu, p(v), ldv, p(w), lw, info,    \
                                          params, batch);                                                       \
    }                                                                                                           \
  };
EMBER_LINALG_LIB(float, float, S)
EMBER_LINALG_LIB(double, double, D)
EMBER_LINALG_LIB(Cx<float>, cuComplex, C)
EMBER_LINALG_LIB(Cx<double>, cuDoubleComplex, Z)
#undef EMBER_LINALG_LIB

cusolverStatus_t orgqr_size(cusolverDnHandle_t h, int m, int n, int k, float* a, int lda, float* tau, int* lw) {
  return cusolverDnSorgqr_bufferSize(h, m, n, k, a, lda, tau, lw);
}
cusolverStatus_t orgqr_size(cusolverDnHandle_t h, int m, int n, int k, double* a, int lda, double* tau, int* lw) {
  return cusolverDnDorgqr_bufferSize(h, m, n, k, a, lda, tau, lw);
}
cusolverStatus_t orgqr_size(cusolverDnHandle_t h, int m, int n, int k, Cx<float>* a, int lda, Cx<float>* tau, int* lw) {
  return cusolverDnCungqr_bufferSize(h, m, n, k, Lib<Cx<float>>::p(a), lda, Lib<Cx<float>>::p(tau), lw);
}
cusolverStatus_t orgqr_size(cusolverDnHandle_t h, int m, int n, int k, Cx<double>* a, int lda, Cx<double>* tau, int* lw) {
  return cusolverDnZungqr_bufferSize(h, m, n, k, Lib<Cx<double>>::p(a), lda, Lib<Cx<double>>::p(tau), lw);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, float* a, int lda, float* tau, float* w, int lw, int* info) {
  return cusolverDnSorgqr(h, m, n, k, a, lda, tau, w, lw, info);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, double* a, int lda, double* tau, double* w, int lw,
                       int* info) {
  return cusolverDnDorgqr(h, m, n, k, a, lda, tau, w, lw, info);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, Cx<float>* a, int lda, Cx<float>* tau, Cx<float>* w,
                       int lw, int* info) {
  using L = Lib<Cx<float>>;
  return cusolverDnCungqr(h, m, n, k, L::p(a), lda, L::p(tau), L::p(w), lw, info);
}
cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, Cx<double>* a, int lda, Cx<double>* tau,
                       Cx<double>* w, int lw, int* info) {
  using L = Lib<Cx<double>>;
  return cusolverDnZungqr(h, m, n, k, L::p(a), lda, L::p(tau), L::p(w), lw, info);
}

// ---- element kernels ----------------------------------------------------------------------------
__global__ void fill_pointers_kernel(uint64_t* out, uint64_t base, int64_t stride_bytes, int64_t batch) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < batch) out[i] = base + static_cast<uint64_t>(i * stride_bytes);
}

/// Device array of the batch's matrix addresses (for cuBLAS's pointer-array batched calls).
template <class T> T** matrix_pointers(Tensor& holder, const Tensor& x, cudaStream_t stream) {
  const int64_t batch = x.size(0);
  uint64_t* out = scratch<uint64_t>(holder, batch, x.device());
  fill_pointers_kernel<<<blocks_for(batch, kThreads), kThreads, 0, stream>>>(
      out, reinterpret_cast<uint64_t>(x.raw_data()), x.stride(0) * static_cast<int64_t>(sizeof(T)), batch);
  EMBER_CUDA_CHECK_LAUNCH();
  return reinterpret_cast<T**>(out);
}

enum class Fill { Copy, Conj, Adjoint, Upper, Reflectors, Identity };

/// dst(b, r, c) for r < rows, c < cols: src(b, r, c) (Copy), its conjugate (Conj), conj(src(b, c, r))
/// (Adjoint), src above and on the diagonal and 0 below (Upper), src in the first k columns and
/// the identity after them (Reflectors), or the identity (Identity).
template <class T>
__global__ void fill_kernel(Mat<const T> src, Mat<T> dst, int64_t batch, int64_t rows, int64_t cols, Fill kind, int64_t k) {
  const int64_t total = batch * rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / (rows * cols), rem = i % (rows * cols), r = rem % rows, c = rem / rows;
    T v;
    switch (kind) {
      case Fill::Copy: v = src.at(b, r, c); break;
      case Fill::Conj: v = conj_of(src.at(b, r, c)); break;
      case Fill::Adjoint: v = conj_of(src.at(b, c, r)); break;
      case Fill::Upper: v = r <= c ? src.at(b, r, c) : from_real<T>(0); break;
      case Fill::Reflectors: v = c < k ? src.at(b, r, c) : from_real<T>(r == c ? 1 : 0); break;
      default: v = from_real<T>(r == c ? 1 : 0); break;
    }
    dst.at(b, r, c) = v;
  }
}

template <class T> void fill_matrices(const Tensor& src, const Tensor& dst, Fill kind, int64_t k, cudaStream_t stream) {
  const int64_t batch = dst.size(0), rows = dst.size(1), cols = dst.size(2);
  if (batch * rows * cols == 0) return;
  const Mat<T> s = src.defined() ? mat_of<T>(src) : mat_of<T>(dst);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(batch * rows * cols, kThreads), 65536));
  fill_kernel<T><<<blocks, kThreads, 0, stream>>>(Mat<const T>{s.base, s.batch, s.row, s.col}, mat_of<T>(dst), batch,
                                                  rows, cols, kind, k);
  EMBER_CUDA_CHECK_LAUNCH();
}

/// A copy of the pivots [B, n] as a contiguous batch, out-of-range entries reported in the
/// device error word and replaced by "no interchange" so the libraries never index outside.
__global__ void checked_pivots_kernel(const int* piv, int64_t piv_batch, int64_t piv_step, int* out, int64_t batch,
                                      int n, DeviceError* error) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * n) return;
  const int64_t b = i / n;
  const int j = static_cast<int>(i % n);
  const int p = piv[b * piv_batch + j * piv_step];
  if (p < 1 || p > n) report_bad_pivot(error, p, n);
  out[i] = p < 1 || p > n ? j + 1 : p;
}

/// det (DET) or sign and log|det| from an LU factorization, one thread per matrix.
template <class T, bool DET>
__global__ void determinant_kernel(Mat<const T> lu, int64_t n, const int* piv, int64_t piv_batch, int64_t piv_step,
                                   T* out, int64_t out_step, real_t<T>* logabs, int64_t log_step, int64_t batch) {
  using R = real_t<T>;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  T acc = from_real<T>(1);
  R log_sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T d = lu.at(b, j, j);
    if constexpr (DET) {
      acc = acc * d;
    } else {
      const R mag = abs_of(d);
      T unit;
      if constexpr (is_cx<T>) {
        unit = mag == 0 ? T{0, 0} : T{d.re / mag, d.im / mag};
      } else {
        unit = mag == 0 ? R(0) : d / mag;
      }
      acc = acc * unit;  // a zero pivot makes the sign 0 and the log -inf
      log_sum += log(mag);
    }
    if (piv[b * piv_batch + j * piv_step] != j + 1) acc = -acc;
  }
  out[b * out_step] = acc;
  if constexpr (!DET) logabs[b * log_step] = log_sum;
}

// ---- orthonormal completion of singular vectors ---------------------------------------------------
template <class R> __device__ R block_sum(R v, R* shared) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  R total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += shared[w];
  return total;
}
template <class R> __device__ R block_max(R v, R* shared) {
  for (int off = 16; off > 0; off /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  R m = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) m = fmax(m, shared[w]);
  return m;
}

/// One block per matrix: u [rows, cols] holds singular vectors for S (descending, k values).
/// Columns whose singular value is at the noise floor (<= S[0] sqrt(eps)) and that lost
/// orthogonality (|u_j^H u_l| or |1 - |u_j|^2| above sqrt(eps)) are, from the first such column
/// on, rebuilt by Gram-Schmidt from the unit vector least covered by the columns before (like
/// gesdd's completion), so U stays orthonormal for rank-deficient input. work: rows + cols
/// elements and rows reals per matrix.
template <class T>
__global__ void __launch_bounds__(kThreads) complete_orthonormal_kernel(Mat<T> u, int64_t rows, int64_t cols,
                                                                        const real_t<T>* s, int64_t s_batch, int64_t k,
                                                                        T* work, real_t<T>* coverage) {
  using R = real_t<T>;
  __shared__ R reduce[kThreads / 32];
  __shared__ R best_value[kThreads];
  __shared__ int64_t best_index[kThreads];
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  const R eps = std::numeric_limits<R>::epsilon(), tol = sqrt(eps);
  const R s0 = s[b * s_batch];
  T* v = work + b * (rows + cols);
  T* coef = v + rows;
  R* cover = coverage + b * rows;

  int64_t first_bad = cols;
  for (int64_t j = 0; j < k && first_bad == cols; ++j) {
    if (!(s[b * s_batch + j] <= s0 * tol)) continue;  // NaN counts as suspect
    R err = 0;
    for (int64_t l = tid; l <= j; l += blockDim.x) {
      T dot = from_real<T>(0);
      for (int64_t i = 0; i < rows; ++i) dot = dot + conj_of(u.at(b, i, l)) * u.at(b, i, j);
      const R e = l == j ? abs_of(dot - from_real<T>(1)) : abs_of(dot);
      err = e == e ? fmax(err, e) : R(1);
    }
    if (!(block_max(err, reduce) <= tol)) first_bad = j;
  }
  if (first_bad == cols) return;

  for (int64_t i = tid; i < rows; i += blockDim.x) {
    R c = 0;
    for (int64_t l = 0; l < first_bad; ++l) c += abs2(u.at(b, i, l));
    cover[i] = c;
  }
  __syncthreads();
  for (int64_t j = first_bad; j < cols; ++j) {
    // The unit vector e_cand least covered by columns 0..j-1 keeps |residual|^2 >= 1 - j/rows.
    R bv = std::numeric_limits<R>::infinity();
    int64_t bi = rows;
    for (int64_t i = tid; i < rows; i += blockDim.x) {
      if (cover[i] < bv) {
        bv = cover[i];
        bi = i;
      }
    }
    best_value[tid] = bv;
    best_index[tid] = bi;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (tid < stride) {
        const R ov = best_value[tid + stride];
        const int64_t oi = best_index[tid + stride];
        if (ov < best_value[tid] || (ov == best_value[tid] && oi < best_index[tid])) {
          best_value[tid] = ov;
          best_index[tid] = oi;
        }
      }
      __syncthreads();
    }
    const int64_t cand = best_index[0];
    __syncthreads();
    // v = e_cand - U_<j U_<j^H e_cand, then once more against U_<j for stability.
    for (int64_t i = tid; i < rows; i += blockDim.x) {
      T x = from_real<T>(i == cand ? 1 : 0);
      for (int64_t l = 0; l < j; ++l) x = x - u.at(b, i, l) * conj_of(u.at(b, cand, l));
      v[i] = x;
    }
    __syncthreads();
    for (int64_t l = tid; l < j; l += blockDim.x) {
      T dot = from_real<T>(0);
      for (int64_t i = 0; i < rows; ++i) dot = dot + conj_of(u.at(b, i, l)) * v[i];
      coef[l] = dot;
    }
    __syncthreads();
    R norm2 = 0;
    for (int64_t i = tid; i < rows; i += blockDim.x) {
      T x = v[i];
      for (int64_t l = 0; l < j; ++l) x = x - u.at(b, i, l) * coef[l];
      v[i] = x;
      norm2 += abs2(x);
    }
    const R scale = R(1) / sqrt(block_sum(norm2, reduce));
    for (int64_t i = tid; i < rows; i += blockDim.x) {
      const T x = v[i] * scale;
      u.at(b, i, j) = x;
      cover[i] += abs2(x);
    }
    __syncthreads();
  }
}

template <class T>
void complete_orthonormal(const Tensor& u, const Tensor& S, int64_t k, cudaStream_t stream) {
  using R = real_t<T>;
  const int64_t batch = u.size(0), rows = u.size(1), cols = u.size(2);
  if (batch == 0 || rows == 0 || cols == 0) return;
  Tensor work_holder, cover_holder;
  T* work = scratch<T>(work_holder, batch * (rows + cols), u.device());
  R* cover = scratch<R>(cover_holder, batch * rows, u.device());
  complete_orthonormal_kernel<T><<<static_cast<unsigned>(batch), kThreads, 0, stream>>>(
      mat_of<T>(u), rows, cols, S.data_ptr<R>(), S.stride(0), k, work, cover);
  EMBER_CUDA_CHECK_LAUNCH();
}

/// A column-major [B, rows, cols] work tensor on `device`.
Tensor column_major_empty(int64_t batch, int64_t rows, int64_t cols, DType dtype, Device device) {
  return empty({batch, cols, rows}, dtype, device).transpose(1, 2);
}

template <class T> T one() { return from_real<T>(1); }

// ---- large-matrix paths ----------------------------------------------------------------------------
template <class T> void solver_lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info) {
  const int64_t batch = LU.size(0);
  const int m = to_int(LU.size(1), "linalg.lu_factor", "rows"), n = to_int(LU.size(2), "linalg.lu_factor", "columns");
  const int lda = to_int(column_major_ld(LU, "lu_factor"), "linalg.lu_factor", "leading dimension");
  const int device = LU.device().index;
  cusolverDnHandle_t h = solver_handle(device);
  T* a = static_cast<T*>(LU.raw_data());
  int lwork = 0;
  check_cusolver(Lib<T>::getrf_size(h, m, n, a, lda, &lwork), "cusolverDn getrf_bufferSize");
  Tensor ws_holder, piv_holder;
  T* ws = scratch<T>(ws_holder, lwork, LU.device());
  const int64_t k = std::min(m, n);
  // getrf writes k contiguous pivots; a strided pivots tensor gets them through a copy.
  const bool direct = pivots.stride(1) == 1 || k == 1;
  int* piv_tmp = direct ? nullptr : scratch<int>(piv_holder, k, LU.device());
  int* piv = pivots.data_ptr<int32_t>();
  int* inf = info.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    int* out = direct ? piv + b * pivots.stride(0) : piv_tmp;
    check_cusolver(Lib<T>::getrf(h, m, n, a + b * LU.stride(0), lda, ws, out, inf + b * info.stride(0)), "cusolverDn getrf");
    if (!direct) {
      EMBER_CUDA_CHECK(cudaMemcpy2DAsync(piv + b * pivots.stride(0), pivots.stride(1) * sizeof(int), piv_tmp, sizeof(int),
                                         sizeof(int), static_cast<size_t>(k), cudaMemcpyDeviceToDevice,
                                         current_raw_stream(device)));
    }
  }
}

template <class T>
void library_lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate) {
  const int64_t batch = X.size(0);
  const char* op = "linalg.lu_solve";
  const int n = to_int(X.size(1), op, "n"), k = to_int(X.size(2), op, "right-hand sides");
  const int lda = to_int(column_major_ld(LU, op), op, "leading dimension");
  const int ldx = to_int(column_major_ld(X, op), op, "leading dimension");
  const int device = X.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  Tensor piv_holder;
  int* piv = scratch<int>(piv_holder, batch * n, X.device());
  checked_pivots_kernel<<<blocks_for(batch * n, kThreads), kThreads, 0, stream>>>(
      pivots.data_ptr<int32_t>(), pivots.stride(0), pivots.stride(1), piv, batch, n, device_error_word(device));
  EMBER_CUDA_CHECK_LAUNCH();
  // conj(A) X = B is A conj(X) = conj(B): conjugate around an untransposed solve.
  const bool conj_around = is_cx<T> && conjugate && !transpose;
  if (conj_around) fill_matrices<T>(X, X, Fill::Conj, 0, stream);
  const cublasOperation_t trans = !transpose ? CUBLAS_OP_N : (conjugate && is_cx<T>) ? CUBLAS_OP_C : CUBLAS_OP_T;
  if (batch == 1) {
    Tensor info_holder;
    int* info = scratch<int>(info_holder, 1, X.device());
    check_cusolver(Lib<T>::getrs(solver_handle(device), trans, n, k, static_cast<const T*>(LU.raw_data()), lda, piv,
                                 static_cast<T*>(X.raw_data()), ldx, info),
                   "cusolverDn getrs");
  } else {
    Tensor a_ptrs, x_ptrs;
    T** a = matrix_pointers<T>(a_ptrs, LU, stream);
    T** x = matrix_pointers<T>(x_ptrs, X, stream);
    int host_info = 0;  // argument checks only, set on the host
    check_cublas(Lib<T>::getrs_batched(blas_handle(device), trans, n, k, a, lda, piv, x, ldx, &host_info,
                                       to_int(batch, op, "batch")),
                 "cublas getrsBatched");
    EMBER_CHECK(host_info == 0, op, "cuBLAS getrsBatched arguments: expected valid ones, got an error for argument {}",
                -host_info);
  }
  if (conj_around) fill_matrices<T>(X, X, Fill::Conj, 0, stream);
}

}  // namespace

// ---- backend functions ------------------------------------------------------------------------------
void lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info) {
  column_major_ld(LU, "lu_factor");
  const int64_t m = LU.size(1), n = LU.size(2);
  if (LU.size(0) == 0 || m == 0 || n == 0) return;
  DeviceScope scope(LU.device());
  if (m == n && n <= kSmallN) return small_lu_factor(LU, pivots, info);
  if (m <= kMediumN && n <= kMediumN) return medium_lu_factor(LU, pivots, info);
  dispatch_lapack(LU.dtype(), "lu_factor", [&](auto tag) { solver_lu_factor<typename decltype(tag)::type>(LU, pivots, info); });
}

void lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate) {
  column_major_ld(LU, "lu_solve");
  column_major_ld(X, "lu_solve");
  if (X.numel() == 0) return;
  DeviceScope scope(X.device());
  if (X.size(1) <= kSmallN) return small_lu_solve(LU, pivots, X, transpose, conjugate);
  dispatch_lapack(LU.dtype(), "lu_solve", [&](auto tag) {
    library_lu_solve<typename decltype(tag)::type>(LU, pivots, X, transpose, conjugate);
  });
}

void inv(const Tensor& A, const Tensor& X, const Tensor& info) {
  column_major_ld(X, "inv");
  const int64_t batch = A.size(0), n = A.size(1);
  if (batch == 0 || n == 0) return;
  DeviceScope scope(A.device());
  if (n <= kSmallN) return small_inv(A, X, info);
  const cudaStream_t stream = current_raw_stream(A.device().index);
  dispatch_lapack(A.dtype(), "inv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor lu = column_major_empty(batch, n, n, A.dtype(), A.device());
    fill_matrices<T>(A, lu, Fill::Copy, 0, stream);
    const Tensor pivots = empty({batch, n}, kInt32, A.device());
    lu_factor(lu, pivots, info);
    fill_matrices<T>(Tensor(), X, Fill::Identity, 0, stream);
    lu_solve(lu, pivots, X, false, false);
  });
}

void lu_det(const Tensor& LU, const Tensor& pivots, const Tensor& det) {
  const int64_t batch = LU.size(0), n = LU.size(1);
  if (batch == 0) return;
  DeviceScope scope(LU.device());
  const cudaStream_t stream = current_raw_stream(LU.device().index);
  dispatch_lapack(LU.dtype(), "det", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Mat<T> lu = mat_of<T>(LU);
    determinant_kernel<T, true><<<blocks_for(batch, kThreads), kThreads, 0, stream>>>(
        Mat<const T>{lu.base, lu.batch, lu.row, lu.col}, n, pivots.data_ptr<int32_t>(), pivots.stride(0),
        pivots.stride(1), static_cast<T*>(det.raw_data()), det.stride(0), nullptr, 0, batch);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void lu_slogdet(const Tensor& LU, const Tensor& pivots, const Tensor& sign, const Tensor& logabsdet) {
  const int64_t batch = LU.size(0), n = LU.size(1);
  if (batch == 0) return;
  DeviceScope scope(LU.device());
  const cudaStream_t stream = current_raw_stream(LU.device().index);
  dispatch_lapack(LU.dtype(), "slogdet", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Mat<T> lu = mat_of<T>(LU);
    determinant_kernel<T, false><<<blocks_for(batch, kThreads), kThreads, 0, stream>>>(
        Mat<const T>{lu.base, lu.batch, lu.row, lu.col}, n, pivots.data_ptr<int32_t>(), pivots.stride(0),
        pivots.stride(1), static_cast<T*>(sign.raw_data()), sign.stride(0), logabsdet.data_ptr<real_t<T>>(),
        logabsdet.stride(0), batch);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void triangular_solve(const Tensor& A, const Tensor& X, bool upper, bool left, bool unitriangular) {
  const char* op = "linalg.solve_triangular";
  const int64_t batch = X.size(0);
  if (X.numel() == 0) return;
  const int lda = to_int(column_major_ld(A, op), op, "leading dimension");
  const int ldx = to_int(column_major_ld(X, op), op, "leading dimension");
  const int rows = to_int(X.size(1), op, "rows"), cols = to_int(X.size(2), op, "columns");
  DeviceScope scope(X.device());
  if (A.size(1) <= kMediumN) return small_triangular_solve(A, X, upper, left, unitriangular);
  const int device = X.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  const cublasSideMode_t side = left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT;
  const cublasFillMode_t uplo = upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  const cublasDiagType_t diag = unitriangular ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  dispatch_lapack(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T alpha = one<T>();
    cublasHandle_t h = blas_handle(device);
    check_cublas(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
    if (batch == 1) {
      check_cublas(Lib<T>::trsm(h, side, uplo, diag, rows, cols, &alpha, static_cast<const T*>(A.raw_data()), lda,
                                static_cast<T*>(X.raw_data()), ldx),
                   "cublas trsm");
      return;
    }
    Tensor a_ptrs, x_ptrs;
    T** a = matrix_pointers<T>(a_ptrs, A, stream);
    T** x = matrix_pointers<T>(x_ptrs, X, stream);
    check_cublas(Lib<T>::trsm_batched(h, side, uplo, diag, rows, cols, &alpha, a, lda, x, ldx, to_int(batch, op, "batch")),
                 "cublas trsmBatched");
  });
}

void qr(const Tensor& A, const Tensor& Q, const Tensor& R) {
  const char* op = "linalg.qr";
  const int64_t batch = A.size(0), k = std::min(A.size(1), A.size(2));
  if (batch == 0 || k == 0) return;
  const int m = to_int(A.size(1), op, "rows"), n = to_int(A.size(2), op, "columns");
  const int lda = to_int(column_major_ld(A, op), op, "leading dimension");
  const bool want_q = Q.defined();
  const int ldq = want_q ? to_int(column_major_ld(Q, op), op, "leading dimension") : 1;
  const int q_cols = want_q ? to_int(Q.size(2), op, "columns") : 0;
  DeviceScope scope(A.device());
  const int device = A.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  dispatch_lapack(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cusolverDnHandle_t h = solver_handle(device);
    T* a = static_cast<T*>(A.raw_data());
    int lwork = 0;
    check_cusolver(Lib<T>::geqrf_size(h, m, n, a, lda, &lwork), "cusolverDn geqrf_bufferSize");
    Tensor tau_holder, ws_holder, info_holder;
    T* tau = scratch<T>(tau_holder, batch * k, A.device());
    if (want_q) {
      int lq = 0;
      check_cusolver(orgqr_size(h, m, q_cols, static_cast<int>(k), static_cast<T*>(Q.raw_data()), ldq, tau, &lq),
                     "cusolverDn orgqr_bufferSize");
      lwork = std::max(lwork, lq);
    }
    T* ws = scratch<T>(ws_holder, lwork, A.device());
    int* info = scratch<int>(info_holder, 1, A.device());  // argument errors only
    for (int64_t b = 0; b < batch; ++b) {
      check_cusolver(Lib<T>::geqrf(h, m, n, a + b * A.stride(0), lda, tau + b * k, ws, lwork, info), "cusolverDn geqrf");
    }
    fill_matrices<T>(A, R, Fill::Upper, 0, stream);
    if (!want_q) return;
    // Q starts as the reflectors (and identity columns past k for a complete Q): m x q memory.
    fill_matrices<T>(A, Q, Fill::Reflectors, k, stream);
    T* q = static_cast<T*>(Q.raw_data());
    for (int64_t b = 0; b < batch; ++b) {
      check_cusolver(orgqr(h, m, q_cols, static_cast<int>(k), q + b * Q.stride(0), ldq, tau + b * k, ws, lwork, info),
                     "cusolverDn orgqr");
    }
  });
}

void svd(const Tensor& A, const Tensor& U, const Tensor& S, const Tensor& Vh) {
  const char* op = "linalg.svd";
  const int64_t batch = A.size(0), m64 = A.size(1), n64 = A.size(2), k = std::min(m64, n64);
  if (batch == 0 || k == 0) return;
  const int m = to_int(m64, op, "rows"), n = to_int(n64, op, "columns");
  const int lda = to_int(column_major_ld(A, op), op, "leading dimension");
  const bool want_uv = U.defined();
  const bool full = want_uv && U.size(2) == m64 && Vh.size(1) == n64;
  const int64_t qu = want_uv ? U.size(2) : 0, qv = want_uv ? Vh.size(1) : 0;
  DeviceScope scope(A.device());
  const Device dev = A.device();
  const int device = dev.index;
  const cudaStream_t stream = current_raw_stream(device);
  const cusolverEigMode_t jobz = want_uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  // torch's choice: the batched Jacobi kernel for matrices up to 32 x 32, gesvdj per matrix above.
  const bool batched = m <= 32 && n <= 32;
  Tensor info_t = empty({batch}, kInt32, dev);
  dispatch_lapack(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Rl = real_t<T>;
    cusolverDnHandle_t h = solver_handle(device);
    gesvdjInfo_t params = nullptr;
    check_cusolver(cusolverDnCreateGesvdjInfo(&params), "cusolverDnCreateGesvdjInfo");
    struct ParamsGuard {
      gesvdjInfo_t p;
      ~ParamsGuard() { cusolverDnDestroyGesvdjInfo(p); }
    } params_guard{params};
    check_cusolver(cusolverDnXgesvdjSetSortEig(params, 1), "cusolverDnXgesvdjSetSortEig");
    // Work U [B, m, um] and V [B, n, vn] (V, not V^H: Vh is its adjoint).
    const int64_t um = batched ? m64 : (full ? m64 : k), vn = batched ? n64 : (full ? n64 : k);
    // cuSOLVER declares U and V with these sizes whatever jobz (gesvdj: ldu x um, ldv x vn;
    // gesvdjBatched: that per matrix) and may write them without vectors too: with one unused
    // column each (until session 10), svdvals of a wide complex matrix (3 x 20 x 45, c64) wrote
    // past them into the next allocation. Without vectors one matrix serves every gesvdj call.
    const int64_t work_batch = want_uv || batched ? batch : 1;
    const Tensor u_work = column_major_empty(work_batch, m64, um, A.dtype(), dev);
    const Tensor v_work = column_major_empty(work_batch, n64, vn, A.dtype(), dev);
    const bool s_direct = S.stride(1) == 1 && S.stride(0) == k;
    const Tensor s_work = s_direct ? S : empty({batch, k}, S.dtype(), dev);
    T* a = static_cast<T*>(A.raw_data());
    T* u = static_cast<T*>(u_work.raw_data());
    T* v = static_cast<T*>(v_work.raw_data());
    Rl* s = s_work.data_ptr<Rl>();
    const int ldu = m, ldv = n;
    int* info = info_t.data_ptr<int32_t>();
    Tensor ws_holder;
    if (batched) {
      // gesvdjBatched wants the matrices packed lda * n apart.
      const bool packed = A.stride(0) == static_cast<int64_t>(lda) * n;
      const Tensor a_work = packed ? A : column_major_empty(batch, m64, n64, A.dtype(), dev);
      if (!packed) fill_matrices<T>(A, a_work, Fill::Copy, 0, stream);
      T* aw = static_cast<T*>(a_work.raw_data());
      const int ldaw = packed ? lda : m;
      int lwork = 0;
      check_cusolver(Lib<T>::gesvdj_batched_size(h, jobz, m, n, aw, ldaw, s, u, ldu, v, ldv, &lwork, params,
                                                 to_int(batch, op, "batch")),
                     "cusolverDn gesvdjBatched_bufferSize");
      T* ws = scratch<T>(ws_holder, lwork, dev);
      check_cusolver(Lib<T>::gesvdj_batched(h, jobz, m, n, aw, ldaw, s, u, ldu, v, ldv, ws, lwork, info, params,
                                            to_int(batch, op, "batch")),
                     "cusolverDn gesvdjBatched");
    } else {
      const int econ = full ? 0 : 1;
      int lwork = 0;
      check_cusolver(Lib<T>::gesvdj_size(h, jobz, econ, m, n, a, lda, s, u, ldu, v, ldv, &lwork, params),
                     "cusolverDn gesvdj_bufferSize");
      T* ws = scratch<T>(ws_holder, lwork, dev);
      for (int64_t b = 0; b < batch; ++b) {
        check_cusolver(Lib<T>::gesvdj(h, jobz, econ, m, n, a + b * A.stride(0), lda, s + b * k,
                                      want_uv ? u + b * u_work.stride(0) : u, ldu, want_uv ? v + b * v_work.stride(0) : v,
                                      ldv, ws, lwork, info + b, params),
                       "cusolverDn gesvdj");
      }
    }
    if (!s_direct) fill_matrices<Rl>(s_work.unsqueeze(2), S.unsqueeze(2), Fill::Copy, 0, stream);
    if (want_uv) {
      complete_orthonormal<T>(u_work.narrow(2, 0, qu), s_work, k, stream);
      complete_orthonormal<T>(v_work.narrow(2, 0, qv), s_work, k, stream);
      fill_matrices<T>(u_work.narrow(2, 0, qu), U, Fill::Copy, 0, stream);
      fill_matrices<T>(v_work.narrow(2, 0, qv), Vh, Fill::Adjoint, 0, stream);
    }
  });
  // Convergence: one host synchronisation, as torch's svd does.
  const std::vector<int32_t> infos = info_t.to(Device::cpu()).to_vector<int32_t>();
  for (int64_t i = 0; i < batch; ++i) {
    EMBER_CHECK(infos[static_cast<size_t>(i)] == 0, op,
                "{}The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
                "repeated singular values (error code: {})",
                batch > 1 ? fmt::format("(Batch element {}): ", i) : "", infos[static_cast<size_t>(i)]);
  }
}

}  // namespace ember::cuda
