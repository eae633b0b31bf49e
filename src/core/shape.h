// Shape and stride arithmetic shared by the front end and the backends.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember {

using Shape = std::vector<int64_t>;

/// d in [-ndim, ndim) -> [0, ndim); throws "[op] dimension out of range: expected ..., got d".
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);
int64_t shape_numel(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
/// "[2, 3, 4]".
std::string shape_str(const Shape& sizes);
/// Strides for viewing (sizes, strides) as new_sizes without a copy, or nullopt when the
/// memory layout does not allow it (torch's computeStride).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes);
/// Resolves a single -1 in `shape` against numel; throws on a mismatch.
Shape infer_shape(Shape shape, int64_t numel, const char* op);

}  // namespace ember
