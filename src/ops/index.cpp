// index_select, gather, index_add and take.
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, "index dtype: expected int64 or int32, got {}",
              name(index.dtype()));
}

void check_vector_index(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dim() <= 1, op, "index: expected a vector (0-dim or 1-dim), got {} dims", index.dim());
}

/// 0-dim tensors act as 1-element vectors, like torch's ensure_nonempty_dim.
Tensor as_vector_if_scalar(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("index_select", x);
  ops::check_defined("index_select", index, "index");
  ops::check_same_device("index_select", {&x, &index});
  check_index_dtype("index_select", index);
  check_vector_index("index_select", index);
  dim = wrap_dim(dim, x.dim(), "index_select");
  if (x.dim() == 0) {
    EMBER_CHECK(index.numel() == 1, "index_select", "index into a 0-dim input: expected 1 value, got {}", index.numel());
  }
  const Tensor xv = as_vector_if_scalar(x);
  Shape sizes = xv.sizes();
  sizes[dim] = index.numel();
  Tensor out = empty(sizes, x.dtype(), x.device());
  if (out.numel() > 0) EMBER_DISPATCH(x.device(), index_select, xv, dim, index.reshape({-1}), out);
  return x.dim() == 0 ? out.reshape({}) : out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("gather", x);
  ops::check_defined("gather", index, "index");
  ops::check_same_device("gather", {&x, &index});
  check_index_dtype("gather", index);
  EMBER_CHECK(!is_fp8(x.dtype()), "gather", "dtype: expected a non-float8 type (torch's CPU kernels), got {}", name(x.dtype()));
  dim = wrap_dim(dim, x.dim(), "gather");
  const Tensor xv = as_vector_if_scalar(x), iv = as_vector_if_scalar(index);
  EMBER_CHECK(iv.dim() == xv.dim(), "gather", "index rank: expected the input's {} dims, got {}", x.dim(), index.dim());
  for (int64_t d = 0; d < xv.dim(); ++d) {
    if (d == dim) continue;
    EMBER_CHECK(iv.sizes()[d] <= xv.sizes()[d], "gather", "index size at dim {}: expected at most the input's {} (index {}, input {}), got {}",
                d, xv.sizes()[d], shape_str(index.sizes()), shape_str(x.sizes()), iv.sizes()[d]);
  }
  Tensor out = empty(index.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) EMBER_DISPATCH(x.device(), gather, xv, dim, iv, as_vector_if_scalar(out));
  return out;
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha) {
  ops::check_defined("index_add", x);
  ops::check_defined("index_add", index, "index");
  ops::check_defined("index_add", src, "source");
  ops::check_same_device("index_add", {&x, &index, &src});
  check_index_dtype("index_add", index);
  check_vector_index("index_add", index);
  EMBER_CHECK(src.dtype() == x.dtype(), "index_add", "source dtype: expected the input's {}, got {}", name(x.dtype()),
              name(src.dtype()));
  EMBER_CHECK(!is_fp8(x.dtype()), "index_add", "dtype: expected a non-float8 type (torch's CPU kernels), got {}",
              name(x.dtype()));
  dim = wrap_dim(dim, x.dim(), "index_add");
  const Tensor xv = as_vector_if_scalar(x), sv = as_vector_if_scalar(src);
  bool shapes_match = xv.dim() == sv.dim();
  for (int64_t d = 0; shapes_match && d < xv.dim(); ++d) shapes_match = d == dim || xv.sizes()[d] == sv.sizes()[d];
  EMBER_CHECK(shapes_match, "index_add", "source shape: expected the input's {} apart from dim {}, got {}",
              shape_str(x.sizes()), dim, shape_str(src.sizes()));
  EMBER_CHECK(index.numel() == sv.sizes()[dim], "index_add", "number of indices: expected source.size({}) = {}, got {}", dim,
              sv.sizes()[dim], index.numel());
  Tensor out = x.clone();
  if (index.numel() > 0 && sv.numel() > 0) {
    EMBER_DISPATCH(x.device(), index_add, as_vector_if_scalar(out), dim, index.reshape({-1}), sv, alpha);
  }
  return out;
}

Tensor take(const Tensor& input, const Tensor& index) {
  ops::check_defined("take", input);
  ops::check_defined("take", index, "index");
  ops::check_same_device("take", {&input, &index});
  EMBER_CHECK(index.dtype() == kInt64, "take", "index dtype: expected int64, got {}", name(index.dtype()));
  const DType d = input.dtype();
  EMBER_CHECK(!is_fp8(d) && d != kUInt16 && d != kUInt32 && d != kUInt64, "take",
              "dtype: expected a type torch's CPU kernel supports (not uint16/32/64 or float8), got {}", name(d));
  EMBER_CHECK(input.numel() > 0 || index.numel() == 0, "take", "input: expected a non-empty tensor to take {} elements from, got sizes {}",
              index.numel(), shape_str(input.sizes()));
  Tensor out = empty(index.sizes(), d, input.device());
  if (out.numel() > 0) EMBER_DISPATCH(input.device(), take, input, index, out);
  return out;
}

}  // namespace ember
