// Reductions: sum, mean, prod, amax, amin, any, all, argmax, argmin, cumsum, histc.
#include <algorithm>
#include <cmath>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

bool is_float_or_complex(DType d) { return (is_floating_point(d) && !is_fp8(d)) || is_complex(d); }

void check_not_fp8(const char* op, DType d) {
  EMBER_CHECK(!is_fp8(d), op, "dtype: expected a non-float8 type (torch has no CPU kernel), got {}", name(d));
}

/// Wrapped, sorted dims; {} means every dim. Duplicates are an error, like torch.
std::vector<int64_t> reduction_dims(const Tensor& x, std::vector<int64_t> dims, const char* op) {
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
    return dims;
  }
  for (auto& d : dims) d = wrap_dim(d, x.dim(), op);
  std::sort(dims.begin(), dims.end());
  const auto dup = std::adjacent_find(dims.begin(), dims.end());
  EMBER_CHECK(dup == dims.end(), op, "dims: expected each dim at most once, got dim {} more than once", *dup);
  return dims;
}

/// Allocates the result (keepdim sizes, then viewed without the reduced dims unless keepdim)
/// and runs the backend on x, already in the dtype the backend reads.
Tensor run_reduce(const char* op, ReduceOp rop, const Tensor& x, std::vector<int64_t> dims, bool keepdim, DType out_dtype) {
  dims = reduction_dims(x, std::move(dims), op);
  Shape kept = x.sizes(), squeezed;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::binary_search(dims.begin(), dims.end(), d)) kept[d] = 1;
    else squeezed.push_back(x.sizes()[d]);
  }
  Tensor out = empty(kept, out_dtype, x.device());
  if (out.numel() > 0) {
    if (x.dim() == 0) EMBER_DISPATCH(x.device(), reduce, rop, x.reshape({1}), std::vector<int64_t>{0}, out.reshape({1}));
    else EMBER_DISPATCH(x.device(), reduce, rop, x, dims, out);
  }
  return keepdim ? out : out.view(squeezed);
}

/// amax/amin/argmax refuse an empty reduction (there is no identity), like torch.
void check_nonempty_reduction(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    EMBER_CHECK(x.sizes()[d] != 0, op, "size of reduction dim {}: expected a non-zero size, got 0", d);
  }
}

DType sum_dtype(DType d) { return is_integral(d, true) ? kInt64 : d; }

Tensor min_max(const char* op, ReduceOp rop, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  ops::check_defined(op, x);
  const DType d = x.dtype();
  EMBER_CHECK(!is_complex(d) && !is_fp8(d) && d != kUInt16 && d != kUInt32 && d != kUInt64, op,
              "dtype: expected bool, a signed or 8-bit integer, or a float type (torch's CPU kernels), got {}", name(d));
  EMBER_CHECK(!(dims.empty() && x.numel() == 0), op,
              "reduction dims of an empty input: expected explicit dims with non-zero sizes, got every dim of {}",
              shape_str(x.sizes()));
  check_nonempty_reduction(op, x, reduction_dims(x, dims, op));
  return run_reduce(op, rop, x, std::move(dims), keepdim, d);
}

Tensor any_all(const char* op, ReduceOp rop, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  ops::check_defined(op, x);
  return run_reduce(op, rop, x, std::move(dims), keepdim, kBool);
}

Tensor arg_min_max(const char* op, ArgReduceOp aop, const Tensor& x, int64_t dim, bool keepdim) {
  ops::check_defined(op, x);
  const DType d = x.dtype();
  EMBER_CHECK(d != kBool && !is_complex(d) && !is_fp8(d) && d != kUInt16 && d != kUInt32 && d != kUInt64, op,
              "dtype: expected a signed or 8-bit integer or a float type (torch's CPU kernels), got {}", name(d));
  dim = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return zeros({}, kInt64, x.device());
  check_nonempty_reduction(op, x, {dim});
  Shape kept = x.sizes();
  kept[dim] = 1;
  Tensor out = empty(kept, kInt64, x.device());
  if (out.numel() > 0) EMBER_DISPATCH(x.device(), arg_reduce, aop, x, dim, out);
  return keepdim ? out : out.squeeze(dim);
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim, std::optional<DType> dtype) {
  ops::check_defined("sum", x);
  const DType d = dtype ? *dtype : sum_dtype(x.dtype());
  check_not_fp8("sum", x.dtype());
  check_not_fp8("sum", d);
  return run_reduce("sum", ReduceOp::Sum, x.to(d), std::move(dims), keepdim, d);
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  ops::check_defined("mean", x);
  EMBER_CHECK(is_float_or_complex(x.dtype()), "mean", "dtype: expected a floating point or complex type, got {}",
              name(x.dtype()));
  return run_reduce("mean", ReduceOp::Mean, x, std::move(dims), keepdim, x.dtype());
}

Tensor prod(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  ops::check_defined("prod", x);
  check_not_fp8("prod", x.dtype());
  const DType d = sum_dtype(x.dtype());
  return run_reduce("prod", ReduceOp::Prod, x.to(d), std::move(dims), keepdim, d);
}

Tensor amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return min_max("amax", ReduceOp::Amax, x, std::move(dims), keepdim);
}
Tensor amin(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return min_max("amin", ReduceOp::Amin, x, std::move(dims), keepdim);
}
Tensor any(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return any_all("any", ReduceOp::Any, x, std::move(dims), keepdim);
}
Tensor all(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return any_all("all", ReduceOp::All, x, std::move(dims), keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_min_max("argmax", ArgReduceOp::Argmax, x, dim, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_min_max("argmin", ArgReduceOp::Argmin, x, dim, keepdim); }

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  ops::check_defined("cumsum", x);
  const DType d = dtype ? *dtype : sum_dtype(x.dtype());
  check_not_fp8("cumsum", x.dtype());
  check_not_fp8("cumsum", d);
  dim = wrap_dim(dim, x.dim(), "cumsum");
  const Tensor xc = x.to(d);
  Tensor out = empty(x.sizes(), d, x.device());
  if (out.numel() == 0) return out;
  if (x.dim() == 0) EMBER_DISPATCH(x.device(), cumsum, xc.reshape({1}), 0, out.reshape({1}));
  else EMBER_DISPATCH(x.device(), cumsum, xc, dim, out);
  return out;
}

Tensor histc(const Tensor& x, int64_t bins, double min, double max) {
  ops::check_defined("histc", x);
  const DType d = x.dtype();
  EMBER_CHECK(is_floating_point(d) && !is_fp8(d), "histc", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  EMBER_CHECK(bins > 0, "histc", "bins: expected > 0, got {}", bins);
  // torch uses the data's range whenever min == max (0 and 0 being the default).
  EMBER_CHECK(!(min > max), "histc", "range: expected max >= min, got min {} and max {}", min, max);
  EMBER_CHECK(min == max || (std::isfinite(min) && std::isfinite(max)), "histc",
              "range [{}, {}]: expected finite bounds, got a non-finite one", min, max);
  Tensor out = empty({bins}, d, x.device());
  EMBER_DISPATCH(x.device(), histc, x, bins, min, max, out);
  return out;
}

}  // namespace ember
