// The reduction engine (reduce_engine.cuh) instantiated for sum, prod and mean of floating point and complex types.
#include "cuda/reduce_engine.cuh"

namespace ember::cuda::reduce_engine {

void arith_float(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_inexact_v<T>) run_reduce<T>(op, x, reduced, out, ArithFamily<T>{kind});
  });
}

}  // namespace ember::cuda::reduce_engine
