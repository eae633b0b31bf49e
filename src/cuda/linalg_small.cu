// Small and medium matrices on CUDA, where the libraries' per-matrix overheads dominate.
//
// n <= 16 (square): one group of G lanes per matrix (G = the power of two >= n), lane r holding
// row r in registers. A block stages its matrices through shared memory so global loads and
// stores are coalesced whatever the batch size (1M 4x4 fp32 matrices are 64 MB each way). Rows
// are never moved: each lane tracks the position of its row, so a pivot step costs one butterfly
// reduction over the group (|re| + |im| scores and first-index tie-breaks, LAPACK's i?amax) and
// one broadcast of the pivot row. The same loop either factors (LU, pivots, info) or runs
// Gauss-Jordan on [A | I] for the inverse, in one launch. Solves with a factored small matrix
// use one thread per (matrix, right-hand side).
//
// m, n <= 64: one thread block per matrix, the matrix in shared memory, right-looking getf2.
#include <type_traits>

#include "cuda/linalg_common.cuh"

namespace ember::cuda::linalg_detail {
namespace {

constexpr int kStageBytes = 32 * 1024;

template <int N> constexpr int group_for() { return N <= 2 ? 2 : N <= 4 ? 4 : N <= 8 ? 8 : 16; }
/// Shared-memory stride of one staged n x n matrix: odd, so lanes of different matrices hit
/// different banks.
template <int N> constexpr int padded() { return (N * N) | 1; }
template <class T, int N> constexpr int matrices_per_block() {
  constexpr int G = group_for<N>(), per_warp = 32 / G;
  constexpr int by_threads = 256 / G, by_shared = kStageBytes / (padded<N>() * static_cast<int>(sizeof(T)));
  constexpr int fit = (by_threads < by_shared ? by_threads : by_shared) / per_warp * per_warp;
  return fit < per_warp ? per_warp : fit;
}

template <int G, class R> __device__ __forceinline__ R shfl_from(R v, int src) { return __shfl_sync(0xffffffffu, v, src, G); }
template <int G, class R> __device__ __forceinline__ Cx<R> shfl_from(Cx<R> v, int src) {
  return {__shfl_sync(0xffffffffu, v.re, src, G), __shfl_sync(0xffffffffu, v.im, src, G)};
}

enum class SmallOp { Factor, Inverse };

/// Factor: out = LU (in place over a), pivots, info. Inverse: out = inverse of a, info.
template <class T, int N, SmallOp OP>
__global__ void __launch_bounds__(256) small_lu_kernel(Mat<const T> a, Mat<T> out, int* pivots, int64_t piv_batch,
                                                       int64_t piv_step, int* info, int64_t info_step, int64_t batch) {
  using R = real_t<T>;
  constexpr int G = group_for<N>(), S = padded<N>(), MPB = matrices_per_block<T, N>(), NN = N * N;
  __shared__ T tile[MPB * S];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * MPB;
  for (int e = threadIdx.x; e < MPB * NN; e += blockDim.x) {
    const int64_t b = first + e / NN;
    const int idx = e % NN;
    if (b < batch) tile[(e / NN) * S + idx] = a.at(b, idx % N, idx / N);
  }
  __syncthreads();

  // Every lane of the warp runs the whole loop (the shuffles need all 32); lanes past n or past
  // the batch hold zero rows that can never win a pivot search.
  const int lane = threadIdx.x % G, m = threadIdx.x / G;
  const int64_t b = first + m;
  const bool valid = b < batch, real_row = lane < N;
  const int group_base = (threadIdx.x % 32) / G * G;
  T row[N], x[N];
#pragma unroll
  for (int c = 0; c < N; ++c) {
    row[c] = real_row && valid ? tile[m * S + lane + c * N] : from_real<T>(0);
    x[c] = from_real<T>(c == lane ? 1 : 0);
  }
  int pos = lane, first_zero = 0;
  int piv[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    // Pivot: the largest score among positions >= j, the first position on ties; NaN scores
    // lose to numbers (so every lane of the group agrees on the winner).
    R score = R(-1);
    if (real_row && pos >= j) {
      const R s = cabs1(row[j]);
      score = s == s ? s : R(-0.5);
    }
    int best = pos;
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2) {
      const R other_score = __shfl_xor_sync(0xffffffffu, score, off, G);
      const int other_best = __shfl_xor_sync(0xffffffffu, best, off, G);
      if (other_score > score || (other_score == score && other_best < best)) {
        score = other_score;
        best = other_best;
      }
    }
    const unsigned holders = __ballot_sync(0xffffffffu, real_row && pos == best);
    const int pivot_lane = __ffs((holders >> group_base) & ((1u << G) - 1)) - 1;
    piv[j] = best + 1;
    const T pivot = shfl_from<G>(row[j], pivot_lane);
    const bool zero = is_zero(pivot);
    if (zero && first_zero == 0) first_zero = j + 1;
    const bool is_pivot_row = lane == pivot_lane;
    if (is_pivot_row) {
      pos = j;
    } else if (pos == j) {
      pos = best;
    }
    const T pivot_recip = recip(pivot);
    if constexpr (OP == SmallOp::Factor) {
      const bool below = real_row && pos > j;
      if (below && !zero) row[j] = scale_by_pivot(row[j], pivot, pivot_recip);
#pragma unroll
      for (int c = j + 1; c < N; ++c) {
        const T u = shfl_from<G>(row[c], pivot_lane);
        if (below) row[c] = row[c] - row[j] * u;
      }
    } else {
      // Gauss-Jordan: scale the pivot row by 1/pivot, eliminate column j from every other row;
      // the identity rows ride along and end as the inverse (rows in position order).
      const T f = row[j];
#pragma unroll
      for (int c = j + 1; c < N; ++c) {
        const T u = shfl_from<G>(row[c], pivot_lane) * pivot_recip;
        row[c] = is_pivot_row ? u : row[c] - f * u;
      }
#pragma unroll
      for (int c = 0; c < N; ++c) {
        const T u = shfl_from<G>(x[c], pivot_lane) * pivot_recip;
        x[c] = is_pivot_row ? u : x[c] - f * u;
      }
    }
  }
  __syncthreads();  // the whole tile has been read
  if (real_row && valid) {
#pragma unroll
    for (int c = 0; c < N; ++c) tile[m * S + pos + c * N] = OP == SmallOp::Factor ? row[c] : x[c];
  }
  if (lane == 0 && valid) {
    if constexpr (OP == SmallOp::Factor) {
#pragma unroll
      for (int j = 0; j < N; ++j) pivots[b * piv_batch + j * piv_step] = piv[j];
    }
    info[b * info_step] = first_zero;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < MPB * NN; e += blockDim.x) {
    const int64_t bb = first + e / NN;
    const int idx = e % NN;
    if (bb < batch) out.at(bb, idx % N, idx / N) = tile[(e / NN) * S + idx];
  }
}

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

/// Right-looking getf2 on one m x n matrix per block, in shared memory (column-major, ld m).
template <class T>
__global__ void __launch_bounds__(256) medium_lu_kernel(Mat<T> a, int m, int n, int* pivots, int64_t piv_batch,
                                                        int64_t piv_step, int* info, int64_t info_step) {
  using R = real_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* s = reinterpret_cast<T*>(smem);
  __shared__ int pivot_row;
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  for (int e = tid; e < m * n; e += blockDim.x) s[e] = a.at(b, e % m, e / m);
  __syncthreads();
  int first_zero = 0;
  const int k = m < n ? m : n;
  for (int j = 0; j < k; ++j) {
    if (warp == 0) {
      R best = R(-1);
      int where = m;
      for (int i = j + lane; i < m; i += 32) {
        const R v0 = cabs1(s[i + j * m]);
        const R v = v0 == v0 ? v0 : R(-0.5);
        if (v > best) {
          best = v;
          where = i;
        }
      }
      for (int off = 16; off > 0; off /= 2) {
        const R ob = __shfl_xor_sync(0xffffffffu, best, off);
        const int ow = __shfl_xor_sync(0xffffffffu, where, off);
        if (ob > best || (ob == best && ow < where)) {
          best = ob;
          where = ow;
        }
      }
      if (lane == 0) {
        pivot_row = where;
        pivots[b * piv_batch + j * piv_step] = where + 1;
      }
    }
    __syncthreads();
    const int p = pivot_row;
    if (p != j) {
      for (int c = tid; c < n; c += blockDim.x) {
        const T tmp = s[j + c * m];
        s[j + c * m] = s[p + c * m];
        s[p + c * m] = tmp;
      }
    }
    __syncthreads();
    const T pivot = s[j + j * m];
    const bool zero = is_zero(pivot);
    if (zero && first_zero == 0) first_zero = j + 1;
    if (!zero) {
      const T pr = recip(pivot);
      for (int i = j + 1 + tid; i < m; i += blockDim.x) s[i + j * m] = scale_by_pivot(s[i + j * m], pivot, pr);
    }
    __syncthreads();
    for (int c = j + 1 + warp; c < n; c += warps) {
      const T u = s[j + c * m];
      for (int i = j + 1 + lane; i < m; i += 32) s[i + c * m] = s[i + c * m] - s[i + j * m] * u;
    }
    __syncthreads();
  }
  for (int e = tid; e < m * n; e += blockDim.x) a.at(b, e % m, e / m) = s[e];
  if (tid == 0) info[b * info_step] = first_zero;
}

/// Calls f(std::integral_constant<int, n>) for 1 <= n <= 16.
template <class F> void with_small_n(int64_t n, F&& f) {
  switch (n) {
#define EMBER_SMALL_N(v) \
  case v: return f(std::integral_constant<int, v>{});
    EMBER_SMALL_N(1) EMBER_SMALL_N(2) EMBER_SMALL_N(3) EMBER_SMALL_N(4) EMBER_SMALL_N(5) EMBER_SMALL_N(6)
    EMBER_SMALL_N(7) EMBER_SMALL_N(8) EMBER_SMALL_N(9) EMBER_SMALL_N(10) EMBER_SMALL_N(11) EMBER_SMALL_N(12)
    EMBER_SMALL_N(13) EMBER_SMALL_N(14) EMBER_SMALL_N(15) EMBER_SMALL_N(16)
#undef EMBER_SMALL_N
    default: fail("linalg", "small-matrix kernel size: expected 1 <= n <= {}, got {}", kSmallN, n);
  }
}

template <SmallOp OP>
void launch_small(const Tensor& A, const Tensor& out, const Tensor& pivots, const Tensor& info) {
  const int64_t batch = A.size(0), n = A.size(1);
  DeviceScope scope(A.device());
  const cudaStream_t stream = current_raw_stream(A.device().index);
  dispatch_lapack(A.dtype(), "linalg", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_small_n(n, [&](auto nc) {
      constexpr int N = decltype(nc)::value;
      constexpr int MPB = matrices_per_block<T, N>(), G = group_for<N>();
      const Mat<T> in = mat_of<T>(A);
      int* piv = OP == SmallOp::Factor ? pivots.data_ptr<int32_t>() : nullptr;
      const int64_t piv_batch = OP == SmallOp::Factor ? pivots.stride(0) : 0;
      const int64_t piv_step = OP == SmallOp::Factor ? pivots.stride(1) : 0;
      small_lu_kernel<T, N, OP><<<blocks_for(batch, MPB), MPB * G, 0, stream>>>(
          Mat<const T>{in.base, in.batch, in.row, in.col}, mat_of<T>(out), piv, piv_batch, piv_step,
          info.data_ptr<int32_t>(), info.stride(0), batch);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void small_lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info) {
  launch_small<SmallOp::Factor>(LU, LU, pivots, info);
}

void small_inv(const Tensor& A, const Tensor& X, const Tensor& info) {
  launch_small<SmallOp::Inverse>(A, X, Tensor(), info);
}

void small_lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate) {
  const int64_t batch = X.size(0), n = X.size(1), k = X.size(2);
  DeviceScope scope(X.device());
  const int device = X.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  DeviceError* error = device_error_word(device);
  dispatch_lapack(LU.dtype(), "linalg.lu_solve", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_small_n(n, [&](auto nc) {
      constexpr int N = decltype(nc)::value;
      const int kc = static_cast<int>(std::min<int64_t>(k, 32));
      const int mpb = std::max(1, 128 / kc);
      const size_t staged_bytes = static_cast<size_t>(mpb) * (padded<N>() + ((N * kc) | 1)) * sizeof(T);
      const int64_t chunks = (k + kc - 1) / kc;
      const dim3 grid(blocks_for(batch, mpb), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
      const Mat<T> lu = mat_of<T>(LU);
      const Mat<const T> lu_in{lu.base, lu.batch, lu.row, lu.col};
      const int* piv = pivots.data_ptr<int32_t>();
      if (staged_bytes <= 48 * 1024) {
        small_lu_solve_kernel<T, N, true><<<grid, mpb * kc, staged_bytes, stream>>>(
            lu_in, piv, pivots.stride(0), pivots.stride(1), mat_of<T>(X), batch, k, kc, mpb, transpose, conjugate, error);
      } else {
        small_lu_solve_kernel<T, N, false><<<grid, mpb * kc, 0, stream>>>(
            lu_in, piv, pivots.stride(0), pivots.stride(1), mat_of<T>(X), batch, k, kc, mpb, transpose, conjugate, error);
      }
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void medium_lu_factor(const Tensor& LU, const Tensor& pivots, const Tensor& info) {
  const int64_t batch = LU.size(0), m = LU.size(1), n = LU.size(2);
  EMBER_CHECK(m <= kMediumN && n <= kMediumN, "linalg.lu_factor", "medium kernel sizes: expected m, n <= {}, got {} x {}",
              kMediumN, m, n);
  DeviceScope scope(LU.device());
  const cudaStream_t stream = current_raw_stream(LU.device().index);
  dispatch_lapack(LU.dtype(), "linalg.lu_factor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t bytes = static_cast<size_t>(m * n) * sizeof(T);
    if (bytes > 48 * 1024) {
      EMBER_CUDA_CHECK(cudaFuncSetAttribute(medium_lu_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
    }
    medium_lu_kernel<T><<<static_cast<unsigned>(batch), 256, bytes, stream>>>(
        mat_of<T>(LU), static_cast<int>(m), static_cast<int>(n), pivots.data_ptr<int32_t>(), pivots.stride(0),
        pivots.stride(1), info.data_ptr<int32_t>(), info.stride(0));
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ember::cuda::linalg_detail
