// CUDA sort, topk, cumsum and histc. Nothing here synchronises with the host.
//
// sort/topk: every element becomes an unsigned radix key whose order is torch's (NaN above
// everything, -0.0 equal to +0.0) next to its position along the dim; CUB's stable radix sort
// orders the keys (one sort for a single row, a segmented sort per chunk of rows otherwise);
// a last pass gathers values and writes indices. Stable: equal keys keep their order.
// cumsum: one block per row with a CUB block scan when the dim is dense, one thread per row
// otherwise; accumulates like the reductions (f64 for real floats, 64-bit integers, complex128).
// histc: min == max takes the data's range, computed on the device into scratch memory that the
// counting kernel reads (NaN is skipped there: the host cannot be told without a sync, where the
// CPU throws); counts go to shared-memory histograms merged with atomics.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

// ---- radix keys ------------------------------------------------------------------------------

template <class T> using key_t = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

template <class T> __device__ key_t<T> radix_key(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (v != v) return ~uint64_t{0};
    if (v == 0) v = 0;  // -0.0 sorts with +0.0
    uint64_t u;
    memcpy(&u, &v, 8);
    return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
  } else if constexpr (is_float_v<T>) {
    float f = static_cast<float>(v);
    if (f != f) return ~uint32_t{0};
    if (f == 0) f = 0;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u >> 31) ? ~u : (u | 0x80000000u);
  } else if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>) {
    return static_cast<key_t<T>>(v);
  } else if constexpr (sizeof(T) == 8) {
    return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  } else {
    return static_cast<uint32_t>(static_cast<int32_t>(v)) ^ 0x80000000u;
  }
}

struct RowArgs {
  OffsetCalc<3, uint64_t> rows;  // the other dims: [0] x, [1] values (or out), [2] indices
  int64_t n;                     // elements per row along dim
  int64_t stride[3];             // bytes between elements along dim, per operand
};

template <class T, class Key>
__global__ void __launch_bounds__(kBlock) make_keys_kernel(RowArgs a, int64_t total, const char* x, Key* keys, int64_t* positions) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t row = i / a.n, j = i - row * a.n;
    int64_t off[3];
    a.rows.get(static_cast<uint64_t>(row), off);
    keys[i] = radix_key(*reinterpret_cast<const T*>(x + off[0] + j * a.stride[0]));
    positions[i] = j;
  }
}

/// values[row, j] = x[row, positions[row, j]], indices[row, j] = positions[row, j], j < count.
template <class T>
__global__ void __launch_bounds__(kBlock) gather_sorted_kernel(RowArgs a, int64_t rows, int64_t count, const char* x,
                                                               const int64_t* positions, char* values, char* indices) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t total = rows * count;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t row = i / count, j = i - row * count;
    int64_t off[3];
    a.rows.get(static_cast<uint64_t>(row), off);
    const int64_t p = positions[row * a.n + j];
    *reinterpret_cast<T*>(values + off[1] + j * a.stride[1]) = *reinterpret_cast<const T*>(x + off[0] + p * a.stride[0]);
    *reinterpret_cast<int64_t*>(indices + off[2] + j * a.stride[2]) = p;
  }
}

__global__ void segment_offsets_kernel(int* offsets, int count, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= count; i += gridDim.x * blockDim.x) offsets[i] = i * n;
}

/// Row geometry over every dim but `dim`, for up to three tensors of x's sizes along the others.
RowArgs row_args(const Tensor& x, int64_t dim, const Tensor& b, const Tensor& c, const char* op) {
  Shape sizes;
  std::array<Shape, 3> strides;
  const Shape s0 = byte_strides(x), s1 = byte_strides(b), s2 = byte_strides(c);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    sizes.push_back(x.size(d));
    strides[0].push_back(s0[d]);
    strides[1].push_back(s1[d]);
    strides[2].push_back(s2[d]);
  }
  RowArgs a{OffsetCalc<3, uint64_t>(collapse<3>(sizes, strides, op)), x.dim() == 0 ? 1 : x.size(dim), {0, 0, 0}};
  if (x.dim() > 0) a.stride[0] = s0[dim], a.stride[1] = s1[dim], a.stride[2] = s2[dim];
  return a;
}

/// Sorts every row of x along dim and writes the first `count` of each to values/indices.
void sort_rows(const char* op, const Tensor& x, int64_t dim, bool descending, int64_t count, const Tensor& values,
               const Tensor& indices) {
  if (x.numel() == 0 || count == 0) return;
  DeviceGuard guard(x.device().index);
  const Device dev = x.device();
  const int device = dev.index;
  const cudaStream_t stream = current_raw_stream(device);
  const RowArgs a = row_args(x, dim, values, indices, op);
  const int64_t total = x.numel(), rows = total / a.n;
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_v<T>) {
      fail(op, "dtype: expected a real type, got {}", name(x.dtype()));
    } else {
      using Key = key_t<T>;
      DeviceBuffer keys_in(total * sizeof(Key), dev), keys_out(total * sizeof(Key), dev);
      DeviceBuffer pos_in(total * sizeof(int64_t), dev), pos_out(total * sizeof(int64_t), dev);
      make_keys_kernel<T><<<grid_for(total, kBlock, device), kBlock, 0, stream>>>(
          a, total, static_cast<const char*>(x.raw_data()), keys_in.get<Key>(), pos_in.get<int64_t>());
      EMBER_CUDA_CHECK_LAUNCH();
      if (rows == 1) {
        size_t temp_bytes = 0;
        auto sort = [&](void* temp) {
          return descending
                     ? cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, keys_in.get<Key>(), keys_out.get<Key>(),
                                                                 pos_in.get<int64_t>(), pos_out.get<int64_t>(), total, 0,
                                                                 int(sizeof(Key) * 8), stream)
                     : cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in.get<Key>(), keys_out.get<Key>(),
                                                       pos_in.get<int64_t>(), pos_out.get<int64_t>(), total, 0,
                                                       int(sizeof(Key) * 8), stream);
        };
        EMBER_CUDA_CHECK(sort(nullptr));
        DeviceBuffer temp(temp_bytes, dev);
        EMBER_CUDA_CHECK(sort(temp.get()));
      } else {
        // CUB's segmented sort counts items in int: sort chunks of whole rows below 2^31 items.
        EMBER_CHECK(a.n <= INT32_MAX, op, "size along dim on CUDA: expected at most {}, got {}", INT32_MAX, a.n);
        const int64_t chunk_rows = std::min<int64_t>(rows, INT32_MAX / a.n);
        DeviceBuffer offsets((chunk_rows + 1) * sizeof(int), dev);
        segment_offsets_kernel<<<grid_for(chunk_rows + 1, kBlock, device), kBlock, 0, stream>>>(
            offsets.get<int>(), static_cast<int>(chunk_rows), static_cast<int>(a.n));
        EMBER_CUDA_CHECK_LAUNCH();
        for (int64_t first = 0; first < rows; first += chunk_rows) {
          const int segs = static_cast<int>(std::min(chunk_rows, rows - first));
          const int items = static_cast<int>(segs * a.n);
          const int64_t base = first * a.n;
          size_t temp_bytes = 0;
          auto sort = [&](void* temp) {
            const Key* kin = keys_in.get<Key>() + base;
            Key* kout = keys_out.get<Key>() + base;
            const int64_t* vin = pos_in.get<int64_t>() + base;
            int64_t* vout = pos_out.get<int64_t>() + base;
            const int* begin = offsets.get<int>();
            return descending ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                                    temp, temp_bytes, kin, kout, vin, vout, items, segs, begin, begin + 1, 0,
                                    int(sizeof(Key) * 8), stream)
                              : cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, kin, kout, vin, vout, items,
                                                                         segs, begin, begin + 1, 0,
                                                                         int(sizeof(Key) * 8), stream);
          };
          EMBER_CUDA_CHECK(sort(nullptr));
          DeviceBuffer temp(temp_bytes, dev);
          EMBER_CUDA_CHECK(sort(temp.get()));
        }
      }
      gather_sorted_kernel<T><<<grid_for(rows * count, kBlock, device), kBlock, 0, stream>>>(
          a, rows, count, static_cast<const char*>(x.raw_data()), pos_out.get<int64_t>(),
          static_cast<char*>(values.raw_data()), static_cast<char*>(indices.raw_data()));
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

// ---- cumsum ----------------------------------------------------------------------------------

template <class Out> using scan_acc_t =
    std::conditional_t<is_complex_v<Out>, complex128,
    std::conditional_t<is_float_v<Out>, double,
    std::conditional_t<std::is_unsigned_v<Out> && !std::is_same_v<Out, bool>, uint64_t, int64_t>>>;

constexpr int kScanBlock = 256, kScanItems = 4;

struct CumsumArgs {
  OffsetCalc<3, uint64_t> rows;  // [0] x, [1] out, [2] unused
  int64_t n_rows, n, x_stride, out_stride;
  const char* x;
  char* out;
  DType x_dtype;
};

template <class Out> __global__ void __launch_bounds__(kScanBlock) cumsum_block_kernel(CumsumArgs a) {
  using Acc = scan_acc_t<Out>;
  using Scan = cub::BlockScan<Acc, kScanBlock>;
  __shared__ typename Scan::TempStorage temp;
  for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
    int64_t off[3];
    a.rows.get(static_cast<uint64_t>(r), off);
    const char* x = a.x + off[0];
    char* out = a.out + off[1];
    Acc carry = Acc(0);
    for (int64_t base = 0; base < a.n; base += int64_t{kScanBlock} * kScanItems) {
      const int64_t first = base + int64_t{threadIdx.x} * kScanItems;
      Acc local[kScanItems];
      Acc running = Acc(0);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        if (first + k < a.n) running = running + load_converted<Acc>(x + (first + k) * a.x_stride, a.x_dtype);
        local[k] = running;
      }
      Acc before, block_total;
      Scan(temp).ExclusiveSum(running, before, block_total);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        if (first + k < a.n) *reinterpret_cast<Out*>(out + (first + k) * a.out_stride) = convert<Out>(carry + before + local[k]);
      }
      carry = carry + block_total;
      __syncthreads();  // temp is reused
    }
  }
}

template <class Out> __global__ void __launch_bounds__(kBlock) cumsum_thread_kernel(CumsumArgs a) {
  using Acc = scan_acc_t<Out>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < a.n_rows; r += step) {
    int64_t off[3];
    a.rows.get(static_cast<uint64_t>(r), off);
    Acc running = Acc(0);
    for (int64_t j = 0; j < a.n; ++j) {
      running = running + load_converted<Acc>(a.x + off[0] + j * a.x_stride, a.x_dtype);
      *reinterpret_cast<Out*>(a.out + off[1] + j * a.out_stride) = convert<Out>(running);
    }
  }
}

// ---- histc -----------------------------------------------------------------------------------

struct Range { double lo, hi; };

template <class T>
__global__ void __launch_bounds__(kBlock) minmax_partial_kernel(OffsetCalc<1, uint64_t> xs, int64_t n, const char* x, Range* partial) {
  double lo = INFINITY, hi = -INFINITY;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    xs.get(static_cast<uint64_t>(i), off);
    const double v = static_cast<double>(static_cast<compute_t<T>>(*reinterpret_cast<const T*>(x + off[0])));
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  lo = block_reduce(lo, [](double p, double q) { return fmin(p, q); });
  hi = block_reduce(hi, [](double p, double q) { return fmax(p, q); });
  if (threadIdx.x == 0) partial[blockIdx.x] = {lo, hi};
}

__global__ void __launch_bounds__(kBlock) minmax_final_kernel(Range* partial, int count) {
  double lo = INFINITY, hi = -INFINITY;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    lo = fmin(lo, partial[i].lo);
    hi = fmax(hi, partial[i].hi);
  }
  lo = block_reduce(lo, [](double p, double q) { return fmin(p, q); });
  hi = block_reduce(hi, [](double p, double q) { return fmax(p, q); });
  if (threadIdx.x == 0) partial[0] = {lo, hi};
}

constexpr int64_t kSharedBins = 8192;

/// Counts x into bins over [lo, hi] (the data's range from `range` when given) with the CPU
/// backend's arithmetic (torch's): lo == hi widens to [lo - 1, hi + 1]; edges, width and bin
/// count rounded to the input type, bin = (x - lo) * bins / width with every step rounded to
/// the input type, clamped to the last bin; values outside [lo, hi] and NaN ignored.
template <class T>
__global__ void __launch_bounds__(kBlock) histc_kernel(OffsetCalc<1, uint64_t> xs, int64_t n, const char* x, int64_t bins,
                                                       Range given, const Range* range, unsigned long long* counts) {
  using V = compute_t<T>;
  extern __shared__ unsigned int shared_counts[];
  const bool use_shared = bins <= kSharedBins;
  if (use_shared) {
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) shared_counts[b] = 0;
    __syncthreads();
  }
  Range r = range != nullptr ? *range : given;
  if (r.lo == r.hi) r = {r.lo - 1, r.hi + 1};
  auto rnd = [](V v) { return static_cast<V>(T(v)); };
  const V lo = rnd(static_cast<V>(r.lo)), hi = rnd(static_cast<V>(r.hi)), width = rnd(hi - lo);
  const V nbins = rnd(static_cast<V>(bins));
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    xs.get(static_cast<uint64_t>(i), off);
    const V v = static_cast<V>(*reinterpret_cast<const T*>(x + off[0]));
    if (!(v >= lo && v <= hi)) continue;
    int64_t b = convert<int64_t>(rnd(rnd(rnd(v - lo) * nbins) / width));
    b = b < 0 ? 0 : (b >= bins ? bins - 1 : b);
    if (use_shared) atomicAdd(&shared_counts[b], 1u);
    else atomicAdd(&counts[b], 1ull);
  }
  if (use_shared) {
    __syncthreads();
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) {
      if (shared_counts[b] != 0) atomicAdd(&counts[b], static_cast<unsigned long long>(shared_counts[b]));
    }
  }
}

template <class T> __global__ void counts_to_out_kernel(const unsigned long long* counts, int64_t bins, char* out, int64_t stride) {
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < bins; b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    *reinterpret_cast<T*>(out + b * stride) = convert<T>(static_cast<double>(counts[b]));
  }
}

}  // namespace

void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  sort_rows("sort", x, dim, descending, x.dim() == 0 ? 1 : x.size(dim), values, indices);
}

void topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values, const Tensor& indices) {
  sort_rows("topk", x, dim, largest, k, values, indices);
}

void cumsum(const Tensor& x, int64_t dim, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  const int device = out.device().index;
  const RowArgs rows = row_args(x, dim, out, out, "cumsum");
  const int64_t n = rows.n;
  CumsumArgs a{rows.rows, x.numel() / n, n, rows.stride[0], rows.stride[1], static_cast<const char*>(x.raw_data()),
               static_cast<char*>(out.raw_data()), x.dtype()};
  const int sms = device_properties(device).multiProcessorCount;
  const cudaStream_t stream = current_raw_stream(device);
  dispatch(out.dtype(), [&](auto tag) {
    using Out = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Out, bool>) {
      fail("cumsum", "output dtype: expected a numeric type, got {}", name(out.dtype()));
    } else {
      const bool dense = a.x_stride == static_cast<int64_t>(x.itemsize());
      if (!dense && a.n_rows >= static_cast<int64_t>(sms) * kBlock) {
        cumsum_thread_kernel<Out><<<grid_for(a.n_rows, kBlock, device), kBlock, 0, stream>>>(a);
      } else {
        cumsum_block_kernel<Out><<<static_cast<unsigned>(std::min<int64_t>(a.n_rows, int64_t{sms} * 16)), kScanBlock, 0, stream>>>(a);
      }
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

void histc(const Tensor& x, int64_t bins, double min, double max, const Tensor& out) {
  if (bins == 0) return;
  DeviceGuard guard(out.device().index);
  const Device dev = out.device();
  const int device = dev.index;
  const cudaStream_t stream = current_raw_stream(device);
  const Geometry<1> xg = collapse<1>(x.sizes(), {byte_strides(x)}, "histc");
  const OffsetCalc<1, uint64_t> xs(xg);
  const int64_t n = x.numel();
  const char* xp = static_cast<const char*>(x.raw_data());
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || sizeof(T) == 1) {
      fail("histc", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      DeviceBuffer counts(static_cast<size_t>(bins) * sizeof(unsigned long long), dev);
      EMBER_CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, static_cast<size_t>(bins) * sizeof(unsigned long long), stream));
      const unsigned blocks = grid_for(n, kBlock, device);
      const bool data_range = min == max && n > 0;
      DeviceBuffer range(data_range ? sizeof(Range) * blocks : 0, dev);
      if (data_range) {
        minmax_partial_kernel<T><<<blocks, kBlock, 0, stream>>>(xs, n, xp, range.get<Range>());
        EMBER_CUDA_CHECK_LAUNCH();
        minmax_final_kernel<<<1, kBlock, 0, stream>>>(range.get<Range>(), static_cast<int>(blocks));
        EMBER_CUDA_CHECK_LAUNCH();
      }
      if (n > 0) {
        const size_t shared = bins <= kSharedBins ? static_cast<size_t>(bins) * sizeof(unsigned int) : 0;
        histc_kernel<T><<<blocks, kBlock, shared, stream>>>(xs, n, xp, bins, Range{min, max},
                                                              data_range ? range.get<Range>() : nullptr,
                                                              counts.get<unsigned long long>());
        EMBER_CUDA_CHECK_LAUNCH();
      }
      counts_to_out_kernel<T><<<grid_for(bins, kBlock, device), kBlock, 0, stream>>>(
          counts.get<unsigned long long>(), bins, static_cast<char*>(out.raw_data()),
          out.stride(0) * static_cast<int64_t>(out.itemsize()));
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
