// The interface every backend implements: src/cpu/*.cpp define ember::cpu::<fn>, src/cuda/*.cu
// define ember::cuda::<fn> (or src/cuda/stub.cpp, which throws "built without CUDA").
//
// The front end (src/ops) has already validated everything, broadcast inputs to the output's
// sizes (as stride-0 views), converted them to the compute dtype and allocated the outputs, so
// a backend function only computes. Both lists come from one file, backend_functions.inc, so
// the two backends cannot drift apart.
#pragma once
#include <optional>
#include <vector>

#include "ember/moe.h"
#include "ember/tensor.h"

namespace ember {

enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sigmoid, Silu, Gelu, GeluTanh, Tanh, Sin, Cos,
                     Erf, Log1p, Expm1, Reciprocal, Square, Relu, Floor, Ceil, Round, Trunc, Sign,
                     LogicalNot };
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge,
                      LogicalAnd, LogicalOr, Heaviside, LaguerreL };
enum class ReduceOp { Sum, Prod, Mean, Amax, Amin, Any, All };
enum class ArgReduceOp { Argmax, Argmin };
enum class RandomKind { Uniform, Normal };

/// True for ops whose result is kBool whatever the compute dtype.
inline bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
}

namespace cpu {
#include "backend_functions.inc"
}
namespace cuda {
#include "backend_functions.inc"
}

}  // namespace ember
