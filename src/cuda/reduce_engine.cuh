// The CUDA reduction engine shared by the per-family files (reduce_arith_float.cu,
// reduce_arith_int.cu, reduce_extreme.cu, reduce_logical.cu, reduce_arg.cu), each instantiating
// it for one family so the five compile in parallel (one file took 4.5 minutes of nvcc).
// reduce.cu holds the entry points and dispatch. Design and history:
//
// CUDA reductions (sum, prod, mean, amax, amin, any, all) and argmax/argmin.
//
// One engine: the kept dims form the "outer" index space (out and x offsets from one
// OffsetCalc), the reduced dims the "inner" one (x offsets from another), so any set of dims on
// any strides reduces as rows of an [outer, inner] view without copies. A family (below) says
// how to accumulate; the layout picks the schedule:
//   - dense rows (the reduced dims are one contiguous run): a group of 32-256 threads per row
//     (several rows per block when rows are short), 16-byte vector loads, four vectors in
//     flight per thread, one accumulator per vector lane, then warp shuffles and a shared
//     step across the group's warps. Few long rows (sum of everything) are cut into chunks,
//     one group each, whose accumulators a second tiny kernel combines in order;
//   - dense columns (the innermost kept dim is contiguous, the reduced dims are strided: a
//     "first dim" reduction or a reduction of a transposed view): a 32x8 block covers
//     32 vectors of adjacent columns, its 8 rows of threads walk interleaved reduced rows,
//     4 loads in flight, then a shared-memory combine over the 8; when the columns alone
//     cannot fill the GPU the reduced dim is split over blockIdx.y into partials that a
//     thread-per-output kernel combines in order;
//   - anything else (short rows, odd strides): block per row, thread per row, or split rows
//     with scalar OffsetCalc loads.
// A reduction family fixes the accumulator: real floats sum/prod/mean in f64 (so the result
// matches the CPU closely whatever the order), integers in 64 bits with wrap-around, complex in
// complex128; amax/amin in the compute type with NaN propagating; any/all in bool; argmax/argmin
// carry (value, index) with NaN winning and the lowest index winning ties, like torch.
// The order of operations is fixed, so results are deterministic run to run.
//
// Performance history, H200, [8192, 8192] inputs (256 MB f32; HBM copy ceiling ~4.2 TB/s),
// bench/core_bench.cpp against bench/torch_core.py:
//   v1 (scalar loads, one in flight per thread; block per row / thread per column):
//     sum f32 last dim 215 us (torch 83), sum f32 first dim 365 us (torch 77), sum f32 all
//     237 us (torch 72), amax bf16 last dim 179 us (torch 81), sum of transposed last dim
//     365 us (torch 76), argmax f32 last dim 245 us (torch 125).
//   v2 (dense rows: 32-256 threads per row, 16-byte vectors, 4 in flight, one accumulator per
//     vector lane; dense columns: 32x8 blocks of 16-byte column vectors, reduced dim split over
//     blockIdx.y; splits sized to four whole waves from the occupancy API; second passes
//     combine partials in order): sum f32 last dim 66 us (torch 81), first dim 79 us (torch 74),
//     all 76 us (torch 70), amax bf16 last dim 41 us (torch 78), transposed 79 us (torch 75),
//     argmax f32 98 us (torch 121).
#pragma once

#include <optional>

#include "cuda/loops.cuh"

namespace ember::cuda::reduce_engine {
namespace {

constexpr int kReduceBlock = 256;

template <class C> __device__ C nan_max(C a, C b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
template <class C> __device__ C nan_min(C a, C b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }

// ---- families ----------------------------------------------------------------------------------

template <class In> struct wide_acc {
  using type = std::conditional_t<is_complex_v<In>, complex128,
               std::conditional_t<is_float_v<In>, double,
               std::conditional_t<std::is_unsigned_v<In> && !std::is_same_v<In, bool>, uint64_t, int64_t>>>;
};

/// Sum, Prod, Mean.
template <class In> struct ArithFamily {
  using Acc = typename wide_acc<In>::type;
  ReduceOp op;
  __device__ Acc identity() const { return op == ReduceOp::Prod ? Acc(1) : Acc(0); }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (std::is_integral_v<Acc>) {  // wrap-around without signed overflow
      const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
      return static_cast<Acc>(op == ReduceOp::Prod ? ua * ub : ua + ub);
    } else {
      return op == ReduceOp::Prod ? a * b : a + b;
    }
  }
  __device__ Acc reduce(Acc a, In v, int64_t) const { return combine(a, convert<Acc>(v)); }
  __device__ void store(char* out, DType d, Acc a, int64_t count) const {
    if constexpr (!std::is_integral_v<Acc>) {
      if (op == ReduceOp::Mean) a = a / static_cast<double>(count);
    }
    store_converted(out, d, a);
  }
};

/// Amax, Amin.
template <class In> struct ExtremeFamily {
  using Acc = compute_t<In>;
  ReduceOp op;
  __device__ Acc identity() const {
    if constexpr (std::is_floating_point_v<Acc>) {
      return op == ReduceOp::Amax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return op == ReduceOp::Amax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  __device__ Acc combine(Acc a, Acc b) const { return op == ReduceOp::Amax ? nan_max(a, b) : nan_min(a, b); }
  __device__ Acc reduce(Acc a, In v, int64_t) const { return combine(a, static_cast<Acc>(v)); }
  __device__ void store(char* out, DType d, Acc a, int64_t) const { store_converted(out, d, a); }
};

/// Any, All.
template <class In> struct LogicalFamily {
  using Acc = bool;
  ReduceOp op;
  __device__ bool identity() const { return op == ReduceOp::All; }
  __device__ bool combine(bool a, bool b) const { return op == ReduceOp::All ? (a && b) : (a || b); }
  __device__ bool reduce(bool a, In v, int64_t) const { return combine(a, nonzero(v)); }
  __device__ void store(char* out, DType d, bool a, int64_t) const { store_converted(out, d, a); }
};

template <class C> struct ArgAcc {
  C value;
  int64_t index;  // -1: no element yet
};

/// Argmax, Argmin.
template <class In> struct ArgFamily {
  using C = compute_t<In>;
  using Acc = ArgAcc<C>;
  bool max;
  __device__ Acc identity() const { return {C(0), -1}; }
  // Whether a wins over b: NaN first, then the larger (smaller) value, then the lower index.
  __device__ bool wins(const Acc& a, const Acc& b) const {
    if (b.index < 0) return true;
    if (a.index < 0) return false;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index);
    if (a.value == b.value) return a.index < b.index;
    return max ? a.value > b.value : a.value < b.value;
  }
  __device__ Acc combine(Acc a, Acc b) const { return wins(a, b) ? a : b; }
  __device__ Acc reduce(Acc a, In v, int64_t j) const { return combine(a, Acc{static_cast<C>(v), j}); }
  __device__ void store(char* out, DType d, Acc a, int64_t) const { store_converted(out, d, a.index); }
};

// ---- kernels -----------------------------------------------------------------------------------

struct ReduceArgs {
  OffsetCalc<2, uint64_t> outer;  // kept dims: [0] out, [1] x
  OffsetCalc<1, uint64_t> inner;  // reduced dims: x
  int64_t n_outer, n_inner;
  int64_t chunks, chunk_len;      // chunks > 1: partial accumulators go to `partial`
  const char* x;
  char* out;
  DType out_dtype;
  void* partial;                  // [n_outer, chunks] accumulators
};

template <class In, class Fam>
__device__ typename Fam::Acc reduce_range(const ReduceArgs& a, const Fam& fam, const char* row, int64_t begin, int64_t end,
                                          int64_t step) {
  auto acc = fam.identity();
  for (int64_t j = begin; j < end; j += step) {
    int64_t off[1];
    a.inner.get(static_cast<uint64_t>(j), off);
    acc = fam.reduce(acc, *reinterpret_cast<const In*>(row + off[0]), j);
  }
  return acc;
}

template <class In, class Fam> __global__ void __launch_bounds__(1024) reduce_block_kernel(ReduceArgs a, Fam fam) {
  using Acc = typename Fam::Acc;
  const int64_t units = a.n_outer * a.chunks;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t row = unit / a.chunks, chunk = unit % a.chunks;
    int64_t off[2];
    a.outer.get(static_cast<uint64_t>(row), off);
    const int64_t begin = chunk * a.chunk_len, end = std::min(a.n_inner, begin + a.chunk_len);
    Acc acc = reduce_range<In>(a, fam, a.x + off[1], begin + threadIdx.x, end, blockDim.x);
    acc = block_reduce(acc, [&](Acc p, Acc q) { return fam.combine(p, q); });
    if (threadIdx.x == 0) {
      if (a.chunks > 1) static_cast<Acc*>(a.partial)[unit] = acc;
      else fam.store(a.out + off[0], a.out_dtype, acc, a.n_inner);
    }
  }
}

template <class In, class Fam> __global__ void __launch_bounds__(kReduceBlock) reduce_thread_kernel(ReduceArgs a, Fam fam) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < a.n_outer; row += step) {
    int64_t off[2];
    a.outer.get(static_cast<uint64_t>(row), off);
    fam.store(a.out + off[0], a.out_dtype, reduce_range<In>(a, fam, a.x + off[1], 0, a.n_inner, 1), a.n_inner);
  }
}

/// Second pass of split rows: combines each row's chunk accumulators.
template <class Fam> __global__ void __launch_bounds__(kReduceBlock) reduce_partials_kernel(ReduceArgs a, Fam fam) {
  using Acc = typename Fam::Acc;
  const Acc* partial = static_cast<const Acc*>(a.partial);
  for (int64_t row = blockIdx.x; row < a.n_outer; row += gridDim.x) {
    Acc acc = fam.identity();
    for (int64_t c = threadIdx.x; c < a.chunks; c += blockDim.x) acc = fam.combine(acc, partial[row * a.chunks + c]);
    acc = block_reduce(acc, [&](Acc p, Acc q) { return fam.combine(p, q); });
    if (threadIdx.x == 0) {
      int64_t off[2];
      a.outer.get(static_cast<uint64_t>(row), off);
      fam.store(a.out + off[0], a.out_dtype, acc, a.n_inner);
    }
  }
}

// ---- vectorised kernels ------------------------------------------------------------------------

constexpr int kUnroll = 4;        // vectors loaded before any is combined
constexpr int kColumnRows = 8;    // blockDim.y of the column kernel

/// Elements per 16-byte vector.
template <class In> constexpr int vec_width() { return sizeof(In) >= 16 ? 1 : static_cast<int>(16 / sizeof(In)); }
/// Column kernel vector width: also bounded so the 32x8 block's accumulators fit in 16 KB of
/// shared memory (wide accumulators such as (value, index) pairs take narrower vectors).
template <class In, class Acc> constexpr int column_vec_width() {
  return std::max(1, std::min(vec_width<In>(), static_cast<int>(64 / sizeof(Acc))));
}

/// Folds p[0, n) (dense, any alignment) into the thread's accumulators: threads t, t + tr, ...
/// of a group of tr take the 16-byte vectors of the aligned body, kUnroll at a time; the
/// unaligned head and the tail go element by element. j0: the reduced index of p[0].
template <class In, class Fam, int V>
__device__ void fold_dense(const Fam& fam, typename Fam::Acc (&acc)[V], const In* p, int64_t n, int64_t j0, int t, int tr) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int64_t head = addr % sizeof(In) != 0 ? n
                                        : static_cast<int64_t>((16 - addr % 16) % 16 / sizeof(In));
  head = std::min(head, n);
  for (int64_t e = t; e < head; e += tr) acc[0] = fam.reduce(acc[0], p[e], j0 + e);
  const int64_t nvec = (n - head) / V;
  const Vec<In, V>* body = reinterpret_cast<const Vec<In, V>*>(p + head);
  const int64_t jb = j0 + head;
  int64_t i = t;
  for (; i + (kUnroll - 1) * tr < nvec; i += kUnroll * tr) {
    Vec<In, V> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = body[i + u * tr];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = fam.reduce(acc[k], v[u].v[k], jb + (i + u * tr) * V + k);
    }
  }
  for (; i < nvec; i += tr) {
    const Vec<In, V> v = body[i];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = fam.reduce(acc[k], v.v[k], jb + i * V + k);
  }
  for (int64_t e = head + nvec * V + t; e < n; e += tr) acc[0] = fam.reduce(acc[0], p[e], j0 + e);
}

/// Dense rows: groups of tr threads (a power of two from 32 to kReduceBlock) each reduce one
/// unit (row, chunk) per step; every block runs the same number of steps, so the shared
/// combine across a group's warps may synchronise the whole block.
template <class In, class Fam> __global__ void __launch_bounds__(kReduceBlock) reduce_rows_kernel(ReduceArgs a, Fam fam, int tr) {
  using Acc = typename Fam::Acc;
  constexpr int V = vec_width<In>();
  __shared__ alignas(16) unsigned char storage[kReduceBlock / 32 * sizeof(Acc)];
  Acc* warp_acc = reinterpret_cast<Acc*>(storage);
  const int groups = kReduceBlock / tr, group = static_cast<int>(threadIdx.x) / tr, t = static_cast<int>(threadIdx.x) % tr;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps_per_group = tr / 32;
  const int64_t units = a.n_outer * a.chunks;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * groups; first < units; first += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t unit = first + group;
    const bool active = unit < units;
    const int64_t row = active ? unit / a.chunks : 0, chunk = active ? unit % a.chunks : 0;
    int64_t off[2];
    a.outer.get(static_cast<uint64_t>(row), off);
    Acc lanes[V];
#pragma unroll
    for (int k = 0; k < V; ++k) lanes[k] = fam.identity();
    if (active) {
      const int64_t begin = chunk * a.chunk_len, end = std::min(a.n_inner, begin + a.chunk_len);
      if (begin < end) fold_dense<In>(fam, lanes, reinterpret_cast<const In*>(a.x + off[1]) + begin, end - begin, begin, t, tr);
    }
    Acc acc = lanes[0];
#pragma unroll
    for (int k = 1; k < V; ++k) acc = fam.combine(acc, lanes[k]);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) acc = fam.combine(acc, shfl_down(acc, d));
    if (warps_per_group > 1) {
      __syncthreads();  // warp_acc may still be read by the previous step
      if (lane == 0) warp_acc[warp] = acc;
      __syncthreads();
      if (t == 0) {
        for (int w = 1; w < warps_per_group; ++w) acc = fam.combine(acc, warp_acc[warp + w]);
      }
    }
    if (active && t == 0) {
      if (a.chunks > 1) static_cast<Acc*>(a.partial)[unit] = acc;
      else fam.store(a.out + off[0], a.out_dtype, acc, a.n_inner);
    }
  }
}

struct ColumnArgs {
  OffsetCalc<2, uint64_t> rest;   // kept dims but the innermost: [0] out, [1] x
  OffsetCalc<1, uint64_t> inner;  // reduced dims: x
  int64_t n_cols, n_rest, n_inner, tiles;
  int64_t out_col_stride;         // bytes between neighbouring outputs of the innermost kept dim
  int64_t chunks, chunk_len;      // chunks > 1: accumulators go to partial[chunk][n_rest * n_cols]
  const char* x;
  char* out;
  DType out_dtype;
  void* partial;
};

/// Dense columns: thread (x, y) of a 32 x kColumnRows block owns V adjacent columns and the
/// reduced rows y, y + kColumnRows, ... of its chunk (blockIdx.y); kUnroll rows are loaded
/// before any is combined; then the kColumnRows partial results combine in shared memory.
template <class In, class Fam, int V>
__global__ void __launch_bounds__(32 * kColumnRows) reduce_columns_kernel(ColumnArgs a, Fam fam) {
  using Acc = typename Fam::Acc;
  __shared__ alignas(16) unsigned char storage[kColumnRows * 32 * V * sizeof(Acc)];
  Acc* shared_acc = reinterpret_cast<Acc*>(storage);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunk = blockIdx.y, begin = chunk * a.chunk_len, end = std::min(a.n_inner, begin + a.chunk_len);
  for (int64_t unit = blockIdx.x; unit < a.n_rest * a.tiles; unit += gridDim.x) {
    const int64_t rest_row = unit / a.tiles, col = (unit % a.tiles) * 32 * V + static_cast<int64_t>(tx) * V;
    const bool active = col < a.n_cols;
    int64_t off[2];
    a.rest.get(static_cast<uint64_t>(rest_row), off);
    const char* base = a.x + off[1] + col * static_cast<int64_t>(sizeof(In));
    Acc acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = fam.identity();
    if (active) {
      int64_t r = begin + ty;
      for (; r + (kUnroll - 1) * kColumnRows < end; r += kUnroll * kColumnRows) {
        Vec<In, V> v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          int64_t roff[1];
          a.inner.get(static_cast<uint64_t>(r + u * kColumnRows), roff);
          v[u] = *reinterpret_cast<const Vec<In, V>*>(base + roff[0]);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] = fam.reduce(acc[k], v[u].v[k], r + u * kColumnRows);
        }
      }
      for (; r < end; r += kColumnRows) {
        int64_t roff[1];
        a.inner.get(static_cast<uint64_t>(r), roff);
        const Vec<In, V> v = *reinterpret_cast<const Vec<In, V>*>(base + roff[0]);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = fam.reduce(acc[k], v.v[k], r);
      }
    }
    __syncthreads();  // shared_acc may still be read by the previous step
#pragma unroll
    for (int k = 0; k < V; ++k) shared_acc[(ty * 32 + tx) * V + k] = acc[k];
    __syncthreads();
    if (ty == 0 && active) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        Acc total = acc[k];
        for (int y = 1; y < kColumnRows; ++y) total = fam.combine(total, shared_acc[(y * 32 + tx) * V + k]);
        if (a.chunks > 1) {
          static_cast<Acc*>(a.partial)[chunk * a.n_rest * a.n_cols + rest_row * a.n_cols + col + k] = total;
        } else {
          fam.store(a.out + off[0] + (col + k) * a.out_col_stride, a.out_dtype, total, a.n_inner);
        }
      }
    }
  }
}

/// Second pass of split columns: thread per output, chunks combined in order.
template <class Fam> __global__ void __launch_bounds__(kReduceBlock) column_partials_kernel(ColumnArgs a, Fam fam) {
  using Acc = typename Fam::Acc;
  const Acc* partial = static_cast<const Acc*>(a.partial);
  const int64_t n = a.n_rest * a.n_cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step) {
    Acc acc = partial[o];
    for (int64_t c = 1; c < a.chunks; ++c) acc = fam.combine(acc, partial[c * n + o]);
    int64_t off[2];
    a.rest.get(static_cast<uint64_t>(o / a.n_cols), off);
    fam.store(a.out + off[0] + (o % a.n_cols) * a.out_col_stride, a.out_dtype, acc, a.n_inner);
  }
}

/// Blocks of `kernel` (with `threads` threads) resident on the whole device at once.
template <class Kernel> int64_t resident_blocks(Kernel kernel, int threads, int device) {
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return int64_t{std::max(per_sm, 1)} * device_properties(device).multiProcessorCount;
}

/// Reduces x's strided reduced dims (inner) for every kept index when the innermost kept dim
/// (outer dim 0) is dense in x.
template <class In, class Fam>
void run_columns(const Geometry<2>& outer, const Geometry<1>& inner, const ReduceArgs& ra, const Fam& fam, Device device) {
  using Acc = typename Fam::Acc;
  constexpr int VC = column_vec_width<In, Acc>();
  Geometry<2> rest;
  rest.ndim = outer.ndim - 1;
  for (int d = 1; d < outer.ndim; ++d) {
    rest.sizes[d - 1] = outer.sizes[d];
    for (int k = 0; k < 2; ++k) rest.strides[d - 1][k] = outer.strides[d][k];
    rest.numel *= outer.sizes[d];
  }
  ColumnArgs a{OffsetCalc<2, uint64_t>(rest), ra.inner, outer.sizes[0], rest.numel, ra.n_inner, 1, outer.strides[0][0],
               1, ra.n_inner, ra.x, ra.out, ra.out_dtype, nullptr};
  // Vectors need every column group on a 16-byte boundary in every reduced row.
  constexpr int64_t vec_bytes = VC * static_cast<int64_t>(sizeof(In));
  bool vector = VC > 1 && a.n_cols % VC == 0 && reinterpret_cast<uintptr_t>(a.x) % vec_bytes == 0;
  for (int d = 0; d < inner.ndim; ++d) vector = vector && inner.strides[d][0] % vec_bytes == 0;
  for (int d = 0; d < rest.ndim; ++d) vector = vector && rest.strides[d][1] % vec_bytes == 0;
  const int v = vector ? VC : 1;
  a.tiles = (a.n_cols + 32 * v - 1) / (32 * v);
  const int device_index = device.index;
  const int sms = device_properties(device_index).multiProcessorCount;
  const int64_t tile_blocks = a.n_rest * a.tiles;
  // Split the reduced dim when the column tiles alone leave SMs idle: a whole number of waves
  // (four) of equal blocks, keeping at least kUnroll * 4 rows per thread.
  const int64_t wanted = 4 * (vector ? resident_blocks(reduce_columns_kernel<In, Fam, VC>, 32 * kColumnRows, device_index)
                                     : resident_blocks(reduce_columns_kernel<In, Fam, 1>, 32 * kColumnRows, device_index));
  if (tile_blocks * 2 <= wanted) {
    const int64_t max_chunks = std::max<int64_t>(1, a.n_inner / (kColumnRows * kUnroll * 4));
    a.chunks = std::min<int64_t>({wanted / tile_blocks, max_chunks, 65535});
    a.chunk_len = (a.n_inner + a.chunks - 1) / a.chunks;
    a.chunks = (a.n_inner + a.chunk_len - 1) / a.chunk_len;
  }
  const cudaStream_t stream = current_raw_stream(device_index);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tile_blocks, int64_t{sms} * 64)), static_cast<unsigned>(a.chunks));
  const dim3 block(32, kColumnRows);
  std::optional<DeviceBuffer> partial;
  if (a.chunks > 1) {
    partial.emplace(static_cast<size_t>(a.chunks * a.n_rest * a.n_cols) * sizeof(Acc), device);
    a.partial = partial->get();
  }
  if (vector) reduce_columns_kernel<In, Fam, VC><<<grid, block, 0, stream>>>(a, fam);
  else reduce_columns_kernel<In, Fam, 1><<<grid, block, 0, stream>>>(a, fam);
  EMBER_CUDA_CHECK_LAUNCH();
  if (a.chunks > 1) {
    column_partials_kernel<<<grid_for(a.n_rest * a.n_cols, kReduceBlock, device_index), kReduceBlock, 0, stream>>>(a, fam);
    EMBER_CUDA_CHECK_LAUNCH();
  }
}

/// Runs family `fam` over x reduced on the dims with reduced[d] set, into out.
template <class In, class Fam>
void run_reduce(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, const Fam& fam) {
  Shape outer_sizes, inner_sizes;
  std::array<Shape, 2> outer_strides;
  std::array<Shape, 1> inner_strides;
  const Shape xs = byte_strides(x), os = byte_strides(out);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reduced[d]) {
      inner_sizes.push_back(x.size(d));
      inner_strides[0].push_back(xs[d]);
    } else {
      outer_sizes.push_back(x.size(d));
      outer_strides[0].push_back(os[d]);
      outer_strides[1].push_back(xs[d]);
    }
  }
  const Geometry<2> outer = collapse<2>(outer_sizes, outer_strides, op);
  const Geometry<1> inner = collapse<1>(inner_sizes, inner_strides, op);
  if (outer.numel == 0) return;
  const int device = out.device().index;
  const cudaStream_t stream = current_raw_stream(device);
  const int sms = device_properties(device).multiProcessorCount;

  ReduceArgs a{OffsetCalc<2, uint64_t>(outer), OffsetCalc<1, uint64_t>(inner), outer.numel, inner.numel, 1,
               inner.numel, static_cast<const char*>(x.raw_data()), static_cast<char*>(out.raw_data()), out.dtype(),
               nullptr};
  const bool inner_dense = inner.ndim == 1 && inner.strides[0][0] == static_cast<int64_t>(sizeof(In));
  constexpr int V = vec_width<In>();
  if (inner_dense && a.n_inner >= 32) {
    // Threads per row: enough for each to fold at least 4 x kUnroll vectors; several rows per
    // block when rows are short. Few long rows are split so every SM has groups to run.
    int tr = 32;
    while (tr < kReduceBlock && a.n_inner >= int64_t{2} * tr * V * kUnroll * 4) tr *= 2;
    const int64_t capacity = int64_t{sms} * (2048 / tr);
    const int64_t min_chunk = int64_t{kReduceBlock} * V * kUnroll * 4;
    if (a.n_outer * 2 <= capacity && a.n_inner >= 2 * min_chunk) {
      tr = kReduceBlock;
      // A whole number of waves (four) of equal groups.
      const int64_t groups = 4 * resident_blocks(reduce_rows_kernel<In, Fam>, kReduceBlock, device);
      a.chunks = std::max<int64_t>(1, std::min((a.n_inner + min_chunk - 1) / min_chunk, groups / a.n_outer));
      a.chunk_len = ((a.n_inner + a.chunks - 1) / a.chunks + V - 1) / V * V;
      a.chunks = (a.n_inner + a.chunk_len - 1) / a.chunk_len;
    }
    const int64_t per_block = kReduceBlock / tr;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((a.n_outer * a.chunks + per_block - 1) / per_block, int64_t{sms} * 64));
    std::optional<DeviceBuffer> partial;
    if (a.chunks > 1) {
      partial.emplace(static_cast<size_t>(a.n_outer * a.chunks) * sizeof(typename Fam::Acc), out.device());
      a.partial = partial->get();
    }
    reduce_rows_kernel<In><<<blocks, kReduceBlock, 0, stream>>>(a, fam, tr);
    EMBER_CUDA_CHECK_LAUNCH();
    if (a.chunks > 1) {
      reduce_partials_kernel<<<static_cast<unsigned>(std::min<int64_t>(a.n_outer, int64_t{sms} * 32)), kReduceBlock, 0, stream>>>(a, fam);
      EMBER_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  // Columns narrower than a warp's 16-byte vectors would leave most lanes idle: with many
  // outputs the thread-per-row kernel below reads them as well.
  const bool many_rows = a.n_outer >= static_cast<int64_t>(sms) * kReduceBlock;
  const int64_t column_bytes = outer.ndim >= 1 ? outer.sizes[0] * static_cast<int64_t>(sizeof(In)) : 0;
  if (!inner_dense && a.n_inner >= 1 && outer.ndim >= 1 && outer.strides[0][1] == static_cast<int64_t>(sizeof(In)) &&
      column_bytes >= 64 && (column_bytes >= 512 || !many_rows)) {
    run_columns<In>(outer, inner, a, fam, out.device());
    return;
  }
  if ((!inner_dense && many_rows) || (a.n_inner < 32 && a.n_outer >= static_cast<int64_t>(sms) * 64)) {
    reduce_thread_kernel<In><<<grid_for(a.n_outer, kReduceBlock, device), kReduceBlock, 0, stream>>>(a, fam);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  // Few long rows: split each into chunks of at least 16K elements so every SM gets work.
  constexpr int64_t kMinChunk = int64_t{1} << 14;
  if (a.n_outer < 2 * sms && a.n_inner >= 4 * kMinChunk) {
    a.chunks = std::min((a.n_inner + kMinChunk - 1) / kMinChunk, std::max<int64_t>(1, 4 * sms / a.n_outer));
    a.chunk_len = (a.n_inner + a.chunks - 1) / a.chunks;
  }
  const int threads = static_cast<int>(std::min<int64_t>(kReduceBlock, std::max<int64_t>(32, (a.chunk_len + 31) / 32 * 32)));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.n_outer * a.chunks, int64_t{sms} * 32));
  if (a.chunks == 1) {
    reduce_block_kernel<In><<<blocks, threads, 0, stream>>>(a, fam);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  DeviceBuffer partial(static_cast<size_t>(a.n_outer * a.chunks) * sizeof(typename Fam::Acc), out.device());
  a.partial = partial.get();
  reduce_block_kernel<In><<<blocks, threads, 0, stream>>>(a, fam);
  EMBER_CUDA_CHECK_LAUNCH();
  reduce_partials_kernel<<<static_cast<unsigned>(std::min<int64_t>(a.n_outer, int64_t{sms} * 32)), kReduceBlock, 0, stream>>>(a, fam);
  EMBER_CUDA_CHECK_LAUNCH();
}


}  // namespace

// One per family, each in its own file.
void arith_float(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind);
void arith_int(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind);
void extreme(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind);
void logical(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind);
void arg(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool is_max);

}  // namespace ember::cuda::reduce_engine
