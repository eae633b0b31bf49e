// CUDA arange / linspace / logspace with the CPU backend's formulas (src/cpu/range.cpp, which
// reproduces torch 2.15 CPU bit for bit): the same fused multiply-adds in the same types, and
// explicitly unfused operations where the CPU does not fuse (nvcc would), so the affine ranges
// equal the CPU's bit for bit; logspace goes through the device's pow, which may differ from
// glibc's in the last bit of the double.
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

template <class T> constexpr bool is_fp8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;
template <class T> constexpr bool is_linspace_integer_v =
    std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> ||
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

template <class T> struct real_of { using type = T; };
template <class T> struct real_of<::cuda::std::complex<T>> { using type = T; };

template <class T, class Value> __global__ void __launch_bounds__(kBlock) range_kernel(T* p, int64_t n, int64_t stride, Value value) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) p[i * stride] = value(i);
}

template <class T, class Value> void fill_range(const Tensor& out, const Value& value) {
  const int64_t n = out.numel(), stride = out.dim() == 0 ? 1 : out.stride(0);
  const int device = out.device().index;
  range_kernel<T><<<grid_for(n, kBlock, device), kBlock, 0, current_raw_stream(device)>>>(static_cast<T*>(out.raw_data()), n, stride, value);
  EMBER_CUDA_CHECK_LAUNCH();
}

[[noreturn]] void refuse(const char* op, DType d) {
  fail(op, "dtype: expected one of uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64{}, got {}",
       std::string_view(op) == "arange" ? "" : ", complex64, complex128", name(d));
}

/// torch's vectorised arange: blocks of 2 * V from element 0, then a scalar tail; Acc is the
/// accumulate type, Out the stored type.
template <class Out, class Acc, int V> struct ArangeValue {
  Acc start, step;
  int64_t n;
  __device__ Out operator()(int64_t i) const {
    const int64_t vector_end = n / (2 * V) * (2 * V);
    if (i >= vector_end) return Out(std::fma(step, static_cast<Acc>(i), start));
    const int64_t block = i - i % V;
    const Out base = Out(std::fma(step, static_cast<Acc>(block), start));
    return Out(std::fma(static_cast<Acc>(i - block), step, static_cast<Acc>(base)));
  }
};

template <class T> struct ArangeIntegerValue {
  uint64_t start, step;  // int64 wrap-around arithmetic
  __device__ T operator()(int64_t i) const { return static_cast<T>(start + step * static_cast<uint64_t>(i)); }
};

template <class Acc> __device__ Acc linspace_fused(Acc start, Acc end, Acc step, int64_t i, int64_t n) {
  return i < n / 2 ? std::fma(step, static_cast<Acc>(i), start) : std::fma(-step, static_cast<Acc>(n - 1 - i), end);
}

/// Fused two-sided linspace in Acc, converted to T (f32/f64/bf16, complex, integers).
template <class T, class Acc> struct LinspaceFusedValue {
  Acc start, end, step;
  int64_t n;
  __device__ T operator()(int64_t i) const { return convert<T>(linspace_fused(start, end, step, i, n)); }
};

/// float16's unfused form.
struct LinspaceHalfValue {
  float start, end, step;
  int64_t n;
  __device__ Half operator()(int64_t i) const {
    return Half(i < n / 2 ? add_rn(start, mul_rn(step, static_cast<float>(i)))
                          : sub_rn(end, mul_rn(step, static_cast<float>(n - 1 - i))));
  }
};

/// base ** (two-sided exponent, unfused, in double).
template <class T> struct LogspaceValue {
  double start, end, step, base;
  int64_t n;
  __device__ T operator()(int64_t i) const {
    const double e = i < n / 2 ? add_rn(start, mul_rn(step, static_cast<double>(i)))
                               : sub_rn(end, mul_rn(step, static_cast<double>(n - 1 - i)));
    return convert<T>(std::pow(base, e));
  }
};

template <class T> void linear(double start, double end, const Tensor& out) {
  const int64_t n = out.numel();
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, complex128>) {
    fill_range<T>(out, LinspaceFusedValue<T, double>{start, end, (end - start) / static_cast<double>(n - 1), n});
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, complex64>) {
    const float s = static_cast<float>(start), e = static_cast<float>(end);
    fill_range<T>(out, LinspaceFusedValue<T, float>{s, e, (e - s) / static_cast<float>(n - 1), n});
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const float s = static_cast<float>(T(static_cast<float>(start)));
    const float e = static_cast<float>(T(static_cast<float>(end)));
    const float step = (e - s) / static_cast<float>(n - 1);
    if constexpr (std::is_same_v<T, BFloat16>) fill_range<T>(out, LinspaceFusedValue<T, float>{s, e, step, n});
    else fill_range<T>(out, LinspaceHalfValue{s, e, step, n});
  } else if constexpr (is_linspace_integer_v<T>) {
    const T s = static_cast<T>(static_cast<int64_t>(start)), e = static_cast<T>(static_cast<int64_t>(end));
    const double step = (static_cast<double>(e) - static_cast<double>(s)) / static_cast<double>(n - 1);
    fill_range<T>(out, LinspaceFusedValue<T, double>{static_cast<double>(s), static_cast<double>(e), step, n});
  } else {
    refuse("linspace", out.dtype());
  }
}

template <class T> void logarithmic(double start, double end, double base, const Tensor& out) {
  const int64_t n = out.numel();
  if constexpr ((is_float_v<T> && !is_fp8_v<T>) || is_complex_v<T>) {
    using Real = typename real_of<T>::type;
    using C = compute_t<Real>;
    const Real s = Real(static_cast<C>(start)), e = Real(static_cast<C>(end));
    const Real diff = Real(static_cast<C>(e) - static_cast<C>(s));
    const double step = static_cast<double>(static_cast<C>(diff)) / static_cast<double>(n - 1);
    fill_range<T>(out, LogspaceValue<T>{static_cast<double>(static_cast<C>(s)), static_cast<double>(static_cast<C>(e)),
                                              step, base, n});
  } else if constexpr (is_linspace_integer_v<T>) {
    const T s = static_cast<T>(static_cast<int64_t>(start)), e = static_cast<T>(static_cast<int64_t>(end));
    const double step = static_cast<double>(e - s) / static_cast<double>(n - 1);
    fill_range<T>(out, LogspaceValue<T>{static_cast<double>(s), static_cast<double>(e), step,
                                              static_cast<double>(static_cast<float>(base)), n});
  } else {
    refuse("logspace", out.dtype());
  }
}

}  // namespace

void arange(double start, double step, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      fill_range<T>(out, ArangeValue<double, double, 4>{start, step, n});
    } else if constexpr (std::is_same_v<T, float>) {
      fill_range<T>(out, ArangeValue<float, double, 8>{start, step, n});
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      fill_range<T>(out, ArangeValue<T, float, 16>{static_cast<float>(start), static_cast<float>(step), n});
    } else if constexpr (is_linspace_integer_v<T>) {
      fill_range<T>(out, ArangeIntegerValue<T>{static_cast<uint64_t>(static_cast<int64_t>(start)),
                                               static_cast<uint64_t>(static_cast<int64_t>(step))});
    } else {
      refuse("arange", out.dtype());
    }
  });
}

void linspace(double start, double end, bool log, double base, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_fp8_v<T> || std::is_same_v<T, bool> || std::is_same_v<T, uint16_t> ||
                  std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>) {
      // torch fills a one-element range for every dtype but has no kernel for these.
      if (n == 1) {
        fill(out, log ? Scalar(std::pow(base, start)) : Scalar(start));
        return;
      }
      refuse(log ? "logspace" : "linspace", out.dtype());
    } else if (n == 1) {
      fill(out, log ? Scalar(std::pow(base, start)) : Scalar(start));
    } else if (log) {
      logarithmic<T>(start, end, base, out);
    } else {
      linear<T>(start, end, out);
    }
  });
}

}  // namespace ember::cuda
