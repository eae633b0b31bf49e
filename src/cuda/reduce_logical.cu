// The reduction engine (reduce_engine.cuh) instantiated for any and all.
#include "cuda/reduce_engine.cuh"

namespace ember::cuda::reduce_engine {

void logical(const char* op, const Tensor& x, const std::vector<bool>& reduced, const Tensor& out, ReduceOp kind) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (true) run_reduce<T>(op, x, reduced, out, LogicalFamily<T>{kind});
  });
}

}  // namespace ember::cuda::reduce_engine
