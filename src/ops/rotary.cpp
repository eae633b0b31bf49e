// apply_rotary_emb.
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {

Tensor apply_rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  constexpr const char* op = "apply_rotary_emb";
  ops::check_defined(op, x);
  ops::check_defined(op, cos, "cos");
  ops::check_defined(op, sin, "sin");
  const DType d = x.dtype();
  EMBER_CHECK(is_floating_point(d) && !is_fp8(d), op, "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  EMBER_CHECK(x.dim() >= 2, op, "x: expected [..., L, D], got {} dims", x.dim());
  const int64_t length = x.size(-2), dim = x.size(-1);
  EMBER_CHECK(dim % 2 == 0, op, "head dim: expected an even size, got {}", dim);
  for (const auto& [what, table] : {std::pair<const char*, const Tensor*>{"cos", &cos}, {"sin", &sin}}) {
    EMBER_CHECK(table->sizes() == Shape({length, dim}), op, "{} shape: expected {}, got {}", what, shape_str({length, dim}),
                shape_str(table->sizes()));
    EMBER_CHECK(table->dtype() == d, op, "{} dtype: expected {} (x's), got {}", what, name(d), name(table->dtype()));
    EMBER_CHECK(table->device() == x.device(), op, "{} device: expected {}, got {}", what, x.device().str(), table->device().str());
  }
  Tensor out = empty(x.sizes(), d, x.device());
  if (out.numel() == 0) return out;
  const int64_t rows = x.numel() / (length * dim);
  EMBER_DISPATCH(x.device(), rotary_emb, x.contiguous().reshape({rows, length, dim}), cos.contiguous(), sin.contiguous(),
                 out.reshape({rows, length, dim}));
  return out;
}

}  // namespace ember
