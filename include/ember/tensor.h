// Tensor: shared storage plus sizes, strides (in elements) and an offset. No autograd.
//
// Views (view, reshape when possible, transpose, permute, slice, select, expand, squeeze,
// unsqueeze, view(dtype)) share storage with their source; everything else returns a new tensor.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/scalar.h"

namespace ember {

namespace cuda { class Stream; }
class Storage;

class Tensor {
 public:
  Tensor() = default;  // undefined: only defined() and assignment are valid
  Tensor(std::shared_ptr<Storage> storage, std::vector<int64_t> sizes, std::vector<int64_t> strides,
         int64_t storage_offset, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t size(int64_t d) const;     // negative d wraps
  int64_t stride(int64_t d) const;   // negative d wraps
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const;
  size_t itemsize() const { return ember::itemsize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }

  Tensor to(DType) const;             // a copy unless the dtype is already this one
  Tensor to(Device) const;            // a copy unless the device is already this one
  Tensor to(Device, DType) const;
  Tensor contiguous() const;          // itself if already contiguous
  Tensor clone() const;               // always a contiguous copy
  /// torch.Tensor.copy_: writes src (broadcast to this shape, cast to this dtype, from any
  /// device) into this tensor's elements, e.g. into a narrow/select view of a larger tensor.
  Tensor& copy_(const Tensor& src);

  Tensor view(std::vector<int64_t> shape) const;     // one -1 allowed; needs compatible strides
  Tensor reshape(std::vector<int64_t> shape) const;  // a view when possible, else a copy
  Tensor view(DType) const;                          // reinterpret bits, same itemsize
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;                                  // 0-, 1- or 2-D
  Tensor permute(std::vector<int64_t> dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // clamps like python
  Tensor select(int64_t dim, int64_t index) const;   // negative index wraps
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(std::vector<int64_t> shape) const;   // -1 keeps a size
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;                 // no-op when that size is not 1
  Tensor squeeze() const;                            // every size-1 dim

  /// One element converted to T (any numeric T); copies from the device if needed.
  template <class T> T item() const;
  /// Pointer to the first element; T must match dtype().
  template <class T> T* data_ptr() const {
    check_dtype(dtype_of<std::remove_cv_t<T>>(), "data_ptr");
    return static_cast<T*>(raw_data());
  }
  /// The elements in logical (row-major) order, from any device and strides; T must match dtype().
  template <class T> std::vector<T> to_vector() const;

  /// Caching-allocator semantics of torch.Tensor.record_stream: the memory is not reused until
  /// the work queued on `stream` at the time this tensor's storage is freed has finished.
  void record_stream(const cuda::Stream& stream) const;

  void* raw_data() const;  // the address of element 0 (storage base + offset * itemsize)
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  void check_dtype(DType expected, const char* op) const;

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> sizes_, strides_;
  int64_t offset_ = 0;
  DType dtype_ = kFloat32;
};

// ---- factories -------------------------------------------------------------------------------
Tensor empty(std::vector<int64_t> shape, DType dtype = kFloat32, Device device = Device::cpu());
Tensor zeros(std::vector<int64_t> shape, DType dtype = kFloat32, Device device = Device::cpu());
Tensor ones(std::vector<int64_t> shape, DType dtype = kFloat32, Device device = Device::cpu());
Tensor full(std::vector<int64_t> shape, Scalar value, DType dtype = kFloat32, Device device = Device::cpu());
Tensor empty_like(const Tensor& x);
Tensor zeros_like(const Tensor& x);
Tensor full_like(const Tensor& x, Scalar value);
/// A 0-dim tensor holding one value.
Tensor scalar_tensor(Scalar value, DType dtype, Device device = Device::cpu());
/// [start, end) by step, torch.arange's length rule: ceil((end - start) / step).
Tensor arange(double start, double end, double step = 1, DType dtype = kInt64, Device device = Device::cpu());
/// torch.linspace: out[i] = start + i*step for the first half and end - (steps-1-i)*step for
/// the second, so both endpoints are exact.
Tensor linspace(double start, double end, int64_t steps, DType dtype = kFloat32, Device device = Device::cpu());
/// torch.logspace: base ** linspace(start, end, steps); endpoints exact.
Tensor logspace(double start, double end, int64_t steps, double base = 10, DType dtype = kFloat32,
                Device device = Device::cpu());
/// Uniform [0, 1) and standard normal numbers from a counter-based generator (Philox-4x32-10):
/// element i depends only on (seed, i), so every device gives the same numbers.
Tensor rand(std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed);
Tensor randn(std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed);
/// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, std::vector<int64_t> shape, DType dtype, Device device, uint64_t seed);

/// A CPU tensor holding `values` (dtype of T) in the given shape.
template <class T> Tensor tensor(std::vector<T> values, std::vector<int64_t> shape);
/// 1-D convenience.
template <class T> Tensor tensor(std::vector<T> values) {
  const auto n = static_cast<int64_t>(values.size());
  return tensor<T>(std::move(values), {n});
}

// ---- template definitions --------------------------------------------------------------------
namespace detail {
Tensor tensor_from_bytes(const void* data, size_t nbytes, std::vector<int64_t> shape, DType dtype);
void copy_to_host(const Tensor& contiguous, void* dst);
}  // namespace detail

template <class T> Tensor tensor(std::vector<T> values, std::vector<int64_t> shape) {
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is packed
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return detail::tensor_from_bytes(bytes.data(), bytes.size(), std::move(shape), kBool);
  } else {
    return detail::tensor_from_bytes(values.data(), values.size() * sizeof(T), std::move(shape), dtype_of<T>());
  }
}

template <class T> std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>(), "to_vector");
  const Tensor c = contiguous();
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(static_cast<size_t>(numel()));
    detail::copy_to_host(c, bytes.data());
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> out(static_cast<size_t>(numel()));
    detail::copy_to_host(c, out.data());
    return out;
  }
}

template <class T> T Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item", "a tensor with one element: expected numel 1, got {}", numel());
  const Tensor one = reshape({1}).to(Device::cpu()).to(dtype_of<T>());
  if constexpr (std::is_same_v<T, bool>) return one.to_vector<bool>()[0];
  else return one.to_vector<T>()[0];
}

}  // namespace ember
