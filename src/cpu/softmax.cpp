// CPU softmax / log_softmax along one dim: max, then the sum of exp(x - max) in double, then
// the outputs; one line per task. f16/bf16 compute in float. A row that is entirely -inf has
// max -inf and x - max = NaN, so it gives NaN like torch.
#include <cmath>
#include <limits>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {

void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || is_fp8_v<T>) {
      fail("softmax", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      using C = compute_t<T>;
      const int64_t so = out.stride(dim) * static_cast<int64_t>(sizeof(T));
      for_each_line(x, dim, [&](const char* p, int64_t s, int64_t n, std::array<char*, 1> o) {
        thread_local std::vector<C> shifted;
        shifted.resize(static_cast<size_t>(n));
        auto at = [&](int64_t i) { return static_cast<C>(*reinterpret_cast<const T*>(p + i * s)); };
        C max = -std::numeric_limits<C>::infinity();
        for (int64_t i = 0; i < n; ++i) max = std::max(max, at(i));
        for (int64_t i = 0; i < n; ++i) shifted[i] = at(i) - max;
        double sum = 0;
        if (log) {
          for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(std::exp(shifted[i]));
          // torch rounds the row sum and its log to the input type (no-ops for float/double).
          const C log_sum = static_cast<C>(T(std::log(static_cast<C>(T(static_cast<C>(sum))))));
          for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(o[0] + i * so) = T(shifted[i] - log_sum);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            shifted[i] = std::exp(shifted[i]);
            sum += static_cast<double>(shifted[i]);
          }
          const double inv = 1.0 / sum;
          for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(o[0] + i * so) = T(static_cast<C>(shifted[i] * inv));
        }
      }, out);
    }
  });
}

}  // namespace ember::cpu
