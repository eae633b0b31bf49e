// CPU rms_norm: per row the sum of squares in double, r = rsqrt(mean + eps) in the compute type
// (float for f16/bf16/f32, double for f64), then y = (x * r) * w rounded once, like torch.
#include <cmath>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {

void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || is_fp8_v<T>) {
      fail("rms_norm", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      using C = compute_t<T>;
      const int64_t rows = x.size(0), n = x.size(1);
      const T* xs = x.data_ptr<T>();
      const T* w = weight.defined() ? weight.data_ptr<T>() : nullptr;
      T* ys = out.data_ptr<T>();
      auto row = [&](int64_t r) {
        const T* xr = xs + r * n;
        T* yr = ys + r * n;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = static_cast<double>(static_cast<C>(xr[i]));
          sum += v * v;
        }
        const C scale = C(1) / std::sqrt(static_cast<C>(sum / static_cast<double>(n)) + static_cast<C>(eps));
        for (int64_t i = 0; i < n; ++i) {
          const C y = static_cast<C>(xr[i]) * scale;
          yr[i] = T(w ? y * static_cast<C>(w[i]) : y);
        }
      };
      if (rows > 1 && rows * n >= kParallelGrain) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) row(r);
      } else {
        for (int64_t r = 0; r < rows; ++r) row(r);
      }
    }
  });
}

}  // namespace ember::cpu
