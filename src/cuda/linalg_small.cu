// LU factorization and inverse of small and medium matrices on CUDA, where the libraries'
// per-matrix overheads dominate, and the entry points of the small-matrix kernels declared in
// linalg_common.cuh (lu_solve's kernels are in linalg_small_solve.cuh, the helpers both use in
// linalg_small.cuh).
//
// n <= 4 with at most 128 bytes per matrix (every n <= 4 but complex128 3x3 and 4x4): one thread
// per matrix, the whole matrix in registers, pivot search and row swaps fully unrolled (swaps as
// selects), the block's matrices staged through shared memory (linalg_small.cuh). Factor (LU,
// pivots as one 16-byte store for n = 4, info), inverse (Gauss-Jordan on [A | I]) and the
// one-right-hand-side solve (linalg_small_solve.cuh) each take one pass over memory. Versions: the
// lane-group kernel below was the first for n <= 4 too (H200, 1M matrices: f32 4x4 inverse
// 114 us, ~1.2 TB/s; c64 4x4 lu_factor and lu_solve k=1 both far from the roofline): its 4-byte
// strided staging, int64 index math and the shuffles of every pivot step bound it; one thread per
// matrix needs neither.
//
// Other n <= 16 (square): one group of G lanes per matrix (G = the power of two >= n), lane r holding
// row r in registers. A block stages its matrices through shared memory so global loads and
// stores are coalesced whatever the batch size (1M 4x4 fp32 matrices are 64 MB each way). Rows
// are never moved: each lane tracks the position of its row, so a pivot step costs one butterfly
// reduction over the group (|re| + |im| scores and first-index tie-breaks, LAPACK's i?amax) and
// one broadcast of the pivot row. The same loop either factors (LU, pivots, info) or runs
// Gauss-Jordan on [A | I] for the inverse, in one launch.
//
// m, n <= 64: one thread block per matrix, the matrix in shared memory, right-looking getf2.
#include "cuda/linalg_small.cuh"

namespace ember::cuda::linalg_detail {
namespace {

constexpr int kStageBytes = 32 * 1024;

template <int N> constexpr int group_for() { return N <= 2 ? 2 : N <= 4 ? 4 : N <= 8 ? 8 : 16; }
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


/// LAPACK's pivot choice among rows j..N-1 of column j: the largest |re| + |im|, the first on
/// ties, NaN scores losing to numbers (as the lane-group kernel).
template <class T, int N> __device__ __forceinline__ int pivot_row(const T (&a)[N][N], int j) {
  using R = real_t<T>;
  R best = R(-1);
  int p = j;
#pragma unroll
  for (int i = j; i < N; ++i) {
    const R s0 = cabs1(a[i][j]);
    const R s = s0 == s0 ? s0 : R(-0.5);
    if (s > best) {
      best = s;
      p = i;
    }
  }
  return p;
}

/// Swaps rows j and p (p >= j, known at run time) of a register matrix with selects.
template <class T, int N, int C> __device__ __forceinline__ void swap_rows(T (&a)[N][C], int j, int p) {
#pragma unroll
  for (int i = j + 1; i < N; ++i) {
    const bool hit = p == i;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const T top = a[j][c];
      a[j][c] = hit ? a[i][c] : top;
      a[i][c] = hit ? top : a[i][c];
    }
  }
}

/// Factor: out = LU (in place over a), pivots, info. Inverse: out = inverse of a (Gauss-Jordan on
/// [A | I] with the same pivoting and operation order as small_lu_kernel), info. One thread owns
/// one matrix in registers; the block stages its kPerThreadBlock matrices through shared memory.
template <class T, int N, SmallOp OP>
__global__ void __launch_bounds__(kPerThreadBlock) per_thread_lu_kernel(Mat<const T> a, Layout in_layout, Mat<T> out,
                                                                        Layout out_layout, int* pivots, int64_t piv_batch,
                                                                        int64_t piv_step, bool piv_packed, int* info,
                                                                        int64_t info_step, int64_t batch) {
  __shared__ T tile[N * N * kTileStride];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPerThreadBlock;
  const int count = static_cast<int>(batch - first < kPerThreadBlock ? batch - first : kPerThreadBlock);
  load_tile<T, N, N>(tile, a, in_layout, first, count);
  __syncthreads();
  const int m = threadIdx.x;
  if (m < count) {
    T v[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int c = 0; c < N; ++c) v[r][c] = tile[(r + c * N) * kTileStride + m];
    int first_zero = 0;
    int piv[N];
    T x[N][N];
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int c = 0; c < N; ++c) x[r][c] = from_real<T>(r == c ? 1 : 0);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int p = pivot_row(v, j);
      piv[j] = p + 1;
      swap_rows(v, j, p);
      if constexpr (OP == SmallOp::Inverse) swap_rows(x, j, p);
      const T pivot = v[j][j];
      const bool zero = is_zero(pivot);
      if (zero && first_zero == 0) first_zero = j + 1;
      const T pivot_recip = recip(pivot);
      if constexpr (OP == SmallOp::Factor) {
        if (!zero) {
#pragma unroll
          for (int i = j + 1; i < N; ++i) v[i][j] = scale_by_pivot(v[i][j], pivot, pivot_recip);
        }
#pragma unroll
        for (int i = j + 1; i < N; ++i)
#pragma unroll
          for (int c = j + 1; c < N; ++c) v[i][c] = v[i][c] - v[i][j] * v[j][c];
      } else {
#pragma unroll
        for (int c = j + 1; c < N; ++c) v[j][c] = v[j][c] * pivot_recip;
#pragma unroll
        for (int c = 0; c < N; ++c) x[j][c] = x[j][c] * pivot_recip;
#pragma unroll
        for (int i = 0; i < N; ++i) {
          if (i == j) continue;
          const T f = v[i][j];
#pragma unroll
          for (int c = j + 1; c < N; ++c) v[i][c] = v[i][c] - f * v[j][c];
#pragma unroll
          for (int c = 0; c < N; ++c) x[i][c] = x[i][c] - f * x[j][c];
        }
      }
    }
    // Each thread rewrites only its own tile column: no barrier needed before these stores.
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int c = 0; c < N; ++c) tile[(r + c * N) * kTileStride + m] = OP == SmallOp::Factor ? v[r][c] : x[r][c];
    const int64_t b = first + m;
    if constexpr (OP == SmallOp::Factor) {
      if (N == 4 && piv_packed) {
        reinterpret_cast<int4*>(pivots)[b] = make_int4(piv[0], piv[N > 1 ? 1 : 0], piv[N > 2 ? 2 : 0], piv[N > 3 ? 3 : 0]);
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) pivots[b * piv_batch + j * piv_step] = piv[j];
      }
    }
    info[b * info_step] = first_zero;
  }
  __syncthreads();
  store_tile<T, N, N>(tile, out, out_layout, first, count);
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

template <class T, int N, SmallOp OP>
void launch_per_thread(const Tensor& A, const Tensor& out, const Tensor& pivots, const Tensor& info, cudaStream_t stream) {
  const int64_t batch = A.size(0);
  const Mat<T> in = mat_of<T>(A);
  const bool factor = OP == SmallOp::Factor;
  per_thread_lu_kernel<T, N, OP><<<blocks_for(batch, kPerThreadBlock), kPerThreadBlock, 0, stream>>>(
      Mat<const T>{in.base, in.batch, in.row, in.col}, layout_of(A), mat_of<T>(out), layout_of(out),
      factor ? pivots.data_ptr<int32_t>() : nullptr, factor ? pivots.stride(0) : 0, factor ? pivots.stride(1) : 0,
      factor && pivots_packed(pivots), info.data_ptr<int32_t>(), info.stride(0), batch);
  EMBER_CUDA_CHECK_LAUNCH();
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
      if constexpr (per_thread_fits<T, N>()) {
        return launch_per_thread<T, N, OP>(A, out, pivots, info, stream);
      }
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
  DeviceScope scope(X.device());
  const int device = X.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  DeviceError* error = device_error_word(device);
  dispatch_lapack(LU.dtype(), "linalg.lu_solve", [&](auto tag) {
    small_lu_solve_as(tag, LU, pivots, X, transpose, conjugate, stream, error);
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
