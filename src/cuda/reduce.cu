// CUDA reductions (sum, prod, mean, amax, amin, any, all) and argmax/argmin.
//
// One engine: the kept dims form the "outer" index space (out and x offsets from one
// OffsetCalc), the reduced dims the "inner" one (x offsets from another), so any set of dims on
// any strides reduces as rows of an [outer, inner] view without copies. Three schedules:
//   - block per row: the threads of a block stride over the row, then a warp-shuffle/shared
//     tree (reduced dims dense in memory, or few rows);
//   - thread per row: each thread walks its row serially; neighbouring threads read
//     neighbouring memory when the reduced dims are not the fastest ones;
//   - split rows: few long rows are cut into chunks reduced by separate blocks into a scratch
//     buffer of accumulators, which a second pass combines (and finalises).
// A reduction family fixes the accumulator: real floats sum/prod/mean in f64 (so the result
// matches the CPU closely whatever the order), integers in 64 bits with wrap-around, complex in
// complex128; amax/amin in the compute type with NaN propagating; any/all in bool; argmax/argmin
// carry (value, index) with NaN winning and the lowest index winning ties, like torch.
// The order of operations is fixed, so results are deterministic run to run.
#include "cuda/loops.cuh"

namespace ember::cuda {
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
  const bool many_rows = a.n_outer >= static_cast<int64_t>(sms) * kReduceBlock;
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

const char* reduce_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "prod", "mean", "amax", "amin", "any", "all"};
  return names[static_cast<int>(op)];
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  const char* op_name = reduce_name(op);
  DeviceGuard guard(out.device().index);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (op) {
      case ReduceOp::Sum: case ReduceOp::Prod: case ReduceOp::Mean:
        EMBER_CHECK(op != ReduceOp::Mean || is_inexact_v<T>, op_name,
                    "dtype: expected a floating point or complex type, got {}", name(x.dtype()));
        run_reduce<T>(op_name, x, reduced, out, ArithFamily<T>{op});
        break;
      case ReduceOp::Amax: case ReduceOp::Amin:
        if constexpr (is_complex_v<T>) {
          fail(op_name, "dtype: expected a real type, got {}", name(x.dtype()));
        } else {
          run_reduce<T>(op_name, x, reduced, out, ExtremeFamily<T>{op});
        }
        break;
      case ReduceOp::Any: case ReduceOp::All:
        run_reduce<T>(op_name, x, reduced, out, LogicalFamily<T>{op});
        break;
    }
  });
}

void arg_reduce(ArgReduceOp op, const Tensor& x, int64_t dim, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  if (x.dim() > 0) reduced[static_cast<size_t>(dim)] = true;
  const char* op_name = op == ArgReduceOp::Argmax ? "argmax" : "argmin";
  DeviceGuard guard(out.device().index);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_v<T>) {
      fail(op_name, "dtype: expected a real type, got {}", name(x.dtype()));
    } else {
      run_reduce<T>(op_name, x, reduced, out, ArgFamily<T>{op == ArgReduceOp::Argmax});
    }
  });
}

}  // namespace ember::cuda
