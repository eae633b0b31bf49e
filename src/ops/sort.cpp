// sort, argsort and topk.
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

void check_sortable(const char* op, DType d) {
  EMBER_CHECK(!is_complex(d) && !is_fp8(d), op, "dtype: expected a real non-float8 type (torch's CPU kernels), got {}",
              name(d));
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool /*stable: every sort is stable*/) {
  ops::check_defined("sort", x);
  check_sortable("sort", x.dtype());
  dim = wrap_dim(dim, x.dim(), "sort");
  Tensor values = empty(x.sizes(), x.dtype(), x.device()), indices = empty(x.sizes(), kInt64, x.device());
  if (x.numel() == 0) return {values, indices};
  if (x.dim() == 0) {
    ops::copy_into(x, values);
    EMBER_DISPATCH(x.device(), fill, indices, Scalar(0));
    return {values, indices};
  }
  EMBER_DISPATCH(x.device(), sort, x, dim, descending, values, indices);
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return std::get<1>(sort(x, dim, descending, stable));
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted: always sorted*/) {
  ops::check_defined("topk", x);
  const DType d = x.dtype();
  EMBER_CHECK(d != kBool && d != kUInt16 && d != kUInt32 && d != kUInt64, "topk",
              "dtype: expected a signed or 8-bit integer or a float type (torch's CPU kernels), got {}", name(d));
  check_sortable("topk", d);
  dim = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[dim];
  EMBER_CHECK(k >= 0 && k <= n, "topk", "k (selected index): expected one in [0, {}], got {}", n, k);
  if (x.dim() == 0) {
    // torch returns the element itself for a 0-dim input, whatever k.
    Tensor values = empty({}, d, x.device()), indices = zeros({}, kInt64, x.device());
    ops::copy_into(x, values);
    return {values, indices};
  }
  Shape sizes = x.sizes();
  sizes[dim] = k;
  Tensor values = empty(sizes, d, x.device()), indices = empty(sizes, kInt64, x.device());
  if (values.numel() > 0) EMBER_DISPATCH(x.device(), topk, x, k, dim, largest, values, indices);
  return {values, indices};
}

}  // namespace ember
