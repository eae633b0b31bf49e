// Factories: empty/zeros/ones/full, ranges and random numbers.
#include <cmath>

#include "core/storage.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {

template <class T> T Scalar::to() const {
  if constexpr (std::is_same_v<T, bool>) {
    return kind_ == Kind::Complex ? c_ != std::complex<double>(0) : (kind_ == Kind::Float ? d_ != 0 : i_ != 0);
  } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
    return T(to_complex());
  } else if constexpr (std::is_integral_v<T>) {
    if (kind_ == Kind::Float || kind_ == Kind::Complex) return static_cast<T>(d_);
    return u64_ ? static_cast<T>(u_) : static_cast<T>(i_);
  } else if constexpr (std::is_same_v<T, double>) {
    return u64_ ? static_cast<double>(u_) : d_;
  } else {  // float, Half, BFloat16, fp8: round once from double to float, then to T
    return T(static_cast<float>(u64_ ? static_cast<double>(u_) : d_));
  }
}
template bool Scalar::to<bool>() const;
template uint8_t Scalar::to<uint8_t>() const;
template int8_t Scalar::to<int8_t>() const;
template uint16_t Scalar::to<uint16_t>() const;
template int16_t Scalar::to<int16_t>() const;
template uint32_t Scalar::to<uint32_t>() const;
template int32_t Scalar::to<int32_t>() const;
template uint64_t Scalar::to<uint64_t>() const;
template int64_t Scalar::to<int64_t>() const;
template Half Scalar::to<Half>() const;
template BFloat16 Scalar::to<BFloat16>() const;
template float Scalar::to<float>() const;
template double Scalar::to<double>() const;
template std::complex<float> Scalar::to<std::complex<float>>() const;
template std::complex<double> Scalar::to<std::complex<double>>() const;
template Float8_e4m3fn Scalar::to<Float8_e4m3fn>() const;
template Float8_e5m2 Scalar::to<Float8_e5m2>() const;

Tensor empty(std::vector<int64_t> shape, DType dtype, Device device) {
  for (int64_t s : shape) EMBER_CHECK(s >= 0, "empty", "sizes {}: expected every size >= 0, got {}", shape_str(shape), s);
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * itemsize(dtype);
  auto strides = contiguous_strides(shape);
  return Tensor(allocate_storage(nbytes, device), std::move(shape), std::move(strides), 0, dtype);
}

Tensor full(std::vector<int64_t> shape, Scalar value, DType dtype, Device device) {
  Tensor out = empty(std::move(shape), dtype, device);
  if (out.numel() > 0) EMBER_DISPATCH(device, fill, out, value);
  return out;
}
Tensor zeros(std::vector<int64_t> shape, DType dtype, Device device) { return full(std::move(shape), 0, dtype, device); }
Tensor ones(std::vector<int64_t> shape, DType dtype, Device device) { return full(std::move(shape), 1, dtype, device); }
Tensor empty_like(const Tensor& x) { return empty(x.sizes(), x.dtype(), x.device()); }
Tensor zeros_like(const Tensor& x) { return zeros(x.sizes(), x.dtype(), x.device()); }
Tensor full_like(const Tensor& x, Scalar value) { return full(x.sizes(), value, x.dtype(), x.device()); }
Tensor scalar_tensor(Scalar value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  EMBER_CHECK(step != 0, "arange", "step: expected a non-zero step, got 0");
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end), "arange",
              "range: expected finite start and end, got [{}, {})", start, end);
  EMBER_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange",
              "upper bound and step sign: expected (end - start) to have the sign of step, got start {}, end {}, step {}",
              start, end, step);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor out = empty({n}, dtype, device);
  if (n > 0) EMBER_DISPATCH(device, arange, start, step, out);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  EMBER_CHECK(steps >= 0, "linspace", "number of steps: expected >= 0, got {}", steps);
  Tensor out = empty({steps}, dtype, device);
  if (steps > 0) EMBER_DISPATCH(device, linspace, start, end, false, 10.0, out);
  return out;
}

Tensor logspace(double start, double end, int64_t steps, double base, DType dtype, Device device) {
  EMBER_CHECK(steps >= 0, "logspace", "number of steps: expected >= 0, got {}", steps);
  Tensor out = empty({steps}, dtype, device);
  if (steps > 0) EMBER_DISPATCH(device, linspace, start, end, true, base, out);
  return out;
}

namespace {
Tensor random_tensor(const char* op, RandomKind kind, std::vector<int64_t> shape, DType dtype, Device device,
                     uint64_t seed) {
  EMBER_CHECK(is_floating_point(dtype) || is_complex(dtype), op, "dtype: expected a floating type, got {}", name(dtype));
  Tensor out = empty(std::move(shape), dtype, device);
  if (out.numel() > 0) EMBER_DISPATCH(device, random, kind, seed, out);
  return out;
}
}  // namespace

Tensor rand(std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed) {
  return random_tensor("rand", RandomKind::Uniform, std::move(shape), dtype, device, seed);
}
Tensor randn(std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed) {
  return random_tensor("randn", RandomKind::Normal, std::move(shape), dtype, device, seed);
}
Tensor randint(int64_t low, int64_t high, std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed) {
  EMBER_CHECK(low < high, "randint", "range [low, high): expected low < high, got [{}, {})", low, high);
  EMBER_CHECK(!is_complex(dtype), "randint", "dtype: expected a real type, got {}", name(dtype));
  Tensor out = empty(std::move(shape), dtype, device);
  if (out.numel() > 0) EMBER_DISPATCH(device, randint, low, high, seed, out);
  return out;
}

}  // namespace ember
