// lu_solve with a factored small matrix (n <= 16) on CUDA: the kernels and their launcher, one
// copy per element type in linalg_small_solve_float.cu and linalg_small_solve_double.cu (the
// entry point small_lu_solve is in linalg_small.cu). Solves with a factored small matrix use one
// thread per (matrix, right-hand side); a single right-hand side with n <= 4 and at most 128
// bytes per matrix uses one thread per matrix, LU and the column staged through shared memory
// like the one-thread-per-matrix factor kernel (linalg_small.cu describes that design and its
// history).
#pragma once
#include <algorithm>

#include "cuda/linalg_small.cuh"

namespace ember::cuda::linalg_detail {
namespace {

/// Applies LAPACK's row interchanges of one matrix to one column (stride `step`), forward
/// (P b) or backward (P^T b); an out-of-range pivot is reported and skipped.
template <class T, int N>
__device__ __forceinline__ void apply_pivots(T* col, int64_t step, const int* piv, int64_t piv_step, bool backward,
                                             DeviceError* error) {
  for (int t = 0; t < N; ++t) {
    const int i = backward ? N - 1 - t : t;
    const int p = piv[i * piv_step];
    if (p < 1 || p > N) {
      report_bad_pivot(error, p, N);
      continue;
    }
    if (p - 1 != i) {
      const T tmp = col[i * step];
      col[i * step] = col[(p - 1) * step];
      col[(p - 1) * step] = tmp;
    }
  }
}

/// Reads the N pivots of matrix b (one 16-byte load for a packed batch of 4x4 pivots).
template <int N>
__device__ __forceinline__ void load_pivots(int (&piv)[N], const int* pivots, int64_t b, int64_t piv_batch, int64_t piv_step,
                                            bool piv_packed) {
  if (N == 4 && piv_packed) {
    const int4 p = __ldg(reinterpret_cast<const int4*>(pivots) + b);
    const int all[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int i = 0; i < N; ++i) piv[i] = all[i];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) piv[i] = __ldg(pivots + b * piv_batch + i * piv_step);
  }
}

/// LAPACK's interchange of rows i and piv[i] - 1 of a register column, for a fixed i.
template <class T, int N> __device__ __forceinline__ void interchange(T (&v)[N], int i, int p, DeviceError* error) {
  if (p < 1 || p > N) {
    report_bad_pivot(error, p, N);
    return;
  }
#pragma unroll
  for (int q = 0; q < N; ++q) {
    if (q == i) continue;
    const bool hit = p - 1 == q;
    const T vi = v[i];
    v[i] = hit ? v[q] : vi;
    v[q] = hit ? vi : v[q];
  }
}

/// lu_solve with one right-hand side and a small LU: one thread per matrix, LU and the column
/// staged through shared memory like per_thread_lu_kernel.
template <class T, int N>
__global__ void __launch_bounds__(kPerThreadBlock) per_thread_lu_solve_kernel(Mat<const T> lu, Layout lu_layout,
                                                                              const int* pivots, int64_t piv_batch,
                                                                              int64_t piv_step, bool piv_packed, Mat<T> x,
                                                                              Layout x_layout, int64_t batch, bool transpose,
                                                                              bool conjugate, DeviceError* error) {
  __shared__ T lu_tile[N * N * kTileStride];
  __shared__ T x_tile[N * kTileStride];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPerThreadBlock;
  const int count = static_cast<int>(batch - first < kPerThreadBlock ? batch - first : kPerThreadBlock);
  const int m = threadIdx.x;
  int piv[N];
  if (m < count) load_pivots(piv, pivots, first + m, piv_batch, piv_step, piv_packed);
  load_tile<T, N, N>(lu_tile, lu, lu_layout, first, count);
  load_tile<T, N, 1>(x_tile, Mat<const T>{x.base, x.batch, x.row, x.col}, x_layout, first, count);
  __syncthreads();
  if (m < count) {
    T a[N][N], v[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
      v[r] = x_tile[r * kTileStride + m];
#pragma unroll
      for (int c = 0; c < N; ++c) a[r][c] = conj_if(lu_tile[(r + c * N) * kTileStride + m], conjugate);
    }
    if (!transpose) {
      // P A = L U: L y = P b (unit lower), then U x = y.
#pragma unroll
      for (int i = 0; i < N; ++i) interchange(v, i, piv[i], error);
#pragma unroll
      for (int i = 0; i < N; ++i)
#pragma unroll
        for (int r = i + 1; r < N; ++r) v[r] = v[r] - a[r][i] * v[i];
#pragma unroll
      for (int i = N - 1; i >= 0; --i) {
        v[i] = div_of(v[i], a[i][i]);
#pragma unroll
        for (int r = 0; r < i; ++r) v[r] = v[r] - a[r][i] * v[i];
      }
    } else {
      // A^T = U^T L^T P: U^T y = b, then L^T z = y, then x = P^T z.
#pragma unroll
      for (int i = 0; i < N; ++i) {
        T s = v[i];
#pragma unroll
        for (int r = 0; r < i; ++r) s = s - a[r][i] * v[r];
        v[i] = div_of(s, a[i][i]);
      }
#pragma unroll
      for (int i = N - 1; i >= 0; --i) {
        T s = v[i];
#pragma unroll
        for (int r = i + 1; r < N; ++r) s = s - a[r][i] * v[r];
        v[i] = s;
      }
#pragma unroll
      for (int i = N - 1; i >= 0; --i) interchange(v, i, piv[i], error);
    }
#pragma unroll
    for (int r = 0; r < N; ++r) x_tile[r * kTileStride + m] = v[r];
  }
  __syncthreads();
  store_tile<T, N, 1>(x_tile, x, x_layout, first, count);
}

/// One thread per (matrix, right-hand side). STAGED: LU and the block's columns of X go through
/// shared memory (coalesced); otherwise they are read in place.
template <class T, int N, bool STAGED>
__global__ void __launch_bounds__(128) small_lu_solve_kernel(Mat<const T> lu, const int* pivots, int64_t piv_batch,
                                                             int64_t piv_step, Mat<T> x, int64_t batch, int64_t k, int kc,
                                                             int mpb, bool transpose, bool conjugate, DeviceError* error) {
  constexpr int S = padded<N>(), NN = N * N;
  extern __shared__ __align__(16) unsigned char smem[];
  T* lu_tile = reinterpret_cast<T*>(smem);
  const int sx = (N * kc) | 1;
  T* x_tile = lu_tile + mpb * S;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * mpb;
  const int m = threadIdx.x / kc, col = threadIdx.x % kc;
  const int64_t b = first + m;
  if constexpr (STAGED) {
    for (int e = threadIdx.x; e < mpb * NN; e += blockDim.x) {
      const int64_t bb = first + e / NN;
      const int idx = e % NN;
      if (bb < batch) lu_tile[(e / NN) * S + idx] = lu.at(bb, idx % N, idx / N);
    }
  }
  auto lu_at = [&](int r, int c) {
    return conj_if(STAGED ? lu_tile[m * S + r + c * N] : lu.at(b, r, c), conjugate);
  };
  const int64_t chunks = (k + kc - 1) / kc;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t c0 = chunk * kc;
    if constexpr (STAGED) {
      for (int e = threadIdx.x; e < mpb * N * kc; e += blockDim.x) {
        const int64_t bb = first + e / (N * kc);
        const int rem = e % (N * kc);
        if (bb < batch && c0 + rem / N < k) x_tile[(e / (N * kc)) * sx + rem] = x.at(bb, rem % N, c0 + rem / N);
      }
    }
    __syncthreads();
    if (m < mpb && b < batch && c0 + col < k) {
      T* xc = STAGED ? x_tile + m * sx + col * N : &x.at(b, 0, c0 + col);
      const int64_t step = STAGED ? 1 : x.row;
      const int* piv = pivots + b * piv_batch;
      if (!transpose) apply_pivots<T, N>(xc, step, piv, piv_step, false, error);
      T v[N];
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = xc[i * step];
      if (!transpose) {
        // P A = L U: L y = P b (unit lower), then U x = y.
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
          for (int r = i + 1; r < N; ++r) v[r] = v[r] - lu_at(r, i) * v[i];
#pragma unroll
        for (int i = N - 1; i >= 0; --i) {
          v[i] = div_of(v[i], lu_at(i, i));
#pragma unroll
          for (int r = 0; r < i; ++r) v[r] = v[r] - lu_at(r, i) * v[i];
        }
      } else {
        // A^T = U^T L^T P: U^T y = b, then L^T z = y, then x = P^T z.
#pragma unroll
        for (int i = 0; i < N; ++i) {
          T s = v[i];
#pragma unroll
          for (int r = 0; r < i; ++r) s = s - lu_at(r, i) * v[r];
          v[i] = div_of(s, lu_at(i, i));
        }
#pragma unroll
        for (int i = N - 1; i >= 0; --i) {
          T s = v[i];
#pragma unroll
          for (int r = i + 1; r < N; ++r) s = s - lu_at(r, i) * v[r];
          v[i] = s;
        }
      }
#pragma unroll
      for (int i = 0; i < N; ++i) xc[i * step] = v[i];
      if (transpose) apply_pivots<T, N>(xc, step, piv, piv_step, true, error);
    }
    __syncthreads();
    if constexpr (STAGED) {
      for (int e = threadIdx.x; e < mpb * N * kc; e += blockDim.x) {
        const int64_t bb = first + e / (N * kc);
        const int rem = e % (N * kc);
        if (bb < batch && c0 + rem / N < k) x.at(bb, rem % N, c0 + rem / N) = x_tile[(e / (N * kc)) * sx + rem];
      }
      __syncthreads();
    }
  }
}

template <class T, int N>
void launch_per_thread_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate,
                             cudaStream_t stream, DeviceError* error) {
  const int64_t batch = X.size(0);
  const Mat<T> lu = mat_of<T>(LU);
  per_thread_lu_solve_kernel<T, N><<<blocks_for(batch, kPerThreadBlock), kPerThreadBlock, 0, stream>>>(
      Mat<const T>{lu.base, lu.batch, lu.row, lu.col}, layout_of(LU), pivots.data_ptr<int32_t>(), pivots.stride(0),
      pivots.stride(1), pivots_packed(pivots), mat_of<T>(X), layout_of(X), batch, transpose, conjugate, error);
  EMBER_CUDA_CHECK_LAUNCH();
}

/// lu_solve of the n <= kSmallN matrices of LU (element type T) for the right-hand sides X.
template <class T>
void launch_small_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate,
                        cudaStream_t stream, DeviceError* error) {
  const int64_t batch = X.size(0), n = X.size(1), k = X.size(2);
  with_small_n(n, [&](auto nc) {
    constexpr int N = decltype(nc)::value;
    const Mat<T> lu = mat_of<T>(LU);
    const Mat<const T> lu_in{lu.base, lu.batch, lu.row, lu.col};
    const int* piv = pivots.data_ptr<int32_t>();
    if constexpr (per_thread_fits<T, N>()) {
      if (k == 1) return launch_per_thread_solve<T, N>(LU, pivots, X, transpose, conjugate, stream, error);
    }
    const int kc = static_cast<int>(std::min<int64_t>(k, 32));
    const int mpb = std::max(1, 128 / kc);
    const size_t staged_bytes = static_cast<size_t>(mpb) * (padded<N>() + ((N * kc) | 1)) * sizeof(T);
    const int64_t chunks = (k + kc - 1) / kc;
    const dim3 grid(blocks_for(batch, mpb), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
    if (staged_bytes <= 48 * 1024) {
      small_lu_solve_kernel<T, N, true><<<grid, mpb * kc, staged_bytes, stream>>>(
          lu_in, piv, pivots.stride(0), pivots.stride(1), mat_of<T>(X), batch, k, kc, mpb, transpose, conjugate, error);
    } else {
      small_lu_solve_kernel<T, N, false><<<grid, mpb * kc, 0, stream>>>(
          lu_in, piv, pivots.stride(0), pivots.stride(1), mat_of<T>(X), batch, k, kc, mpb, transpose, conjugate, error);
    }
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace
}  // namespace ember::cuda::linalg_detail
