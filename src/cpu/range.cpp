// CPU arange / linspace / logspace, reproducing torch's CPU kernels bit for bit.
//
// torch's kernels are compiled with floating-point contraction and, for arange, vectorised, so
// their results are not those of the plain formulas. The formulas below were pinned down by
// comparing candidate models with torch 2.15 CPU element by element (scripts/fixtures/
// make_range.py writes the fixtures tests/cpu/range_test.cpp checks):
//   linspace f32/f64: step = (end - start) / (steps - 1) in the type; out[i] = fma(step, i, start)
//     for i < steps / 2, else fma(-step, steps - 1 - i, end) (both endpoints exact).
//   linspace f16/bf16: start, end rounded to the type; step in float; out[i] = start + step * i
//     (or end - step * (steps - 1 - i)) in float, then rounded to the type; fused for bf16, not
//     fused for f16.
//   linspace integers: start, end converted to the type, step in double, the same two-sided
//     formula fused in double, truncated.
//   logspace: exponent = start + step * i (two-sided, double, not fused) with step =
//     double(end - start in the type) / (steps - 1); out = pow(base, exponent); integer types use
//     base rounded to float and truncate.
//   arange: blocks of 2V elements (V = 4 for f64, 8 for f32, 16 for f16/bf16, as torch's AVX2
//     Vectorized<T>::arange) with base = round(fma(step, block_start, start)) and element
//     k = round(fma(k, step, base)); the tail after the last whole block is
//     round(fma(step, i, start)). f64/f32 compute in double, f16/bf16 in float; integer types
//     truncate start and step to int64 first (torch's accumulate type).
//   steps == 1: start (linspace) or pow(base, start) (logspace) converted to the type.
//   Complex outputs: real part as the real type's formula, imaginary part 0 (ember's arguments
//   are real). torch's complex logspace goes through complex pow and differs in the last bits.
// torch splits ranges over 32768 elements across threads, which moves its arange blocks; ember
// always blocks from element 0.
#include <cmath>
#include <type_traits>

#include "backend.h"
#include "cpu/loops.h"

namespace ember::cpu {
namespace {

inline constexpr int64_t kRangeParallelGrain = 1 << 15;

template <class T> constexpr bool is_fp8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;
/// The integer types torch's range kernels accept.
template <class T> constexpr bool is_linspace_integer_v =
    std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> ||
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

/// out[i * stride] = value(i) for i in [0, n), in parallel for long ranges.
template <class T, class Value> void fill_range(const Tensor& out, Value&& value) {
  T* p = static_cast<T*>(out.raw_data());
  const int64_t n = out.numel(), stride = out.dim() == 0 ? 1 : out.stride(0);
#pragma omp parallel for schedule(static) if (n >= kRangeParallelGrain)
  for (int64_t i = 0; i < n; ++i) p[i * stride] = value(i);
}

template <class T> struct real_of { using type = T; };
template <class T> struct real_of<std::complex<T>> { using type = T; };

[[noreturn]] void refuse(const char* op, DType d) {
  fail(op, "dtype: expected one of uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64{}, got {}",
       std::string_view(op) == "arange" ? "" : ", complex64, complex128", name(d));
}

/// The element of torch's vectorised arange: blocks of 2 * V from element 0, then a scalar tail.
/// Acc is the accumulate type (double or float), Out the stored type.
template <class Out, class Acc, int V> Out arange_element(Acc start, Acc step, int64_t i, int64_t n) {
  const int64_t vector_end = n / (2 * V) * (2 * V);
  if (i >= vector_end) return Out(std::fma(step, static_cast<Acc>(i), start));
  const int64_t block = i - i % V;
  const Out base = Out(std::fma(step, static_cast<Acc>(block), start));
  return Out(std::fma(static_cast<Acc>(i - block), step, static_cast<Acc>(base)));
}

/// torch's two-sided linspace with fused multiply-adds in Acc.
template <class Acc> Acc linspace_fused(Acc start, Acc end, Acc step, int64_t i, int64_t n) {
  return i < n / 2 ? std::fma(step, static_cast<Acc>(i), start) : std::fma(-step, static_cast<Acc>(n - 1 - i), end);
}

template <class T> void linear(double start, double end, const Tensor& out) {
  const int64_t n = out.numel();
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::complex<double>>) {
    const double step = (end - start) / static_cast<double>(n - 1);
    fill_range<T>(out, [=](int64_t i) { return T(linspace_fused(start, end, step, i, n)); });
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, std::complex<float>>) {
    const float s = static_cast<float>(start), e = static_cast<float>(end);
    const float step = (e - s) / static_cast<float>(n - 1);
    fill_range<T>(out, [=](int64_t i) { return T(linspace_fused(s, e, step, i, n)); });
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const float s = static_cast<float>(T(static_cast<float>(start)));
    const float e = static_cast<float>(T(static_cast<float>(end)));
    const float step = (e - s) / static_cast<float>(n - 1);
    if constexpr (std::is_same_v<T, BFloat16>) {
      fill_range<T>(out, [=](int64_t i) { return T(linspace_fused(s, e, step, i, n)); });
    } else {
      fill_range<T>(out, [=](int64_t i) {
        return T(i < n / 2 ? s + step * static_cast<float>(i) : e - step * static_cast<float>(n - 1 - i));
      });
    }
  } else if constexpr (is_linspace_integer_v<T>) {
    const T s = static_cast<T>(static_cast<int64_t>(start)), e = static_cast<T>(static_cast<int64_t>(end));
    const double step = (static_cast<double>(e) - static_cast<double>(s)) / static_cast<double>(n - 1);
    fill_range<T>(out, [=](int64_t i) {
      return static_cast<T>(linspace_fused(static_cast<double>(s), static_cast<double>(e), step, i, n));
    });
  } else {
    refuse("linspace", out.dtype());
  }
}

template <class T> void logarithmic(double start, double end, double base, const Tensor& out) {
  const int64_t n = out.numel();
  auto exponent = [n](double s, double e, double step, int64_t i) {
    return i < n / 2 ? s + step * static_cast<double>(i) : e - step * static_cast<double>(n - 1 - i);
  };
  if constexpr ((is_float_v<T> && !is_fp8_v<T>) || is_complex_v<T>) {
    using Real = typename real_of<T>::type;
    const Real s = Real(static_cast<compute_t<Real>>(start)), e = Real(static_cast<compute_t<Real>>(end));
    // end - start in the type's own arithmetic (16-bit types: float, then rounded back).
    const Real diff = Real(static_cast<compute_t<Real>>(e) - static_cast<compute_t<Real>>(s));
    const double step = static_cast<double>(static_cast<compute_t<Real>>(diff)) / static_cast<double>(n - 1);
    // Captured in the type and widened per element: GCC 12's SLP vectoriser folds a paired
    // double -> float -> double round trip at the capture site into no rounding at all.
    const compute_t<Real> sc = static_cast<compute_t<Real>>(s), ec = static_cast<compute_t<Real>>(e);
    fill_range<T>(out, [=](int64_t i) {
      return convert<T>(std::pow(base, exponent(static_cast<double>(sc), static_cast<double>(ec), step, i)));
    });
  } else if constexpr (is_linspace_integer_v<T>) {
    const T s = static_cast<T>(static_cast<int64_t>(start)), e = static_cast<T>(static_cast<int64_t>(end));
    const double step = static_cast<double>(e - s) / static_cast<double>(n - 1);
    const double base_f = static_cast<float>(base);
    fill_range<T>(out, [=](int64_t i) {
      return static_cast<T>(std::pow(base_f, exponent(static_cast<double>(s), static_cast<double>(e), step, i)));
    });
  } else {
    refuse("logspace", out.dtype());
  }
}

}  // namespace

void arange(double start, double step, const Tensor& out) {
  const int64_t n = out.numel();
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      fill_range<T>(out, [=](int64_t i) { return arange_element<double, double, 4>(start, step, i, n); });
    } else if constexpr (std::is_same_v<T, float>) {
      fill_range<T>(out, [=](int64_t i) { return arange_element<float, double, 8>(start, step, i, n); });
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const float s = static_cast<float>(start), st = static_cast<float>(step);
      fill_range<T>(out, [=](int64_t i) { return arange_element<T, float, 16>(s, st, i, n); });
    } else if constexpr (is_linspace_integer_v<T>) {
      // int64 wrap-around arithmetic, as torch's int64 accumulation on two's complement.
      const auto s = static_cast<uint64_t>(static_cast<int64_t>(start));
      const auto st = static_cast<uint64_t>(static_cast<int64_t>(step));
      fill_range<T>(out, [=](int64_t i) { return static_cast<T>(s + st * static_cast<uint64_t>(i)); });
    } else {
      refuse("arange", out.dtype());
    }
  });
}

void linspace(double start, double end, bool log, double base, const Tensor& out) {
  const int64_t n = out.numel();
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

}  // namespace ember::cpu
