// cat and stack: each input is copied (and cast) into its slice of the output.
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

/// torch's legacy rule: a 1-dim tensor of size 0 is skipped whatever the other shapes.
bool is_legacy_empty(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat", "tensors: expected a non-empty list, got an empty one");
  const Tensor* ref = nullptr;
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::check_defined("cat", t);
    ops::check_same_device("cat", {&tensors[0], &t});
    EMBER_CHECK(t.dim() > 0, "cat", "tensor {}: expected at least one dim (0-dim tensors cannot be concatenated), got 0 dims", i);
    dtype = promote_types(dtype, t.dtype());
    if (!ref && !is_legacy_empty(t)) ref = &t;
  }
  if (!ref) ref = &tensors[0];  // only legacy empties: the result is one of them
  dim = wrap_dim(dim, ref->dim(), "cat");
  Shape sizes = ref->sizes();
  sizes[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t) && &t != ref) continue;
    EMBER_CHECK(t.dim() == ref->dim(), "cat", "rank of tensor {}: expected {} dims, got {}", i, ref->dim(), t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
      EMBER_CHECK(d == dim || t.sizes()[d] == sizes[d], "cat", "size of tensor {} at dim {} (all dims but {} must match): expected {}, got {}",
                  i, d, dim, sizes[d], t.sizes()[d]);
    }
    sizes[dim] += t.sizes()[dim];
  }
  Tensor out = empty(sizes, dtype, ref->device());
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t) && &t != ref) continue;
    const int64_t n = t.sizes()[dim];
    ops::copy_into(t, out.narrow(dim, offset, n));
    offset += n;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack", "tensors: expected a non-empty list, got an empty one");
  ops::check_defined("stack", tensors[0]);
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined("stack", tensors[i]);
    EMBER_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack", "size of tensor {}: expected tensor 0's {}, got {}", i,
                shape_str(tensors[0].sizes()), shape_str(tensors[i].sizes()));
    unsqueezed.push_back(tensors[i].unsqueeze(dim));
  }
  return cat(unsqueezed, dim);
}

}  // namespace ember
