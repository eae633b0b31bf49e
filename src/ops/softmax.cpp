// softmax and log_softmax.
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  ops::check_defined(op, x);
  const DType d = x.dtype();
  EMBER_CHECK(is_floating_point(d) && !is_fp8(d), op, "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  dim = wrap_dim(dim, x.dim(), op);
  Tensor out = empty(x.sizes(), d, x.device());
  if (out.numel() == 0) return out;
  if (x.dim() == 0) EMBER_DISPATCH(x.device(), softmax, x.reshape({1}), 0, log, out.reshape({1}));
  else EMBER_DISPATCH(x.device(), softmax, x, dim, log, out);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

}  // namespace ember
