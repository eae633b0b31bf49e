// CUDA softmax and log_softmax along one dim.
//
// Rows are the positions of the other dims (an OffsetCalc over them gives the x and out
// offsets), elements of a row are `stride(dim)` apart. Three passes per row with the CPU
// backend's arithmetic: the max and exp(x - max) in the compute type (float for f16/bf16/f32,
// double for f64), their sum in double, then exp(x - max) * (1 / sum), or (x - max) - log(sum)
// with the sum and its log rounded to the input type as torch does. A row of -inf (or holding
// NaN or +inf) gives NaN like torch. A row whose elements are dense in memory is reduced by one
// block; rows along a strided dim by one thread each, so neighbouring threads read
// neighbouring memory.
// Few long dense rows (decode over a vocabulary) go to the split-row kernel of softmax_decode.h.
#include "cuda/loops.cuh"
#include "cuda/softmax_decode.h"

namespace ember::cuda {
namespace {

constexpr int kSoftmaxBlock = 512;

template <class C> __device__ C nan_max(C a, C b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }

struct SoftmaxArgs {
  OffsetCalc<2, uint64_t> rows;  // [0] out, [1] x
  int64_t n_rows, n;             // rows, elements per row
  int64_t x_stride, out_stride;  // bytes between a row's elements
  const char* x;
  char* out;
  bool log;
};

template <class T> __device__ compute_t<T> load(const char* row, int64_t j, int64_t stride) {
  return static_cast<compute_t<T>>(*reinterpret_cast<const T*>(row + j * stride));
}
template <class T> __device__ void store(char* row, int64_t j, int64_t stride, compute_t<T> v) {
  *reinterpret_cast<T*>(row + j * stride) = convert<T>(v);
}

/// Writes elements first, first + step, ... of a row given its max and sum of exponentials.
template <class T>
__device__ void write_row(const char* x, char* out, const SoftmaxArgs& a, compute_t<T> m, double sum, int64_t first, int64_t step) {
  using C = compute_t<T>;
  if (a.log) {
    const C log_sum = static_cast<C>(T(std::log(static_cast<C>(T(static_cast<C>(sum))))));
    for (int64_t j = first; j < a.n; j += step) store<T>(out, j, a.out_stride, (load<T>(x, j, a.x_stride) - m) - log_sum);
  } else {
    const double inv = 1.0 / sum;
    for (int64_t j = first; j < a.n; j += step) {
      store<T>(out, j, a.out_stride, static_cast<C>(static_cast<double>(std::exp(load<T>(x, j, a.x_stride) - m)) * inv));
    }
  }
}

template <class T> __global__ void __launch_bounds__(kSoftmaxBlock) softmax_block_kernel(SoftmaxArgs a) {
  using C = compute_t<T>;
  __shared__ C broadcast;
  __shared__ double sum;
  for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
    int64_t off[2];
    a.rows.get(static_cast<uint64_t>(r), off);
    const char* x = a.x + off[1];
    char* out = a.out + off[0];
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) m = nan_max(m, load<T>(x, j, a.x_stride));
    m = block_reduce(m, [](C p, C q) { return nan_max(p, q); });
    if (threadIdx.x == 0) broadcast = m;
    __syncthreads();
    m = broadcast;
    double s = 0;
    for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) s += static_cast<double>(std::exp(load<T>(x, j, a.x_stride) - m));
    s = block_reduce(s, [](double p, double q) { return p + q; });
    if (threadIdx.x == 0) sum = s;
    __syncthreads();
    write_row<T>(x, out, a, m, sum, threadIdx.x, blockDim.x);
    __syncthreads();  // `broadcast` and `sum` are reused by the next row
  }
}

template <class T> __global__ void __launch_bounds__(kBlock) softmax_thread_kernel(SoftmaxArgs a) {
  using C = compute_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < a.n_rows; r += step) {
    int64_t off[2];
    a.rows.get(static_cast<uint64_t>(r), off);
    const char* x = a.x + off[1];
    char* out = a.out + off[0];
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t j = 0; j < a.n; ++j) m = nan_max(m, load<T>(x, j, a.x_stride));
    double s = 0;
    for (int64_t j = 0; j < a.n; ++j) s += static_cast<double>(std::exp(load<T>(x, j, a.x_stride) - m));
    write_row<T>(x, out, a, m, s, 0, 1);
  }
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (out.numel() == 0) return;
  const char* op = log ? "log_softmax" : "softmax";
  EMBER_CHECK(is_floating_point(x.dtype()) && !is_fp8(x.dtype()), op,
              "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
  DeviceGuard guard(out.device().index);
  if (out.is_contiguous() && softmax_decode_applies(x, dim)) {  // few long rows: the split-row kernel
    softmax_decode(x, log, out);
    return;
  }
  const int device = out.device().index;
  Shape row_sizes;
  std::array<Shape, 2> row_strides;
  const Shape xs = byte_strides(x), os = byte_strides(out);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    row_sizes.push_back(x.size(d));
    row_strides[0].push_back(os[d]);
    row_strides[1].push_back(xs[d]);
  }
  const Geometry<2> rows = collapse<2>(row_sizes, row_strides, op);
  const bool scalar = x.dim() == 0;
  SoftmaxArgs a{OffsetCalc<2, uint64_t>(rows), rows.numel, scalar ? 1 : x.size(dim), scalar ? 0 : xs[dim],
                scalar ? 0 : os[dim], static_cast<const char*>(x.raw_data()), static_cast<char*>(out.raw_data()), log};
  const int sms = device_properties(device).multiProcessorCount;
  const cudaStream_t stream = current_raw_stream(device);
  const bool dense_rows = a.x_stride == static_cast<int64_t>(x.itemsize());
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T> && sizeof(T) > 1) {
      if (!dense_rows && a.n_rows >= static_cast<int64_t>(sms) * kBlock) {
        softmax_thread_kernel<T><<<grid_for(a.n_rows, kBlock, device), kBlock, 0, stream>>>(a);
      } else {
        const int threads = static_cast<int>(std::min<int64_t>(kSoftmaxBlock, (a.n + 31) / 32 * 32));
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(a.n_rows, int64_t{sms} * 32));
        softmax_block_kernel<T><<<blocks, threads, 0, stream>>>(a);
      }
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ember::cuda
