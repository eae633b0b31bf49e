// Shared by the small-matrix files: linalg_small.cu (LU factor, inverse and the entry points) and
// the lu_solve files (linalg_small_solve.cuh, instantiated by linalg_small_solve_float.cu and
// linalg_small_solve_double.cu), split so nvcc compiles them in parallel (the single
// linalg_small.cu took 3.2 minutes on the GPU machine). Here: the size dispatch, the padded
// stride of the lane-group kernels' staged matrices, and the staging of the one-thread-per-matrix
// kernels (n <= 4, at most 128 bytes per matrix): a block of 128 threads stages its 128 matrices
// through shared memory stored element-major (conflict-free per-thread reads); a packed batch
// moves as one contiguous chunk of coalesced 16-byte loads, all issued before the first use.
#pragma once
#include <type_traits>

#include "cuda/linalg_common.cuh"

namespace ember::cuda::linalg_detail {
namespace {

/// Shared-memory stride of one staged n x n matrix: odd, so lanes of different matrices hit
/// different banks.
template <int N> constexpr int padded() { return (N * N) | 1; }

// ---- one thread per matrix: n <= 4 and at most 128 bytes per matrix ----------------------------

constexpr int kPerThreadBlock = 128;
/// Shared-memory stride between the elements of one tile slot: the block's matrices are stored
/// element-major (tile[slot * kTileStride + matrix]) so each thread's reads are conflict-free.
constexpr int kTileStride = kPerThreadBlock + 1;

template <class T, int N> constexpr bool per_thread_fits() { return N <= 4 && N * N * sizeof(T) <= 128; }

/// How a [B, R, C] batch sits in memory: `packed` when the matrices are back to back (batch
/// stride R * C, row- or column-major inside) from a 16-byte aligned address, so a block's
/// matrices are one contiguous chunk it can move with 16-byte vectors.
struct Layout {
  bool packed, row_major;
};
inline Layout layout_of(const Tensor& x) {
  const int64_t r = x.size(1), c = x.size(2);
  const bool col = (r == 1 || x.stride(1) == 1) && (c == 1 || x.stride(2) == r);
  const bool row = (c == 1 || x.stride(2) == 1) && (r == 1 || x.stride(1) == c);
  const bool aligned = reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0;
  return {aligned && (x.size(0) == 1 || x.stride(0) == r * c) && (col || row), !col};
}

/// Moves the block's R x C matrices [first, first + count) from global memory into the tile, slot
/// r + c * R of matrix m at tile[slot * kTileStride + m]. A full block of a packed batch reads its
/// chunk with coalesced 16-byte loads, all issued before the first use; otherwise element by
/// element (in column-major order, coalesced for column-major batches).
template <class T, int R, int C>
__device__ __forceinline__ void load_tile(T* tile, Mat<const T> a, Layout layout, int64_t first, int count) {
  constexpr int RC = R * C;
  if (layout.packed && count == kPerThreadBlock) {
    constexpr int E = 16 / static_cast<int>(sizeof(T));
    constexpr int units = kPerThreadBlock * RC / E, per_thread = (units + kPerThreadBlock - 1) / kPerThreadBlock;
    const uint4* src = reinterpret_cast<const uint4*>(a.base + first * RC);
    uint4 v[per_thread];
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int u = threadIdx.x + i * kPerThreadBlock;
      if (u < units) v[i] = __ldg(src + u);
    }
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int u = threadIdx.x + i * kPerThreadBlock;
      if (u >= units) continue;
      T parts[E];
      memcpy(parts, &v[i], 16);
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int e = u * E + k, m = e / RC, o = e % RC;
        const int slot = layout.row_major ? (o / C) + (o % C) * R : o;
        tile[slot * kTileStride + m] = parts[k];
      }
    }
    return;
  }
  for (int e = threadIdx.x; e < count * RC; e += kPerThreadBlock) {
    const int m = e / RC, o = e % RC;
    tile[o * kTileStride + m] = a.at(first + m, o % R, o / R);
  }
}

/// The inverse of load_tile.
template <class T, int R, int C>
__device__ __forceinline__ void store_tile(const T* tile, Mat<T> out, Layout layout, int64_t first, int count) {
  constexpr int RC = R * C;
  if (layout.packed && count == kPerThreadBlock) {
    constexpr int E = 16 / static_cast<int>(sizeof(T));
    constexpr int units = kPerThreadBlock * RC / E, per_thread = (units + kPerThreadBlock - 1) / kPerThreadBlock;
    uint4* dst = reinterpret_cast<uint4*>(out.base + first * RC);
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int u = threadIdx.x + i * kPerThreadBlock;
      if (u >= units) continue;
      T parts[E];
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const int e = u * E + k, m = e / RC, o = e % RC;
        const int slot = layout.row_major ? (o / C) + (o % C) * R : o;
        parts[k] = tile[slot * kTileStride + m];
      }
      uint4 v;
      memcpy(&v, parts, 16);
      dst[u] = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < count * RC; e += kPerThreadBlock) {
    const int m = e / RC, o = e % RC;
    out.at(first + m, o % R, o / R) = tile[o * kTileStride + m];
  }
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

/// Whether a [B, 4] pivot batch can be moved as one 16-byte vector per matrix.
inline bool pivots_packed(const Tensor& pivots) {
  return (pivots.size(0) == 1 || pivots.stride(0) == pivots.size(1)) && (pivots.size(1) == 1 || pivots.stride(1) == 1) &&
         reinterpret_cast<uintptr_t>(pivots.raw_data()) % 16 == 0;
}

}  // namespace

/// lu_solve of n <= kSmallN matrices of one element type, one overload per type: float and
/// complex64 in linalg_small_solve_float.cu, double and complex128 in linalg_small_solve_double.cu.
void small_lu_solve_as(Tag<float>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate,
                       cudaStream_t stream, DeviceError* error);
void small_lu_solve_as(Tag<Cx<float>>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose,
                       bool conjugate, cudaStream_t stream, DeviceError* error);
void small_lu_solve_as(Tag<double>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate,
                       cudaStream_t stream, DeviceError* error);
void small_lu_solve_as(Tag<Cx<double>>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose,
                       bool conjugate, cudaStream_t stream, DeviceError* error);

}  // namespace ember::cuda::linalg_detail
