// CPU elementwise kernels: unary, binary (arithmetic, comparisons, logical, heaviside, Laguerre),
// where, saturating casts and frexp.
//
// Each op is instantiated only for the dtype family the front end lets through (transcendental
// ops for float and complex types, integer ops for integers, ...). Float16/BFloat16/FP8 compute
// in float (compute_t) and round once on store. Integer arithmetic wraps like torch's (done in
// unsigned types, so signed overflow is defined).
#include <bit>
#include <cmath>
#include <limits>

#include "backend.h"
#include "cpu/loops.h"

namespace ember::cpu {

namespace {

[[noreturn]] void unsupported(const char* op, DType d) {
  fail(op, "dtype: expected a dtype this op supports, got {}", name(d));
}

template <class T> inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Wrapping integer arithmetic: computed in an unsigned type at least as wide as int, so neither
// overflow nor integer promotion is undefined.
template <class T> using wrap_t = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
template <class T> T wrap_add(T a, T b) { return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b)); }
template <class T> T wrap_sub(T a, T b) { return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b)); }
template <class T> T wrap_mul(T a, T b) { return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b)); }
template <class T> T wrap_neg(T a) { return wrap_sub(T(0), a); }

// ATen's powi: exponentiation by squaring; a negative exponent gives 1 for base 1, +-1 for
// base -1 and 0 otherwise.
template <class T> T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = wrap_mul(result, base);
    exp = static_cast<T>(exp / 2);
    base = wrap_mul(base, base);
  }
  return result;
}

// ATen's laguerre_polynomial_l_forward, evaluated in F.
template <class F> F laguerre(F x, F n_value) {
  // float -> int64 as x86 converts: NaN and out-of-range values give INT64_MIN (so 0 below).
  const bool in_range = n_value >= F(-9.2e18) && n_value <= F(9.2e18);
  const int64_t n = in_range ? static_cast<int64_t>(n_value) : std::numeric_limits<int64_t>::min();
  if (n < 0) return F(0);
  if (std::abs(x) == F(0) || n == 0) return F(1);
  if (n == 1) return F(1) - x;
  F p = F(1), q = F(1) - x, r = q;
  for (int64_t k = 1; k < n; ++k) {
    r = ((static_cast<F>(k + k) + (F(1) - x)) * q - static_cast<F>(k) * p) / static_cast<F>(k + 1);
    p = q;
    q = r;
  }
  return r;
}

// NaN-propagating maximum/minimum (torch.maximum/minimum).
template <class F> F nan_max(F a, F b) { return a != a ? a : (b != b ? b : (a < b ? b : a)); }
template <class F> F nan_min(F a, F b) { return a != a ? a : (b != b ? b : (b < a ? b : a)); }

template <class F> F gelu_erf(F x) {
  return x * F(0.5) * (F(1) + std::erf(x * static_cast<F>(M_SQRT1_2)));
}
template <class F> F gelu_tanh(F x) {
  const F beta = static_cast<F>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = static_cast<F>(0.044715);
  const F inner = beta * (x + kappa * x * x * x);
  return F(0.5) * x * (F(1) + std::tanh(inner));
}

// out = f(x) in T's compute type, rounded once to T.
template <class T, class F> void map_unary(const Tensor& x, const Tensor& out, F f) {
  using C = compute_t<T>;
  map<T, T>(out, [f](T v) { return static_cast<T>(f(static_cast<C>(v))); }, {x});
}

template <class T> void unary_typed(UnaryOp op, const Tensor& x, const Tensor& out) {
  using C = compute_t<T>;
  if constexpr (is_int_v<T>) {
    switch (op) {
      case UnaryOp::Neg: return map_unary<T>(x, out, [](T v) { return wrap_neg(v); });
      case UnaryOp::Abs:
        if constexpr (std::is_unsigned_v<T>) return map_unary<T>(x, out, [](T v) { return v; });
        else return map_unary<T>(x, out, [](T v) { return v < 0 ? wrap_neg(v) : v; });
      case UnaryOp::Square: return map_unary<T>(x, out, [](T v) { return wrap_mul(v, v); });
      case UnaryOp::Relu:
        if constexpr (std::is_unsigned_v<T>) return map_unary<T>(x, out, [](T v) { return v; });
        else return map_unary<T>(x, out, [](T v) { return v < T(0) ? T(0) : v; });
      case UnaryOp::Sign:
        if constexpr (std::is_unsigned_v<T>) return map_unary<T>(x, out, [](T v) { return static_cast<T>(v != T(0)); });
        else return map_unary<T>(x, out, [](T v) { return static_cast<T>((T(0) < v) - (v < T(0))); });
      default: unsupported("unary", x.dtype());
    }
  } else if constexpr (is_float_v<T>) {
    switch (op) {
      case UnaryOp::Neg: return map_unary<T>(x, out, [](C v) { return -v; });
      case UnaryOp::Abs: return map_unary<T>(x, out, [](C v) { return std::abs(v); });
      case UnaryOp::Exp: return map_unary<T>(x, out, [](C v) { return std::exp(v); });
      case UnaryOp::Log: return map_unary<T>(x, out, [](C v) { return std::log(v); });
      case UnaryOp::Sqrt: return map_unary<T>(x, out, [](C v) { return std::sqrt(v); });
      case UnaryOp::Rsqrt: return map_unary<T>(x, out, [](C v) { return C(1) / std::sqrt(v); });
      case UnaryOp::Sigmoid: return map_unary<T>(x, out, [](C v) { return C(1) / (C(1) + std::exp(-v)); });
      case UnaryOp::Silu: return map_unary<T>(x, out, [](C v) { return v / (C(1) + std::exp(-v)); });
      case UnaryOp::Gelu: return map_unary<T>(x, out, [](C v) { return gelu_erf(v); });
      case UnaryOp::GeluTanh: return map_unary<T>(x, out, [](C v) { return gelu_tanh(v); });
      case UnaryOp::Tanh: return map_unary<T>(x, out, [](C v) { return std::tanh(v); });
      case UnaryOp::Sin: return map_unary<T>(x, out, [](C v) { return std::sin(v); });
      case UnaryOp::Cos: return map_unary<T>(x, out, [](C v) { return std::cos(v); });
      case UnaryOp::Erf: return map_unary<T>(x, out, [](C v) { return std::erf(v); });
      case UnaryOp::Log1p: return map_unary<T>(x, out, [](C v) { return std::log1p(v); });
      case UnaryOp::Expm1: return map_unary<T>(x, out, [](C v) { return std::expm1(v); });
      case UnaryOp::Reciprocal: return map_unary<T>(x, out, [](C v) { return C(1) / v; });
      case UnaryOp::Square: return map_unary<T>(x, out, [](C v) { return v * v; });
      case UnaryOp::Relu: return map_unary<T>(x, out, [](C v) { return v < C(0) ? C(0) : v; });
      case UnaryOp::Floor: return map_unary<T>(x, out, [](C v) { return std::floor(v); });
      case UnaryOp::Ceil: return map_unary<T>(x, out, [](C v) { return std::ceil(v); });
      case UnaryOp::Round: return map_unary<T>(x, out, [](C v) { return std::nearbyint(v); });  // half to even
      case UnaryOp::Trunc: return map_unary<T>(x, out, [](C v) { return std::trunc(v); });
      case UnaryOp::Sign: return map_unary<T>(x, out, [](C v) { return static_cast<C>((C(0) < v) - (v < C(0))); });
      default: unsupported("unary", x.dtype());
    }
  } else if constexpr (is_complex_v<T>) {
    using R = typename T::value_type;
    switch (op) {
      case UnaryOp::Neg: return map_unary<T>(x, out, [](T v) { return -v; });
      case UnaryOp::Abs: return map_unary<T>(x, out, [](T v) { return T(std::abs(v)); });
      case UnaryOp::Exp: return map_unary<T>(x, out, [](T v) { return std::exp(v); });
      case UnaryOp::Log: return map_unary<T>(x, out, [](T v) { return std::log(v); });
      case UnaryOp::Sqrt: return map_unary<T>(x, out, [](T v) { return std::sqrt(v); });
      case UnaryOp::Rsqrt: return map_unary<T>(x, out, [](T v) { return R(1) / std::sqrt(v); });
      case UnaryOp::Sigmoid: return map_unary<T>(x, out, [](T v) { return R(1) / (R(1) + std::exp(-v)); });
      case UnaryOp::Silu: return map_unary<T>(x, out, [](T v) { return v / (R(1) + std::exp(-v)); });
      case UnaryOp::Tanh: return map_unary<T>(x, out, [](T v) { return std::tanh(v); });
      case UnaryOp::Sin: return map_unary<T>(x, out, [](T v) { return std::sin(v); });
      case UnaryOp::Cos: return map_unary<T>(x, out, [](T v) { return std::cos(v); });
      case UnaryOp::Log1p: return map_unary<T>(x, out, [](T v) { return std::log(R(1) + v); });
      case UnaryOp::Expm1: return map_unary<T>(x, out, [](T v) { return std::exp(v) - R(1); });
      case UnaryOp::Reciprocal: return map_unary<T>(x, out, [](T v) { return R(1) / v; });
      case UnaryOp::Square: return map_unary<T>(x, out, [](T v) { return v * v; });
      default: unsupported("unary", x.dtype());
    }
  } else {
    unsupported("unary", x.dtype());
  }
}

template <class T, class F> void map_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  using C = compute_t<T>;
  map<T, T, T>(out, [f](T x, T y) { return static_cast<T>(f(static_cast<C>(x), static_cast<C>(y))); }, {a, b});
}
template <class T, class F> void map_predicate(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  using C = compute_t<T>;
  map<bool, T, T>(out, [f](T x, T y) { return f(static_cast<C>(x), static_cast<C>(y)); }, {a, b});
}

// Comparisons and logical ops: the same for every dtype family (ordering ops are refused for
// complex by the front end). Returns false when op is not one of them.
template <class T> bool predicate_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  using C = compute_t<T>;
  switch (op) {
    case BinaryOp::Eq: map_predicate<T>(a, b, out, [](C x, C y) { return x == y; }); return true;
    case BinaryOp::Ne: map_predicate<T>(a, b, out, [](C x, C y) { return x != y; }); return true;
    case BinaryOp::LogicalAnd: map_predicate<T>(a, b, out, [](C x, C y) { return x != C(0) && y != C(0); }); return true;
    case BinaryOp::LogicalOr: map_predicate<T>(a, b, out, [](C x, C y) { return x != C(0) || y != C(0); }); return true;
    default: break;
  }
  if constexpr (!is_complex_v<T>) {
    switch (op) {
      case BinaryOp::Lt: map_predicate<T>(a, b, out, [](C x, C y) { return x < y; }); return true;
      case BinaryOp::Le: map_predicate<T>(a, b, out, [](C x, C y) { return x <= y; }); return true;
      case BinaryOp::Gt: map_predicate<T>(a, b, out, [](C x, C y) { return x > y; }); return true;
      case BinaryOp::Ge: map_predicate<T>(a, b, out, [](C x, C y) { return x >= y; }); return true;
      default: break;
    }
  }
  return false;
}

template <class T> void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  using C = compute_t<T>;
  if (predicate_typed<T>(op, a, b, out)) return;
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinaryOp::Add: case BinaryOp::Maximum: case BinaryOp::Heaviside:  // heaviside: x ? 1 : values
        return map_binary<T>(a, b, out, [](bool x, bool y) { return x || y; });
      case BinaryOp::Mul: case BinaryOp::Minimum:
        return map_binary<T>(a, b, out, [](bool x, bool y) { return x && y; });
      default: unsupported("binary", a.dtype());
    }
  } else if constexpr (is_int_v<T>) {
    switch (op) {
      case BinaryOp::Add: return map_binary<T>(a, b, out, [](T x, T y) { return wrap_add(x, y); });
      case BinaryOp::Sub: return map_binary<T>(a, b, out, [](T x, T y) { return wrap_sub(x, y); });
      case BinaryOp::Mul: return map_binary<T>(a, b, out, [](T x, T y) { return wrap_mul(x, y); });
      case BinaryOp::Pow: return map_binary<T>(a, b, out, [](T x, T y) { return int_pow(x, y); });
      case BinaryOp::Maximum: return map_binary<T>(a, b, out, [](T x, T y) { return x < y ? y : x; });
      case BinaryOp::Minimum: return map_binary<T>(a, b, out, [](T x, T y) { return y < x ? y : x; });
      case BinaryOp::Heaviside:
        return map_binary<T>(a, b, out, [](T x, T y) { return x == T(0) ? y : static_cast<T>(x > T(0)); });
      default: unsupported("binary", a.dtype());
    }
  } else if constexpr (is_float_v<T>) {
    switch (op) {
      case BinaryOp::Add: return map_binary<T>(a, b, out, [](C x, C y) { return x + y; });
      case BinaryOp::Sub: return map_binary<T>(a, b, out, [](C x, C y) { return x - y; });
      case BinaryOp::Mul: return map_binary<T>(a, b, out, [](C x, C y) { return x * y; });
      case BinaryOp::Div: return map_binary<T>(a, b, out, [](C x, C y) { return x / y; });
      case BinaryOp::Pow: return map_binary<T>(a, b, out, [](C x, C y) { return std::pow(x, y); });
      case BinaryOp::Maximum: return map_binary<T>(a, b, out, [](C x, C y) { return nan_max(x, y); });
      case BinaryOp::Minimum: return map_binary<T>(a, b, out, [](C x, C y) { return nan_min(x, y); });
      case BinaryOp::Heaviside:
        return map_binary<T>(a, b, out, [](C x, C y) { return x == C(0) ? y : static_cast<C>(x > C(0)); });
      case BinaryOp::LaguerreL: return map_binary<T>(a, b, out, [](C x, C n) { return laguerre(x, n); });
      default: unsupported("binary", a.dtype());
    }
  } else if constexpr (is_complex_v<T>) {
    switch (op) {
      case BinaryOp::Add: return map_binary<T>(a, b, out, [](T x, T y) { return x + y; });
      case BinaryOp::Sub: return map_binary<T>(a, b, out, [](T x, T y) { return x - y; });
      case BinaryOp::Mul: return map_binary<T>(a, b, out, [](T x, T y) { return x * y; });
      case BinaryOp::Div: return map_binary<T>(a, b, out, [](T x, T y) { return x / y; });
      case BinaryOp::Pow: return map_binary<T>(a, b, out, [](T x, T y) { return std::pow(x, y); });
      default: unsupported("binary", a.dtype());
    }
  }
}

// The largest finite value of each float type, as a double.
template <class T> double max_finite() {
  if constexpr (std::is_same_v<T, Half>) return 65504.0;
  else if constexpr (std::is_same_v<T, BFloat16>) return 3.3895313892515355e38;
  else if constexpr (std::is_same_v<T, Float8_e4m3fn>) return 448.0;
  else if constexpr (std::is_same_v<T, Float8_e5m2>) return 57344.0;
  else return static_cast<double>(std::numeric_limits<T>::max());
}

// IEEE frexp by bit decomposition: x = m * 2^e with |m| in [0.5, 1); zero, inf and NaN give
// (x, 0). Subnormals are first scaled into the normal range by an exact power of two.
template <class F> F frexp_bits(F x, int32_t& e) {
  using U = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  constexpr int kMantissaBits = std::numeric_limits<F>::digits - 1;
  constexpr int kBias = std::numeric_limits<F>::max_exponent - 1;
  constexpr U kExpMask = (U(1) << (sizeof(F) * 8 - 1)) - (U(1) << kMantissaBits);
  int32_t adjust = 0;
  U bits = std::bit_cast<U>(x);
  U exp_field = (bits & kExpMask) >> kMantissaBits;
  if (exp_field == kExpMask >> kMantissaBits || (bits << 1) == 0) {
    e = 0;
    return x;
  }
  if (exp_field == 0) {  // subnormal
    constexpr int kScale = kMantissaBits + 1;
    bits = std::bit_cast<U>(x * static_cast<F>(U(1) << kScale));
    exp_field = (bits & kExpMask) >> kMantissaBits;
    adjust = -kScale;
  }
  e = static_cast<int32_t>(exp_field) - (kBias - 1) + adjust;
  return std::bit_cast<F>((bits & ~kExpMask) | (static_cast<U>(kBias - 1) << kMantissaBits));
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  if (op == UnaryOp::LogicalNot) {
    dispatch(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      map<bool, T>(out, [](T v) { return static_cast<C>(v) == C(0); }, {x});
    });
    return;
  }
  dispatch(x.dtype(), [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, x, out); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch(a.dtype(), [&](auto tag) { binary_typed<typename decltype(tag)::type>(op, a, b, out); });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(out, [](bool c, T x, T y) { return c ? x : y; }, {cond, a, b});
  });
}

void saturate_copy(const Tensor& src, const Tensor& out) {
  dispatch(out.dtype(), [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    if constexpr (!is_float_v<Out>) {
      unsupported("saturate_cast", out.dtype());
    } else {
      dispatch(src.dtype(), [&](auto in_tag) {
        using In = typename decltype(in_tag)::type;
        if constexpr (is_complex_v<In>) {
          unsupported("saturate_cast", src.dtype());
        } else {
          // Clamping in double is exact for every source type's finite values; NaN fails both
          // comparisons and stays NaN.
          const double limit = max_finite<Out>();
          map<Out, In>(out, [limit](In x) {
            double v = convert<double>(x);
            if (v > limit) v = limit;
            else if (v < -limit) v = -limit;
            return convert<Out>(v);
          }, {src});
        }
      });
    }
  });
}

void frexp(const Tensor& x, const Tensor& mantissa, const Tensor& exponent) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>) {
      unsupported("frexp", x.dtype());
    } else {
      using C = compute_t<T>;  // the 16-bit types decompose exactly in float
      std::array<char*, 3> bases{static_cast<char*>(mantissa.raw_data()), static_cast<char*>(exponent.raw_data()),
                                 static_cast<char*>(x.raw_data())};
      std::array<Shape, 3> strides{byte_strides(mantissa), byte_strides(exponent), byte_strides(x)};
      for_each_run<3>(x.sizes(), bases, strides, [](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          int32_t e;
          const C m = frexp_bits(static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * s[2])), e);
          *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(m);
          *reinterpret_cast<int32_t*>(p[1] + i * s[1]) = e;
        }
      });
    }
  });
}

}  // namespace ember::cpu
