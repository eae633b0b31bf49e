// CUDA reductions (sum, prod, mean, amax, amin, any, all) and argmax/argmin: the entry points.
// The engine (schedules, kernels, performance history) is reduce_engine.cuh; each family is
// instantiated in its own file so they compile in parallel.
#include "cuda/reduce_engine.cuh"

namespace ember::cuda {
namespace {

const char* reduce_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "prod", "mean", "amax", "amin", "any", "all"};
  return names[static_cast<int>(op)];
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  const char* op_name = reduce_name(op);
  const bool inexact = is_floating_point(x.dtype()) || is_complex(x.dtype());
  DeviceGuard guard(out.device().index);
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Prod: case ReduceOp::Mean:
      EMBER_CHECK(op != ReduceOp::Mean || inexact, op_name, "dtype: expected a floating point or complex type, got {}",
                  name(x.dtype()));
      if (inexact) reduce_engine::arith_float(op_name, x, reduced, out, op);
      else reduce_engine::arith_int(op_name, x, reduced, out, op);
      break;
    case ReduceOp::Amax: case ReduceOp::Amin:
      EMBER_CHECK(!is_complex(x.dtype()), op_name, "dtype: expected a real type, got {}", name(x.dtype()));
      reduce_engine::extreme(op_name, x, reduced, out, op);
      break;
    case ReduceOp::Any: case ReduceOp::All:
      reduce_engine::logical(op_name, x, reduced, out, op);
      break;
  }
}

void arg_reduce(ArgReduceOp op, const Tensor& x, int64_t dim, const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  if (x.dim() > 0) reduced[static_cast<size_t>(dim)] = true;
  const char* op_name = op == ArgReduceOp::Argmax ? "argmax" : "argmin";
  EMBER_CHECK(!is_complex(x.dtype()), op_name, "dtype: expected a real type, got {}", name(x.dtype()));
  DeviceGuard guard(out.device().index);
  reduce_engine::arg(op_name, x, reduced, out, op == ArgReduceOp::Argmax);
}

}  // namespace ember::cuda
