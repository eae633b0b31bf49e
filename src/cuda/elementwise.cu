// CUDA elementwise ops: unary, binary, where, saturate_copy, frexp.
//
// All run on the one engine of loops.cuh. To keep compile time down the op is a run-time field
// of the functor (a uniform switch, free next to the memory traffic), so each dtype gets one
// kernel family per op kind instead of one per (op, dtype); the host checks that the dtype
// supports the op before launching. Real 16/8-bit floats compute in float, like the CPU.
#include <cfloat>

#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

// ---- unary -----------------------------------------------------------------------------------

template <class C> __device__ C float_unary(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return C(1) / std::sqrt(x);
    case UnaryOp::Sigmoid: return C(1) / (C(1) + std::exp(-x));
    case UnaryOp::Silu: return x / (C(1) + std::exp(-x));
    case UnaryOp::Gelu: return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
    case UnaryOp::GeluTanh: {
      const C beta = C(0.79788456080286535588), kappa = C(0.044715);  // sqrt(2/pi)
      return C(0.5) * x * (C(1) + std::tanh(beta * add_rn(x, mul_rn(mul_rn(mul_rn(kappa, x), x), x))));
    }
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Log1p: return std::log1p(x);
    case UnaryOp::Expm1: return std::expm1(x);
    case UnaryOp::Reciprocal: return C(1) / x;
    case UnaryOp::Square: return x * x;
    case UnaryOp::Relu: return x < C(0) ? C(0) : x;  // NaN and -0.0 pass through, like torch
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Round: return std::nearbyint(x);  // half to even
    case UnaryOp::Trunc: return std::trunc(x);
    case UnaryOp::Sign: return C((C(0) < x) - (x < C(0)));  // NaN -> 0, like torch
    case UnaryOp::LogicalNot: break;
  }
  return x;
}

template <class T> __device__ T complex_unary(UnaryOp op, T z) {
  using V = typename T::value_type;
  switch (op) {
    case UnaryOp::Neg: return -z;
    case UnaryOp::Abs: return T(::cuda::std::abs(z), V(0));
    case UnaryOp::Exp: return ::cuda::std::exp(z);
    case UnaryOp::Log: return ::cuda::std::log(z);
    case UnaryOp::Sqrt: return ::cuda::std::sqrt(z);
    case UnaryOp::Rsqrt: return T(1) / ::cuda::std::sqrt(z);
    case UnaryOp::Sigmoid: return T(1) / (T(1) + ::cuda::std::exp(-z));
    case UnaryOp::Silu: return z / (T(1) + ::cuda::std::exp(-z));
    case UnaryOp::Tanh: return ::cuda::std::tanh(z);
    case UnaryOp::Sin: return ::cuda::std::sin(z);
    case UnaryOp::Cos: return ::cuda::std::cos(z);
    case UnaryOp::Log1p: return ::cuda::std::log(T(1) + z);
    case UnaryOp::Expm1: return ::cuda::std::exp(z) - T(1);
    case UnaryOp::Reciprocal: return T(1) / z;
    case UnaryOp::Square: return z * z;
    default: break;
  }
  return z;
}

template <class T> __device__ T integer_unary(UnaryOp op, T x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x;  // bool supports only the identities (the host checks)
  } else {
    using U = std::make_unsigned_t<T>;  // wrap-around arithmetic without signed overflow
    switch (op) {
      case UnaryOp::Neg: return static_cast<T>(U(0) - static_cast<U>(x));
      case UnaryOp::Abs:
        if constexpr (std::is_signed_v<T>) return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
        else return x;
      case UnaryOp::Square: return static_cast<T>(static_cast<U>(x) * static_cast<U>(x));
      case UnaryOp::Relu:
        if constexpr (std::is_signed_v<T>) return x < T(0) ? T(0) : x;
        else return x;
      case UnaryOp::Sign:
        if constexpr (std::is_signed_v<T>) return static_cast<T>((T(0) < x) - (x < T(0)));
        else return static_cast<T>(x != T(0));
      default: return x;  // floor, ceil, round, trunc
    }
  }
}

// sigmoid and silu for f16 and bf16: the hardware exp2 and reciprocal (a few ulp of
// float, far below the output's rounding) instead of expf and an IEEE division, which made silu
// on bf16 compute-bound at 1.85 TB/s (0.49x torch, docs/PERF.md). f32/f64 keep the exact forms.
__device__ __forceinline__ float fast_sigmoid_family(UnaryOp op, float x) {
  const float r = __frcp_rn(1.f + __expf(-x));
  return op == UnaryOp::Silu ? x * r : r;
}

template <class T> struct UnaryFn {
  UnaryOp op;
  __device__ T operator()(T v) const {
    if constexpr (is_complex_v<T>) {
      return complex_unary(op, v);
    } else if constexpr (is_float_v<T>) {
      if constexpr (sizeof(T) == 2) {
        if (op == UnaryOp::Silu || op == UnaryOp::Sigmoid) return convert<T>(fast_sigmoid_family(op, static_cast<float>(v)));
      }
      return convert<T>(float_unary(op, static_cast<compute_t<T>>(v)));
    } else {
      return integer_unary(op, v);
    }
  }
};
template <class T> struct LogicalNotFn {
  __device__ bool operator()(T v) const { return !nonzero(v); }
};

bool unary_supported(UnaryOp op, DType d) {
  switch (op) {
    case UnaryOp::LogicalNot: return true;
    case UnaryOp::Abs: case UnaryOp::Neg: case UnaryOp::Square: return d != kBool;
    case UnaryOp::Relu: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
    case UnaryOp::Sign:
      return d != kBool && !is_complex(d);
    case UnaryOp::Gelu: case UnaryOp::GeluTanh: case UnaryOp::Erf:
      return is_floating_point(d);
    default:  // the transcendental ops: float and complex types
      return is_floating_point(d) || is_complex(d);
  }
}

// ---- binary ----------------------------------------------------------------------------------

template <class C> __device__ C nan_max(C a, C b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
template <class C> __device__ C nan_min(C a, C b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }

// torch's special.laguerre_polynomial_l (three-term recurrence, ATen Math.h).
template <class C> __device__ C laguerre_l(C x, int64_t n) {
  if (n < 0) return C(0);
  if (std::fabs(x) == C(0)) return C(1);
  if (n == 0) return C(1);
  if (n == 1) return C(1) - x;
  C p = C(1), q = C(1) - x, r = C(0);
  for (int64_t k = 1; k < n; ++k) {
    r = sub_rn(mul_rn(C(k + k) + (C(1) - x), q), mul_rn(C(k), p)) / C(k + 1);
    p = q;
    q = r;
  }
  return r;
}

template <class C> __device__ C float_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Maximum: return nan_max(a, b);
    case BinaryOp::Minimum: return nan_min(a, b);
    case BinaryOp::Heaviside: return a == C(0) ? b : C(a > C(0));
    case BinaryOp::LaguerreL: return laguerre_l(a, convert<int64_t>(b));
    default: break;
  }
  return a;
}

template <class T> __device__ T integer_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (auto e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

template <class T> __device__ T integer_binary(BinaryOp op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinaryOp::Add: case BinaryOp::Maximum: return a || b;
      case BinaryOp::Mul: case BinaryOp::Minimum: return a && b;
      case BinaryOp::Heaviside: return a ? true : b;
      default: return a;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case BinaryOp::Add: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case BinaryOp::Sub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case BinaryOp::Mul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case BinaryOp::Pow: return integer_pow(a, b);
      case BinaryOp::Maximum: return a > b ? a : b;
      case BinaryOp::Minimum: return a < b ? a : b;
      case BinaryOp::Heaviside: return a == 0 ? b : T(a > 0);
      default: return a;
    }
  }
}

template <class T> __device__ T complex_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return ::cuda::std::pow(a, b);
    default: break;
  }
  return a;
}

template <class T> struct BinaryFn {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
    if constexpr (is_complex_v<T>) {
      return complex_binary(op, a, b);
    } else if constexpr (is_float_v<T>) {
      using C = compute_t<T>;
      return convert<T>(float_binary(op, static_cast<C>(a), static_cast<C>(b)));
    } else {
      return integer_binary(op, a, b);
    }
  }
};

template <class T> struct CompareFn {
  BinaryOp op;
  __device__ bool operator()(T x, T y) const {
    if (op == BinaryOp::LogicalAnd) return nonzero(x) && nonzero(y);
    if (op == BinaryOp::LogicalOr) return nonzero(x) || nonzero(y);
    if constexpr (is_complex_v<T>) {
      return (op == BinaryOp::Eq) == (x == y);  // Eq and Ne only (the host checks)
    } else {
      const auto a = static_cast<compute_t<T>>(x), b = static_cast<compute_t<T>>(y);
      switch (op) {
        case BinaryOp::Eq: return a == b;
        case BinaryOp::Ne: return a != b;
        case BinaryOp::Lt: return a < b;
        case BinaryOp::Le: return a <= b;
        case BinaryOp::Gt: return a > b;
        case BinaryOp::Ge: return a >= b;
        default: return false;
      }
    }
  }
};

bool binary_supported(BinaryOp op, DType d) {
  const bool is_float = is_floating_point(d);
  switch (op) {
    case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::LogicalAnd: case BinaryOp::LogicalOr:
    case BinaryOp::Add: case BinaryOp::Mul:
      return true;
    case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
    case BinaryOp::Maximum: case BinaryOp::Minimum: case BinaryOp::Heaviside:
      return !is_complex(d);
    case BinaryOp::Sub: return d != kBool;
    case BinaryOp::Pow: return d != kBool;
    case BinaryOp::Div: return is_float || is_complex(d);
    case BinaryOp::LaguerreL: return is_float;
  }
  return false;
}

const char* unary_name(UnaryOp op) {
  static constexpr const char* names[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "silu", "gelu",
                                          "gelu_tanh", "tanh", "sin", "cos", "erf", "log1p", "expm1", "reciprocal",
                                          "square", "relu", "floor", "ceil", "round", "trunc", "sign", "logical_not"};
  return names[static_cast<int>(op)];
}
const char* binary_name(BinaryOp op) {
  static constexpr const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne",
                                          "lt", "le", "gt", "ge", "logical_and", "logical_or", "heaviside",
                                          "laguerre_polynomial_l"};
  return names[static_cast<int>(op)];
}

// ---- where, saturate_copy, frexp -------------------------------------------------------------

template <class T> struct WhereFn {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <class T> double max_finite() {
  if constexpr (std::is_same_v<T, Half>) return 65504.0;
  else if constexpr (std::is_same_v<T, BFloat16>) return 3.3895313892515355e38;
  else if constexpr (std::is_same_v<T, Float8_e4m3fn>) return 448.0;
  else if constexpr (std::is_same_v<T, Float8_e5m2>) return 57344.0;
  else if constexpr (std::is_same_v<T, float>) return FLT_MAX;
  else return DBL_MAX;
}

/// Clamps in double (exact for every source's finite values) to +-limit; infinities clamp too,
/// NaN fails both comparisons and stays NaN (as the CPU backend).
template <class Out, class In> struct SaturateFn {
  double limit;
  __device__ Out operator()(In v) const {
    double x = convert<double>(v);
    if (x > limit) x = limit;
    else if (x < -limit) x = -limit;
    return convert<Out>(x);
  }
};

template <class F> void dispatch_real_float(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::Float16: f(type_tag<Half>{}); return;
    case DType::BFloat16: f(type_tag<BFloat16>{}); return;
    case DType::Float32: f(type_tag<float>{}); return;
    case DType::Float64: f(type_tag<double>{}); return;
    case DType::Float8_e4m3fn: f(type_tag<Float8_e4m3fn>{}); return;
    case DType::Float8_e5m2: f(type_tag<Float8_e5m2>{}); return;
    default: fail(op, "dtype: expected a floating point type, got {}", name(d));
  }
}

/// Ptrs: [0] mantissa (T), [1] exponent (int32), [2] x (T).
template <class T> struct FrexpBody {
  __device__ void operator()(const Ptrs<3>& p) const {
    using C = compute_t<T>;
    int e = 0;
    const C m = std::frexp(static_cast<C>(*reinterpret_cast<const T*>(p.p[2])), &e);
    *reinterpret_cast<T*>(p.p[0]) = convert<T>(m);
    *reinterpret_cast<int32_t*>(p.p[1]) = e;
  }
};

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  EMBER_CHECK(unary_supported(op, x.dtype()), unary_name(op), "dtype on CUDA: expected a type the op supports, got {}",
              name(x.dtype()));
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (op == UnaryOp::LogicalNot) map<bool, T>(out, LogicalNotFn<T>{}, {x});
    else map<T, T>(out, UnaryFn<T>{op}, {x});
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  EMBER_CHECK(binary_supported(op, a.dtype()), binary_name(op), "dtype on CUDA: expected a type the op supports, got {}",
              name(a.dtype()));
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_comparison(op)) map<bool, T, T>(out, CompareFn<T>{op}, {a, b});
    else map<T, T, T>(out, BinaryFn<T>{op}, {a, b});
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch_bits(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(out, WhereFn<T>{}, {cond, a, b});
  });
}

void saturate_copy(const Tensor& src, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  dispatch_real_float(out.dtype(), "saturate_cast", [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    dispatch(src.dtype(), [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      if constexpr (is_complex_v<In>) fail("saturate_cast", "source dtype: expected a real type, got {}", name(src.dtype()));
      else map<Out, In>(out, SaturateFn<Out, In>{max_finite<Out>()}, {src});
    });
  });
}

void frexp(const Tensor& x, const Tensor& mantissa, const Tensor& exponent) {
  if (x.numel() == 0) return;
  DeviceGuard guard(x.device().index);
  dispatch_real_float(x.dtype(), "frexp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 1) fail("frexp", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
    else for_each_offset<3>("frexp", x.device(), x.sizes(),
                       {static_cast<char*>(mantissa.raw_data()), static_cast<char*>(exponent.raw_data()),
                        static_cast<char*>(x.raw_data())},
                       {byte_strides(mantissa), byte_strides(exponent), byte_strides(x)}, FrexpBody<T>{});
  });
}

}  // namespace ember::cuda
