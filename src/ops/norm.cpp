// rms_norm.
#include <limits>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {

Tensor rms_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  constexpr const char* op = "rms_norm";
  ops::check_defined(op, x);
  const DType d = x.dtype();
  EMBER_CHECK(is_floating_point(d) && !is_fp8(d), op, "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  const auto k = static_cast<int64_t>(normalized_shape.size());
  EMBER_CHECK(k >= 1 && k <= x.dim(), op, "normalized_shape: expected 1 to {} trailing dims of x, got {} dims", x.dim(), k);
  int64_t n = 1;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t size = x.size(x.dim() - k + i);
    EMBER_CHECK(normalized_shape[i] == size, op, "normalized_shape: expected x's trailing sizes {}, got {}",
                shape_str(std::vector<int64_t>(x.sizes().end() - k, x.sizes().end())), shape_str(normalized_shape));
    n *= size;
  }
  Tensor w;
  if (weight) {
    w = *weight;
    ops::check_defined(op, w);
    EMBER_CHECK(w.sizes() == normalized_shape, op, "weight shape: expected {}, got {}", shape_str(normalized_shape),
                shape_str(w.sizes()));
    EMBER_CHECK(w.dtype() == d, op, "weight dtype: expected {} (x's), got {}", name(d), name(w.dtype()));
    EMBER_CHECK(w.device() == x.device(), op, "weight device: expected {}, got {}", x.device().str(), w.device().str());
    w = w.contiguous().reshape({n});
  }
  const double epsilon = eps.value_or(d == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                    : static_cast<double>(std::numeric_limits<float>::epsilon()));
  EMBER_CHECK(epsilon >= 0, op, "eps: expected >= 0, got {}", epsilon);
  Tensor out = empty(x.sizes(), d, x.device());
  if (out.numel() == 0) return out;
  const int64_t rows = x.numel() / n;
  EMBER_DISPATCH(x.device(), rms_norm, x.contiguous().reshape({rows, n}), w, epsilon, out.reshape({rows, n}));
  return out;
}

}  // namespace ember
