#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ember/error.h"

namespace ember {

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  const int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dims 0 and -1, like torch
  EMBER_CHECK(d >= -n && d < n, op, "dimension out of range: expected one in [{}, {}], got {}", -n, n - 1, d);
  return d < 0 ? d + n : d;
}

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  const int64_t numel = shape_numel(sizes);
  if (numel == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  Shape new_strides(new_sizes.size());
  // Walk old dims in chunks that are contiguous among themselves; each chunk must map onto a
  // run of new dims with the same element count.
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Shape infer_shape(Shape shape, int64_t numel, const char* op) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      EMBER_CHECK(infer_at < 0, op, "shape {}: expected at most one -1, got two", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      EMBER_CHECK(shape[i] >= 0, op, "shape {}: expected sizes >= 0 (or one -1), got {}", shape_str(shape), shape[i]);
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, "shape {} is invalid for input of size {}", shape_str(shape), numel);
    shape[infer_at] = numel / known;
  } else {
    EMBER_CHECK(known == numel, op, "shape {} is invalid for input of size {}", shape_str(shape), numel);
  }
  return shape;
}

}  // namespace ember
