// CPU rotary embedding: y = round(round(x * cos) + round(rotate_half(x) * sin)) per element, in
// the compute type (float for f16/bf16), so it rounds like the unfused expression.
#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {

void rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || is_fp8_v<T>) {
      fail("apply_rotary_emb", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    } else {
      using C = compute_t<T>;
      const int64_t rows = x.size(0), length = x.size(1), dim = x.size(2), half = dim / 2;
      const T* xs = x.data_ptr<T>();
      const T* cs = cos.data_ptr<T>();
      const T* ss = sin.data_ptr<T>();
      T* ys = out.data_ptr<T>();
      auto position = [&](int64_t rl) {  // one (row, position) vector of D elements
        const int64_t l = rl % length;
        const T* xr = xs + rl * dim;
        T* yr = ys + rl * dim;
        for (int64_t i = 0; i < dim; ++i) {
          const C rotated = i < half ? -static_cast<C>(xr[i + half]) : static_cast<C>(xr[i - half]);
          const C a = static_cast<C>(T(static_cast<C>(xr[i]) * static_cast<C>(cs[l * dim + i])));
          const C b = static_cast<C>(T(rotated * static_cast<C>(ss[l * dim + i])));
          yr[i] = T(a + b);
        }
      };
      const int64_t vectors = rows * length;
      if (vectors > 1 && vectors * dim >= kParallelGrain) {
#pragma omp parallel for schedule(static)
        for (int64_t rl = 0; rl < vectors; ++rl) position(rl);
      } else {
        for (int64_t rl = 0; rl < vectors; ++rl) position(rl);
      }
    }
  });
}

}  // namespace ember::cpu
