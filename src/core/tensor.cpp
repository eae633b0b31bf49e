// Tensor metadata and views. Views only build new (sizes, strides, offset) on the same storage;
// anything that moves data goes through the backends (copy).
#include "ember/tensor.h"

#include <algorithm>
#include <numeric>

#include "backend.h"
#include "core/shape.h"
#include "core/storage.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {

Tensor::Tensor(std::shared_ptr<Storage> storage, std::vector<int64_t> sizes, std::vector<int64_t> strides,
               int64_t storage_offset, DType dtype)
    : storage_(std::move(storage)), sizes_(std::move(sizes)), strides_(std::move(strides)),
      offset_(storage_offset), dtype_(dtype) {}

int64_t Tensor::size(int64_t d) const { return sizes_[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return shape_numel(sizes_); }
Device Tensor::device() const {
  EMBER_CHECK(defined(), "device", "a defined tensor: expected one, got an undefined Tensor");
  return storage_->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sizes_[d] == 1) continue;
    if (sizes_[d] == 0) return true;
    if (strides_[d] != expected) return false;
    expected *= sizes_[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  EMBER_CHECK(defined(), "data_ptr", "a defined tensor: expected one, got an undefined Tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize());
}

void Tensor::check_dtype(DType expected, const char* op) const {
  EMBER_CHECK(dtype_ == expected, op, "element type: expected {}, got {}", name(expected), name(dtype_));
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(sizes_, dtype, device());
  ops::copy_into(*this, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(sizes_, dtype_, target);
  ops::copy_bytes(out.raw_data(), target, src.raw_data(), src.device(), src.nbytes());
  return out;
}

Tensor Tensor::to(Device target, DType dtype) const {
  // Cast on the CPU side, so the bytes that cross PCIe are the smaller of the two.
  if (target.is_cpu()) return to(target).to(dtype);
  return itemsize() <= ember::itemsize(dtype) ? to(target).to(dtype) : to(dtype).to(target);
}

Tensor& Tensor::copy_(const Tensor& src) {
  Tensor source = src.expand(sizes_);
  if (source.device() != device()) {
    // Cast on the source side, then one transfer straight into this tensor when it is contiguous.
    source = source.to(dtype_).contiguous();
    if (is_contiguous()) {
      ops::copy_bytes(raw_data(), device(), source.raw_data(), source.device(), nbytes());
      return *this;
    }
    source = source.to(device());
  }
  ops::copy_into(source, *this);
  return *this;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(sizes_, dtype_, device());
  ops::copy_into(*this, out);
  return out;
}

Tensor Tensor::view(std::vector<int64_t> shape) const {
  shape = infer_shape(std::move(shape), numel(), "view");
  auto strides = view_strides(sizes_, strides_, shape);
  EMBER_CHECK(strides.has_value(), "view",
              "size {} is not compatible with the input's size {} and stride {}: expected a "
              "layout that needs no copy; use reshape()", shape_str(shape), shape_str(sizes_), shape_str(strides_));
  return Tensor(storage_, std::move(shape), std::move(*strides), offset_, dtype_);
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  shape = infer_shape(std::move(shape), numel(), "reshape");
  if (auto strides = view_strides(sizes_, strides_, shape)) {
    return Tensor(storage_, std::move(shape), std::move(*strides), offset_, dtype_);
  }
  return clone().view(std::move(shape));
}

Tensor Tensor::view(DType dtype) const {
  EMBER_CHECK(ember::itemsize(dtype) == itemsize(), "view",
              "dtype reinterpretation needs equal element sizes: expected {} bytes ({}), got {} bytes ({})",
              itemsize(), name(dtype_), ember::itemsize(dtype), name(dtype));
  return Tensor(storage_, sizes_, strides_, offset_, dtype);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) { wrap_dim(d0, 0, "transpose"); wrap_dim(d1, 0, "transpose"); return *this; }
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  auto sizes = sizes_, strides = strides_;
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_, dtype_);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t", "a tensor with at most 2 dimensions: expected dim <= 2, got {}", dim());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(std::vector<int64_t> dims) const {
  EMBER_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute",
              "number of dims: expected {}, got {}", dim(), dims.size());
  std::vector<int64_t> sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    EMBER_CHECK(!seen[d], "permute", "dims: expected each dim once, got {} twice", d);
    seen[d] = true;
    sizes[i] = sizes_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_, dtype_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  EMBER_CHECK(dim() > 0, "slice", "a tensor with dimensions: expected dim >= 1, got a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  EMBER_CHECK(step > 0, "slice", "step: expected a positive step, got {}", step);
  const int64_t n = sizes_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  auto sizes = sizes_, strides = strides_;
  sizes[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = sizes_[d];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow",
              "range [{}, {}) must lie in dim {} of size {}: expected start + length <= {}, got {}",
              start, start + length, d, n, n, start + length);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select", "a tensor with dimensions: expected dim >= 1, got a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = sizes_[d];
  EMBER_CHECK(index >= -n && index < n, "select", "index out of range for dim {} of size {}: expected one in [{}, {}], got {}",
              d, n, -n, n - 1, index);
  if (index < 0) index += n;
  auto sizes = sizes_, strides = strides_;
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::expand(std::vector<int64_t> shape) const {
  const int64_t nd = static_cast<int64_t>(shape.size());
  EMBER_CHECK(nd >= dim(), "expand", "the number of sizes ({}) must be at least the tensor's dims: expected >= {}, got {}",
              nd, dim(), nd);
  std::vector<int64_t> strides(nd);
  for (int64_t i = nd - 1; i >= 0; --i) {
    const int64_t src = i - (nd - dim());
    if (src >= 0) {
      if (shape[i] == -1) shape[i] = sizes_[src];
      EMBER_CHECK(sizes_[src] == shape[i] || sizes_[src] == 1, "expand",
                  "size {} of dim {} can only grow from 1: expected {} or 1, got {} (shape {} -> {})",
                  sizes_[src], i, shape[i], sizes_[src], shape_str(sizes_), shape_str(shape));
      strides[i] = sizes_[src] == shape[i] ? strides_[src] : 0;
    } else {
      EMBER_CHECK(shape[i] >= 0, "expand", "new leading dim {}: expected a size >= 0, got {}", i, shape[i]);
      strides[i] = 0;
    }
  }
  return Tensor(storage_, std::move(shape), std::move(strides), offset_, dtype_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  auto sizes = sizes_, strides = strides_;
  const int64_t stride = d < dim() ? sizes_[d] * strides_[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_, dtype_);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) { wrap_dim(d, 0, "squeeze"); return *this; }
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes_[d] != 1) return *this;
  auto sizes = sizes_, strides = strides_;
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_, dtype_);
}

Tensor Tensor::squeeze() const {
  std::vector<int64_t> sizes, strides;
  for (int64_t d = 0; d < dim(); ++d) {
    if (sizes_[d] != 1) { sizes.push_back(sizes_[d]); strides.push_back(strides_[d]); }
  }
  return Tensor(storage_, std::move(sizes), std::move(strides), offset_, dtype_);
}

namespace detail {

Tensor tensor_from_bytes(const void* data, size_t nbytes, std::vector<int64_t> shape, DType dtype) {
  for (int64_t s : shape) EMBER_CHECK(s >= 0, "tensor", "sizes: expected >= 0, got {}", s);
  const size_t expected = static_cast<size_t>(shape_numel(shape)) * ember::itemsize(dtype);
  EMBER_CHECK(expected == nbytes, "tensor", "number of values for shape {}: expected {}, got {}",
              shape_str(shape), shape_numel(shape), nbytes / ember::itemsize(dtype));
  Tensor out = empty(std::move(shape), dtype, Device::cpu());
  if (nbytes) std::memcpy(out.raw_data(), data, nbytes);
  return out;
}

void copy_to_host(const Tensor& contiguous, void* dst) {
  if (contiguous.numel() == 0) return;
  ops::copy_bytes(dst, Device::cpu(), contiguous.raw_data(), contiguous.device(), contiguous.nbytes());
}

}  // namespace detail
}  // namespace ember
