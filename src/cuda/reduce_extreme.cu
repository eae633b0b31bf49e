// The reduction engine (reduce_engine.cuh) instantiated for amax and amin of real types.
#include "cuda/reduce_engine.cuh"

namespace ember::cuda::reduce_engine {

void extreme(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_complex_v<T>) run_reduce<T>(op, x, reduced, out, ExtremeFamily<T>{kind});
  });
}

}  // namespace ember::cuda::reduce_engine
