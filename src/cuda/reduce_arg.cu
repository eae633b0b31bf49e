// The reduction engine (reduce_engine.cuh) instantiated for argmax and argmin of real types.
#include "cuda/reduce_engine.cuh"

namespace ember::cuda::reduce_engine {

void arg(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, bool is_max) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_complex_v<T>) run_reduce<T>(op, x, reduced, out, ArgFamily<T>{is_max});
  });
}

}  // namespace ember::cuda::reduce_engine
