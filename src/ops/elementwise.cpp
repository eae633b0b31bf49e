// Elementwise ops: torch's result type, broadcasting, casts to the compute dtype, the dtypes each
// op accepts (torch's refusals, extended to uint16/32/64 and fp8 where the result is unambiguous),
// then one backend call per op.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {

namespace {

// ---- torch.result_type -------------------------------------------------------------------------

// One input of an elementwise op: a tensor or a Scalar (a "wrapped number" in torch).
struct Operand {
  const Tensor* tensor = nullptr;
  Scalar scalar;
  Operand(const Tensor& t) : tensor(&t) {}  // NOLINT: implicit, to write {a, b}
  Operand(Scalar s) : scalar(s) {}          // NOLINT
};

bool is_float_or_complex(DType d) { return is_floating_point(d) || is_complex(d); }

// ATen's ResultTypeState: the promoted type of each priority class.
struct ResultTypeState {
  std::optional<DType> dim, zero_dim, wrapped;
};

std::optional<DType> promote_optional(std::optional<DType> a, DType b) {
  return a ? promote_types(*a, b) : b;
}

// ATen's combine_categories: the lower priority class only counts when its category is higher.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_complex(*higher)) return higher;
  if (is_complex(*lower)) {
    if (!is_floating_point(*higher)) return lower;
    if (is_fp8(*higher)) return promote_types(*higher, *lower);  // torch has no complex fp8: refused
    // torch keeps the float's precision: complex32/bcomplex32 for the 16-bit types, which ember
    // lacks; complex64 is the nearest ember type.
    return *higher == kFloat64 ? kComplex128 : kComplex64;
  }
  if (is_floating_point(*higher)) return higher;
  if (*higher == kBool || is_floating_point(*lower)) return promote_types(*higher, *lower);
  return higher;
}

DType scalar_dtype(const Scalar& s) {
  // A wrapped float takes the default dtype (float32), a wrapped complex the default complex type.
  switch (s.kind()) {
    case Scalar::Kind::Bool: return kBool;
    case Scalar::Kind::Int: return kInt64;
    case Scalar::Kind::Float: return kFloat32;
    case Scalar::Kind::Complex: return kComplex64;
  }
  return kInt64;
}

DType result_type_of(std::initializer_list<Operand> operands) {
  ResultTypeState state;
  for (const Operand& o : operands) {
    if (!o.tensor) state.wrapped = promote_optional(state.wrapped, scalar_dtype(o.scalar));
    else if (o.tensor->dim() > 0) state.dim = promote_optional(state.dim, o.tensor->dtype());
    else state.zero_dim = promote_optional(state.zero_dim, o.tensor->dtype());
  }
  return *combine_categories(state.dim, combine_categories(state.zero_dim, state.wrapped));
}

// ---- broadcasting and operand preparation -------------------------------------------------------

// The operand cast to `dtype` and broadcast (as a stride-0 view) to `shape`.
Tensor prepare(const Operand& o, DType dtype, const Shape& shape, Device device) {
  if (!o.tensor) return scalar_tensor(o.scalar, dtype, device).expand(shape);
  return o.tensor->to(dtype).expand(shape);
}

Device device_of(const char* op, std::initializer_list<Operand> operands) {
  std::optional<Device> device;
  for (const Operand& o : operands) {
    if (!o.tensor) continue;
    ops::check_defined(op, *o.tensor);
    if (!device) device = o.tensor->device();
    else EMBER_CHECK(o.tensor->device() == *device, op, "all tensors on one device: expected {}, got {}",
                     device->str(), o.tensor->device().str());
  }
  return device.value_or(Device::cpu());
}

Shape shape_of(const char* op, std::initializer_list<Operand> operands) {
  std::vector<const Tensor*> tensors;
  for (const Operand& o : operands) if (o.tensor) tensors.push_back(o.tensor);
  Shape out;
  for (const Tensor* t : tensors) {
    try {
      out = broadcast_shapes(out, t->sizes());
    } catch (const Error&) {
      std::string shapes;
      for (const Tensor* u : tensors) shapes += (shapes.empty() ? "" : " and ") + shape_str(u->sizes());
      fail(op, "shapes must broadcast: expected compatible shapes, got {}", shapes);
    }
  }
  return out;
}

// ---- which dtypes each op accepts ---------------------------------------------------------------

void refuse_bool(const char* op, DType d, const char* hint = "") {
  EMBER_CHECK(d != kBool, op, "dtype: expected a numeric type (torch refuses bool{}), got bool", hint);
}
void refuse_complex(const char* op, DType d) {
  EMBER_CHECK(!is_complex(d), op, "dtype: expected a real type (torch refuses complex), got {}", name(d));
}

// ---- unary ---------------------------------------------------------------------------------------

Tensor run_unary(UnaryOp op, const Tensor& x, DType compute, DType out_dtype) {
  const Tensor in = x.to(compute);
  Tensor out = empty(x.sizes(), out_dtype, x.device());
  if (out.numel() > 0) EMBER_DISPATCH(x.device(), unary, op, in, out);
  return out;
}

// exp, log, sin, ...: integer and bool inputs compute in float32 (torch's int -> float promotion).
Tensor float_unary(const char* op_name, UnaryOp op, const Tensor& x, bool complex_ok = true) {
  ops::check_defined(op_name, x);
  if (!complex_ok) refuse_complex(op_name, x.dtype());
  const DType compute = is_float_or_complex(x.dtype()) ? x.dtype() : kFloat32;
  return run_unary(op, x, compute, compute);
}

// Ops torch defines only for floating inputs (silu, gelu).
Tensor floating_only_unary(const char* op_name, UnaryOp op, const Tensor& x, bool complex_ok) {
  ops::check_defined(op_name, x);
  EMBER_CHECK(is_floating_point(x.dtype()) || (complex_ok && is_complex(x.dtype())), op_name,
              "dtype: expected a floating point{} type, got {}", complex_ok ? " or complex" : "", name(x.dtype()));
  return run_unary(op, x, x.dtype(), x.dtype());
}

// floor, ceil, round, trunc: identity on integers (a copy, like torch), refused for bool/complex.
Tensor rounding_unary(const char* op_name, UnaryOp op, const Tensor& x) {
  ops::check_defined(op_name, x);
  refuse_bool(op_name, x.dtype());
  refuse_complex(op_name, x.dtype());
  if (is_integral(x.dtype())) return x.clone();
  return run_unary(op, x, x.dtype(), x.dtype());
}

// ---- binary --------------------------------------------------------------------------------------

bool is_reduced_float(DType d) { return d == kFloat16 || d == kBFloat16; }

bool has_bool_operand(const Operand& o) {
  return o.tensor ? o.tensor->dtype() == kBool : o.scalar.is_bool();
}

bool is_single_element(const Operand& o) { return !o.tensor || o.tensor->numel() == 1; }

// Validates, promotes, broadcasts and runs op in `compute`; the output has `out_dtype`.
Tensor run_binary(const char* op_name, BinaryOp op, const Operand& a, const Operand& b, DType compute, DType out_dtype) {
  const Device device = device_of(op_name, {a, b});
  const Shape shape = shape_of(op_name, {a, b});
  Tensor out = empty(shape, out_dtype, device);
  if (out.numel() > 0) {
    EMBER_DISPATCH(device, binary, op, prepare(a, compute, shape, device), prepare(b, compute, shape, device), out);
  }
  return out;
}

// add/sub/mul/div. For float16/bfloat16 with a one-element second operand (a Scalar, a 0-dim
// tensor or a broadcast single element) torch reads that operand in float, unrounded, and
// rounds only the result; computing in float32 and casting once gives the same bits.
Tensor arithmetic(const char* op_name, BinaryOp op, const Operand& a, const Operand& b) {
  device_of(op_name, {a, b});
  DType compute = result_type_of({a, b});
  if (op == BinaryOp::Sub) {
    EMBER_CHECK(!has_bool_operand(a) && !has_bool_operand(b), op_name,
                "operands: expected no bool operand (torch refuses `-` with bool; use logical_xor or "
                "logical_not), got {}", "a bool operand");
  }
  if (op == BinaryOp::Div && !is_float_or_complex(compute)) compute = kFloat32;  // true division
  if (is_reduced_float(compute) && is_single_element(b) && op != BinaryOp::Pow) {
    return run_binary(op_name, op, a, b, kFloat32, kFloat32).to(compute);
  }
  return run_binary(op_name, op, a, b, compute, compute);
}

// The range of an integer dtype, for clamp's bound checks (wide enough for uint64 and int64).
struct IntRange { __int128 lo, hi; };
IntRange int_range(DType d) {
  switch (d) {
    case kUInt8: return {0, 255};
    case kInt8: return {-128, 127};
    case kUInt16: return {0, 65535};
    case kInt16: return {-32768, 32767};
    case kUInt32: return {0, 4294967295LL};
    case kInt32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case kUInt64: return {0, static_cast<__int128>(std::numeric_limits<uint64_t>::max())};
    default: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}
__int128 scalar_int(const Scalar& s) {
  return s.to_double() < 0 ? static_cast<__int128>(s.to_int64()) : static_cast<__int128>(s.to_uint64());
}

Tensor power(const Operand& a, const Operand& b) {
  device_of("pow", {a, b});
  const DType compute = result_type_of({a, b});
  if (compute == kBool && !b.tensor) {  // torch allows bool ** bool Scalar: x ** True = x, x ** False = 1
    return b.scalar.to<bool>() ? a.tensor->clone() : ones(a.tensor->sizes(), kBool, a.tensor->device());
  }
  refuse_bool("pow", compute);
  EMBER_CHECK(!(is_integral(compute) && !b.tensor && b.scalar.is_integral() && b.scalar.to_double() < 0),
              "pow", "exponent: expected a non-negative integer (Integers to negative integer powers are not "
              "allowed), got {}", b.scalar.to_int64());
  if (is_integral(compute) && !b.tensor && b.scalar.is_integral()) {
    // torch converts the exponent to the compute type and refuses values it cannot hold.
    const IntRange range = int_range(compute);
    EMBER_CHECK(scalar_int(b.scalar) <= range.hi, "pow", "exponent: expected a value representable in {}, got {}",
                name(compute), b.scalar.to_double());
  }
  return run_binary("pow", BinaryOp::Pow, a, b, compute, compute);
}

Tensor compare(const char* op_name, BinaryOp op, const Operand& a, const Operand& b) {
  device_of(op_name, {a, b});
  // Compared in the promoted type, never through double: exact for every integer width.
  const DType compute = result_type_of({a, b});
  if (op != BinaryOp::Eq && op != BinaryOp::Ne && op != BinaryOp::LogicalAnd && op != BinaryOp::LogicalOr) {
    refuse_complex(op_name, compute);
  }
  return run_binary(op_name, op, a, b, compute, kBool);
}

Tensor extremum(const char* op_name, BinaryOp op, const Tensor& a, const Tensor& b) {
  device_of(op_name, {a, b});
  const DType compute = result_type_of({a, b});
  refuse_complex(op_name, compute);
  return run_binary(op_name, op, a, b, compute, compute);
}

}  // namespace

// ---- public: type promotion and broadcasting ------------------------------------------------------

DType result_type(const Tensor& a, const Tensor& b) {
  ops::check_defined("result_type", a);
  ops::check_defined("result_type", b);
  return result_type_of({a, b});
}
DType result_type(const Tensor& a, Scalar b) {
  ops::check_defined("result_type", a);
  return result_type_of({a, b});
}

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(x == y || x == 1 || y == 1, "broadcast_shapes",
                "shapes must broadcast: expected equal sizes or 1 at dim {} of the result, got {} and {} (shapes {} and {})",
                i, x, y, shape_str(a), shape_str(b));
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// ---- public: unary --------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  ops::check_defined("neg", x);
  refuse_bool("neg", x.dtype(), "; use logical_not");
  return run_unary(UnaryOp::Neg, x, x.dtype(), x.dtype());
}
Tensor abs(const Tensor& x) {
  ops::check_defined("abs", x);
  refuse_bool("abs", x.dtype());
  if (is_complex(x.dtype())) return run_unary(UnaryOp::Abs, x, x.dtype(), x.dtype()).to(to_real(x.dtype()));
  return run_unary(UnaryOp::Abs, x, x.dtype(), x.dtype());
}
Tensor exp(const Tensor& x) { return float_unary("exp", UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return float_unary("log", UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return float_unary("sqrt", UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return float_unary("rsqrt", UnaryOp::Rsqrt, x); }
Tensor sigmoid(const Tensor& x) { return float_unary("sigmoid", UnaryOp::Sigmoid, x); }
Tensor silu(const Tensor& x) { return floating_only_unary("silu", UnaryOp::Silu, x, true); }
Tensor gelu(const Tensor& x, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", "gelu",
              "approximate: expected \"none\" or \"tanh\", got \"{}\"", approximate);
  return floating_only_unary("gelu", approximate == "none" ? UnaryOp::Gelu : UnaryOp::GeluTanh, x, false);
}
Tensor tanh(const Tensor& x) { return float_unary("tanh", UnaryOp::Tanh, x); }
Tensor sin(const Tensor& x) { return float_unary("sin", UnaryOp::Sin, x); }
Tensor cos(const Tensor& x) { return float_unary("cos", UnaryOp::Cos, x); }
Tensor erf(const Tensor& x) { return float_unary("erf", UnaryOp::Erf, x, false); }
Tensor log1p(const Tensor& x) { return float_unary("log1p", UnaryOp::Log1p, x); }
Tensor expm1(const Tensor& x) { return float_unary("expm1", UnaryOp::Expm1, x); }
Tensor reciprocal(const Tensor& x) { return float_unary("reciprocal", UnaryOp::Reciprocal, x); }
Tensor square(const Tensor& x) {
  ops::check_defined("square", x);
  // torch computes square as pow(x, 2): bool promotes to int64 with the integer Scalar 2.
  const DType compute = x.dtype() == kBool ? kInt64 : x.dtype();
  return run_unary(UnaryOp::Square, x, compute, compute);
}
Tensor relu(const Tensor& x) {
  ops::check_defined("relu", x);
  refuse_bool("relu", x.dtype());
  refuse_complex("relu", x.dtype());
  return run_unary(UnaryOp::Relu, x, x.dtype(), x.dtype());
}
Tensor floor(const Tensor& x) { return rounding_unary("floor", UnaryOp::Floor, x); }
Tensor ceil(const Tensor& x) { return rounding_unary("ceil", UnaryOp::Ceil, x); }
Tensor round(const Tensor& x) { return rounding_unary("round", UnaryOp::Round, x); }
Tensor trunc(const Tensor& x) { return rounding_unary("trunc", UnaryOp::Trunc, x); }
Tensor sign(const Tensor& x) {
  ops::check_defined("sign", x);
  refuse_complex("sign", x.dtype());
  if (x.dtype() == kBool) return x.clone();
  return run_unary(UnaryOp::Sign, x, x.dtype(), x.dtype());
}
Tensor logical_not(const Tensor& x) {
  ops::check_defined("logical_not", x);
  return run_unary(UnaryOp::LogicalNot, x, x.dtype(), kBool);
}

// ---- public: binary -------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) { return arithmetic("add", BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return arithmetic("sub", BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return arithmetic("mul", BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return arithmetic("div", BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return power(a, b); }
Tensor add(const Tensor& a, Scalar b) { return arithmetic("add", BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, Scalar b) { return arithmetic("sub", BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, Scalar b) { return arithmetic("mul", BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, Scalar b) { return arithmetic("div", BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, Scalar b) { return power(a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", BinaryOp::Minimum, a, b); }

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare("eq", BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare("ne", BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare("lt", BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare("le", BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare("gt", BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare("ge", BinaryOp::Ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare("logical_and", BinaryOp::LogicalAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare("logical_or", BinaryOp::LogicalOr, a, b); }

Tensor heaviside(const Tensor& input, const Tensor& values) {
  device_of("heaviside", {input, values});
  EMBER_CHECK(input.dtype() == values.dtype(), "heaviside",
              "dtypes of input and values: expected equal dtypes (torch does not promote here), got {} and {}",
              name(input.dtype()), name(values.dtype()));
  refuse_complex("heaviside", input.dtype());
  return run_binary("heaviside", BinaryOp::Heaviside, input, values, input.dtype(), input.dtype());
}

std::tuple<Tensor, Tensor> frexp(const Tensor& x) {
  ops::check_defined("frexp", x);
  const DType d = x.dtype();
  EMBER_CHECK(d == kFloat16 || d == kBFloat16 || d == kFloat32 || d == kFloat64, "frexp",
              "dtype: expected float16, bfloat16, float32 or float64, got {}", name(d));
  Tensor mantissa = empty(x.sizes(), d, x.device()), exponent = empty(x.sizes(), kInt32, x.device());
  if (x.numel() > 0) EMBER_DISPATCH(x.device(), frexp, x, mantissa, exponent);
  return {mantissa, exponent};
}

namespace special {
Tensor laguerre_polynomial_l(const Tensor& x, const Tensor& n) {
  device_of("laguerre_polynomial_l", {x, n});
  DType compute = result_type_of({x, n});
  refuse_complex("laguerre_polynomial_l", compute);
  if (!is_floating_point(compute)) compute = kFloat32;
  return run_binary("laguerre_polynomial_l", BinaryOp::LaguerreL, x, n, compute, compute);
}
}  // namespace special

// ---- public: clamp, where, saturate_cast -----------------------------------------------------------

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  ops::check_defined("clamp", x);
  EMBER_CHECK(lo || hi, "clamp", "bounds: expected at least one of min and max, got neither");
  DType compute = x.dtype();
  if (lo && hi) compute = result_type_of({x, *lo, *hi});
  else compute = result_type_of({x, lo ? *lo : *hi});
  refuse_bool("clamp", compute);
  refuse_complex("clamp", compute);
  if (is_integral(compute)) {
    // Like torch: a bound beyond the type's range that cannot bind is dropped; one that would
    // clamp every element to an unrepresentable value is an error.
    const IntRange range = int_range(compute);
    if (lo && lo->is_integral()) {
      EMBER_CHECK(scalar_int(*lo) <= range.hi, "clamp", "min: expected a value representable in {}, got {}",
                  name(compute), lo->to_double());
      if (scalar_int(*lo) < range.lo) lo.reset();
    }
    if (hi && hi->is_integral()) {
      EMBER_CHECK(scalar_int(*hi) >= range.lo, "clamp", "max: expected a value representable in {}, got {}",
                  name(compute), hi->to_double());
      if (scalar_int(*hi) > range.hi) hi.reset();
    }
  }
  Tensor out = x.to(compute);
  if (!lo && !hi) return out.dtype() == x.dtype() ? x.clone() : out;
  if (lo) out = run_binary("clamp", BinaryOp::Maximum, out, *lo, compute, compute);
  if (hi) out = run_binary("clamp", BinaryOp::Minimum, out, *hi, compute, compute);
  return out;
}

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  ops::check_defined("clamp", x);
  EMBER_CHECK(lo.defined() || hi.defined(), "clamp", "bounds: expected at least one of min and max, got neither");
  ops::check_same_device("clamp", {&x, &lo, &hi});
  DType compute;
  if (lo.defined() && hi.defined()) compute = result_type_of({x, lo, hi});
  else compute = result_type_of({x, lo.defined() ? lo : hi});
  refuse_bool("clamp", compute);
  refuse_complex("clamp", compute);
  // NaN in x or in a bound propagates, like torch (maximum/minimum propagate NaN).
  Tensor out = x;
  if (lo.defined()) out = run_binary("clamp", BinaryOp::Maximum, out, lo, compute, compute);
  if (hi.defined()) out = run_binary("clamp", BinaryOp::Minimum, out, hi, compute, compute);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Device device = device_of("where", {cond, a, b});
  EMBER_CHECK(cond.dtype() == kBool, "where", "condition dtype: expected bool, got {}", name(cond.dtype()));
  const DType compute = result_type_of({a, b});
  const Shape shape = shape_of("where", {cond, a, b});
  Tensor out = empty(shape, compute, device);
  if (out.numel() > 0) {
    EMBER_DISPATCH(device, where, cond.expand(shape), prepare(a, compute, shape, device),
                   prepare(b, compute, shape, device), out);
  }
  return out;
}

Tensor saturate_cast(const Tensor& x, DType dtype) {
  ops::check_defined("saturate_cast", x);
  EMBER_CHECK(is_floating_point(dtype), "saturate_cast", "target dtype: expected a floating point type, got {}",
              name(dtype));
  refuse_complex("saturate_cast", x.dtype());
  Tensor out = empty(x.sizes(), dtype, x.device());
  if (out.numel() > 0) EMBER_DISPATCH(x.device(), saturate_copy, x, out);
  return out;
}

// ---- public: operators ------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }

}  // namespace ember
