// Batched triangular solves with n <= 64 (linalg.solve_triangular) on CUDA: cuBLAS's
// trsmBatched spends most of its time on per-matrix overheads at these sizes (H200, complex64
// 64x64 x4096 with 64 right-hand sides: 960 us, torch 737 us).
//
// Every variant becomes one forward substitution L y = b with lower triangular L:
//   X A = B (right side) is A^T X^T = B^T: the right-hand sides are the rows of X, L comes from A^T;
//   an upper triangle (of A, or of A^T) turns lower when rows and columns are taken in reverse
//   order: L[i][j] = op(A)[n-1-i][n-1-j] and y[i] = x[n-1-i].
// A block takes `per_block` matrices (more than one only when few right-hand sides would leave
// threads idle) and a chunk of `cols` right-hand sides of each: grid ceil(batch / per_block) x
// ceil(k / cols), the chunks of one matrix adjacent so they find its triangle in L2.
//   1. cp.async copies the triangle of each A (in A's column-major order: coalesced; the other
//      triangle is never read) into a packed lower triangle in shared memory
//      (triangular_packing.h: 16-byte aligned columns), and the chunk of X into a tile with one
//      column per right-hand side. The diagonal is then replaced by its reciprocal (1 when
//      unitriangular).
//   2. Thread (m, j) solves right-hand side j of matrix m left-looking, P rows at a time in
//      registers: a panel first subtracts the rows solved above it (each solved value read once
//      from the tile, then 16-byte broadcast loads of L feed 4-8 fused multiply-adds each), then
//      substitutes inside the panel, fully unrolled. The order is padded to a multiple of P with
//      identity rows at the end, which never reach the real rows.
//   3. The tile goes back to X, coalesced.
#include <cuda_pipeline_primitives.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "cuda/linalg_common.cuh"
#include "cuda/triangular_packing.h"

namespace ember::cuda::linalg_detail {
namespace {

constexpr int kMaxThreads = 128;
/// Right-hand sides per matrix and block: one per thread, two warps.
constexpr int64_t kMaxColumns = 64;
/// Shared memory per block: a 64x64 complex64 triangle with 64 right-hand sides takes 50 KB.
constexpr int64_t kSharedBudget = 64 * 1024;

/// Elements per 16-byte vector.
template <class T> inline constexpr int kAlign = 16 / static_cast<int>(sizeof(T));
template <class T> struct alignas(16) Vec16 {
  T e[kAlign<T>];
};

__device__ __forceinline__ float fused(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fused(double a, double b, double c) { return fma(a, b, c); }
/// v - w x as fused multiply-adds (four for complex).
template <class R> __device__ __forceinline__ R mul_sub(R v, R w, R x) { return fused(-w, x, v); }
template <class R> __device__ __forceinline__ Cx<R> mul_sub(Cx<R> v, Cx<R> w, Cx<R> x) {
  return {fused(-w.re, x.re, fused(w.im, x.im, v.re)), fused(-w.re, x.im, fused(-w.im, x.re, v.im))};
}

/// A position (hi, mid, lo) of a [*, n_mid, n_lo] index space visited from `start` in steps of
/// `stride` elements, the stride split once so the loop needs no divisions.
struct Walk {
  int hi, mid, lo;
  int step_hi, step_mid, step_lo, n_mid, n_lo;
  __device__ Walk(int start, int stride, int mid_size, int lo_size) : n_mid(mid_size), n_lo(lo_size) {
    const int plane = mid_size * lo_size;
    hi = start / plane;
    mid = start % plane / lo_size;
    lo = start % lo_size;
    step_hi = stride / plane;
    step_mid = stride % plane / lo_size;
    step_lo = stride % lo_size;
  }
  __device__ void next() {
    lo += step_lo;
    if (lo >= n_lo) {
      lo -= n_lo;
      ++mid;
    }
    mid += step_mid;
    if (mid >= n_mid) {
      mid -= n_mid;
      ++hi;
    }
    hi += step_hi;
  }
};

template <class T> struct TriangularArgs {
  Mat<const T> a;
  Mat<T> x;
  int64_t batch, k, chunks;
  int n, np;                      // order and padded order (a multiple of the panel)
  int per_block, cols;            // matrices per block, right-hand sides per chunk
  int l_stride, x_row, x_stride;  // shared-memory strides in elements: triangles, tile rows, tiles
  bool left, reverse, unit;
};

/// Element (row, rhs) of the chunk's right-hand sides of matrix b, in X's own coordinates.
template <class T> __device__ __forceinline__ T& rhs_at(const TriangularArgs<T>& p, int64_t b, int row, int64_t rhs) {
  return p.left ? p.x.at(b, row, rhs) : p.x.at(b, rhs, row);
}

template <class T, int P>
__global__ void __launch_bounds__(kMaxThreads) triangular_solve_kernel(TriangularArgs<T> p) {
  constexpr int V = kAlign<T>;
  static_assert(P % V == 0, "a panel is whole 16-byte vectors");
  extern __shared__ __align__(16) unsigned char smem[];
  T* tri = reinterpret_cast<T*>(smem);
  T* tile = tri + p.per_block * p.l_stride;
  const int64_t chunk = blockIdx.x % p.chunks, first = blockIdx.x / p.chunks * p.per_block;
  const int count = static_cast<int>(p.batch - first < p.per_block ? p.batch - first : p.per_block);
  const int64_t c0 = chunk * p.cols;
  const int cols = static_cast<int>(p.k - c0 < p.cols ? p.k - c0 : p.cols);
  const int n = p.n, np = p.np, tid = threadIdx.x, threads = blockDim.x;

  // 1. The triangles, walking A(r, c) with r fastest (A is column-major).
  for (Walk w(tid, threads, n, n); w.hi < count; w.next()) {
    const int r = w.lo, c = w.mid;
    int i = p.left ? r : c, j = p.left ? c : r;
    if (p.reverse) {
      i = n - 1 - i;
      j = n - 1 - j;
    }
    if (i < j) continue;
    __pipeline_memcpy_async(tri + w.hi * p.l_stride + packed_index(i, j, np, V), &p.a.at(first + w.hi, r, c), sizeof(T));
  }
  if (np > n) {  // padding rows n..np-1 of the identity
    for (Walk w(tid, threads, np - n, np); w.hi < count; w.next()) {
      const int i = n + w.mid, j = w.lo;
      if (j <= i) tri[w.hi * p.l_stride + packed_index(i, j, np, V)] = from_real<T>(i == j ? 1 : 0);
    }
  }
  // The right-hand sides, walking X in its memory order: down the columns (left: each column is
  // one right-hand side) or along the rows (right: each row is one).
  const int x_mid = p.left ? cols : n, x_lo = p.left ? n : cols;
  for (Walk w(tid, threads, x_mid, x_lo); w.hi < count; w.next()) {
    const int row = p.left ? w.lo : w.mid, j = p.left ? w.mid : w.lo;
    const int y = p.reverse ? n - 1 - row : row;
    __pipeline_memcpy_async(tile + w.hi * p.x_stride + y * p.x_row + j, &rhs_at(p, first + w.hi, row, c0 + j), sizeof(T));
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  for (int e = tid; e < count * n; e += threads) {
    const int m = e / n, i = e - m * n;
    T& d = tri[m * p.l_stride + packed_index(i, i, np, V)];
    d = p.unit ? from_real<T>(1) : recip(d);
  }
  __syncthreads();

  // 2. Thread (m, j): forward substitution for right-hand side j of matrix m.
  const int m = tid / p.cols, j = tid - m * p.cols;
  if (m < count && j < cols) {
    const T* L = tri + m * p.l_stride;
    T* y = tile + m * p.x_stride + j;
    const int ld = p.x_row;
    for (int base = 0; base < np; base += P) {
      T v[P];
#pragma unroll
      for (int i = 0; i < P; ++i) v[i] = base + i < n ? y[(base + i) * ld] : from_real<T>(0);
      // The solved rows above the panel: column c contributes L[base.., c] y[c].
      int offset = 0;  // column c's
      for (int c = 0; c < base; ++c) {
        const T yc = y[c * ld];
        const auto* col = reinterpret_cast<const Vec16<T>*>(L + offset + base - packed_first_row(c, V));
#pragma unroll
        for (int q = 0; q < P / V; ++q) {
          const Vec16<T> w = col[q];
#pragma unroll
          for (int u = 0; u < V; ++u) v[q * V + u] = mul_sub(v[q * V + u], w.e[u], yc);
        }
        offset += np - packed_first_row(c, V);
      }
      // The panel's own triangle: column base + i is stored from row base + i0 on, its first
      // vector holding the (inverted) diagonal at i - i0.
      const T* col = L + offset;
      // (Inner trip counts do not depend on i, so every loop unrolls and v stays in registers.)
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const int i0 = i / V * V;
        const auto* vec = reinterpret_cast<const Vec16<T>*>(col);
        const Vec16<T> head = vec[0];
        v[i] = v[i] * head.e[i - i0];
#pragma unroll
        for (int u = 0; u < V; ++u) {
          if (i0 + u > i) v[i0 + u] = mul_sub(v[i0 + u], head.e[u], v[i]);
        }
#pragma unroll
        for (int q = 1; q < P / V; ++q) {
          if (i0 + q * V < P) {
            const Vec16<T> w = vec[q];
#pragma unroll
            for (int u = 0; u < V; ++u) v[i0 + q * V + u] = mul_sub(v[i0 + q * V + u], w.e[u], v[i]);
          }
        }
        col += np - base - i0;
      }
#pragma unroll
      for (int i = 0; i < P; ++i) y[(base + i) * ld] = v[i];
    }
  }
  __syncthreads();

  // 3. The solutions back to X, in its memory order.
  for (Walk w(tid, threads, x_mid, x_lo); w.hi < count; w.next()) {
    const int row = p.left ? w.lo : w.mid, jj = p.left ? w.mid : w.lo;
    const int y = p.reverse ? n - 1 - row : row;
    rhs_at(p, first + w.hi, row, c0 + jj) = tile[w.hi * p.x_stride + y * p.x_row + jj];
  }
}

template <class T, int P>
void launch_triangular(const Tensor& A, const Tensor& X, bool upper, bool left, bool unitriangular, cudaStream_t stream) {
  constexpr int V = kAlign<T>;
  const char* op = "linalg.solve_triangular";
  const int64_t batch = X.size(0), k = left ? X.size(2) : X.size(1);
  const int n = static_cast<int>(A.size(1));
  const int np = (n + P - 1) / P * P;
  // Strides of an odd number of 16-byte vectors (or elements) put the triangles and tiles of
  // a block's matrices, and the rows of a tile, on different banks.
  const int l_stride = V * ((packed_size(np, V) / V) | 1);
  const int64_t budget = kSharedBudget / static_cast<int64_t>(sizeof(T));
  const int64_t fit = std::max<int64_t>(1, (budget - l_stride - 1) / np - 1);
  const int64_t chunks = (k + std::min(kMaxColumns, fit) - 1) / std::min(kMaxColumns, fit);
  const int cols = static_cast<int>((k + chunks - 1) / chunks);
  const int x_row = cols | 1, x_stride = (np * x_row) | 1;
  const int64_t per_matrix = l_stride + x_stride;
  const int per_block = static_cast<int>(std::min<int64_t>({kMaxThreads / cols, budget / per_matrix, batch}));
  const int64_t blocks = (batch + per_block - 1) / per_block * chunks;
  EMBER_CHECK(blocks <= INT_MAX, op, "blocks of the batched solve: expected at most {}, got {}", INT_MAX, blocks);
  const size_t bytes = static_cast<size_t>(per_block * per_matrix) * sizeof(T);
  if (bytes > 48 * 1024) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(triangular_solve_kernel<T, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  }
  const Mat<T> a = mat_of<T>(A);
  TriangularArgs<T> args{Mat<const T>{a.base, a.batch, a.row, a.col},
                         mat_of<T>(X),
                         batch,
                         k,
                         chunks,
                         n,
                         np,
                         per_block,
                         cols,
                         l_stride,
                         x_row,
                         x_stride,
                         left,
                         upper == left,
                         unitriangular};
  const int threads = (per_block * cols + 31) / 32 * 32;
  triangular_solve_kernel<T, P><<<static_cast<unsigned>(blocks), threads, bytes, stream>>>(args);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void small_triangular_solve(const Tensor& A, const Tensor& X, bool upper, bool left, bool unitriangular) {
  const char* op = "linalg.solve_triangular";
  const int64_t n = A.size(1);
  EMBER_CHECK(n >= 1 && n <= kMediumN, op, "batched kernel order: expected 1 <= n <= {}, got {}", kMediumN, n);
  const cudaStream_t stream = current_raw_stream(X.device().index);
  dispatch_lapack(A.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Panels of 32 rows (64 registers for complex64), 16 for complex128; smaller orders take
    // the smallest panel that holds them.
    constexpr int kLargePanel = std::is_same_v<T, Cx<double>> ? 16 : 32;
    if (n <= 4) return launch_triangular<T, 4>(A, X, upper, left, unitriangular, stream);
    if (n <= 8) return launch_triangular<T, 8>(A, X, upper, left, unitriangular, stream);
    if (n <= 16) return launch_triangular<T, 16>(A, X, upper, left, unitriangular, stream);
    launch_triangular<T, kLargePanel>(A, X, upper, left, unitriangular, stream);
  });
}

}  // namespace ember::cuda::linalg_detail
