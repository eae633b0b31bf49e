// Elementwise ops against torch 2.15 CPU results saved by scripts/fixtures/make_elementwise_fixtures.py
// (tests/fixtures/elementwise_*.json), each case run on contiguous, strided and transposed inputs.
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compare.h"

using namespace ember;
using json = nlohmann::json;

namespace {

const json& load(const std::string& file) {
  static std::map<std::string, json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream in(test::fixture_path(file));
    EXPECT_TRUE(in.good()) << "missing fixture " << file << " (run scripts/fixtures/make_elementwise_fixtures.py)";
    it = cache.emplace(file, json::parse(in)).first;
  }
  return it->second;
}
const json& ops_fixture() { return load("elementwise_ops.json"); }

double parse_float(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

Tensor decode(const json& t) {
  if (t.is_string()) return decode(ops_fixture()["tensors"][std::stoul(t.get<std::string>().substr(1))]);
  const DType d = dtype_from_name(t["dtype"].get<std::string>());
  const auto shape = t["shape"].get<std::vector<int64_t>>();
  const json& v = t["values"];
  if (d == kBool) {
    std::vector<bool> b;
    for (const auto& e : v) b.push_back(e.get<int>() != 0);
    return tensor<bool>(b, shape);
  }
  if (is_complex(d)) {
    std::vector<std::complex<double>> c;
    for (const auto& e : v) c.emplace_back(parse_float(e[0]), parse_float(e[1]));
    return tensor<std::complex<double>>(c, shape).to(d);
  }
  if (is_floating_point(d)) {
    std::vector<double> f;
    for (const auto& e : v) f.push_back(parse_float(e));
    return tensor<double>(f, shape).to(d);
  }
  if (d == kUInt64) {
    std::vector<uint64_t> u;
    for (const auto& e : v) u.push_back(std::stoull(e.get<std::string>()));
    return tensor<uint64_t>(u, shape);
  }
  std::vector<int64_t> i;
  for (const auto& e : v) i.push_back(std::stoll(e.get<std::string>()));
  return tensor<int64_t>(i, shape).to(d);
}

std::optional<Scalar> decode_scalar(const json& s) {
  if (s.is_null()) return std::nullopt;
  const std::string kind = s["kind"];
  if (kind == "bool") return Scalar(s["value"].get<std::string>() == "1");
  if (kind == "int") return Scalar(static_cast<int64_t>(std::stoll(s["value"].get<std::string>())));
  if (kind == "uint") return Scalar(static_cast<uint64_t>(std::stoull(s["value"].get<std::string>())));
  if (kind == "float") return Scalar(parse_float(s["value"]));
  return Scalar(std::complex<double>(parse_float(s["value"][0]), parse_float(s["value"][1])));
}

// The same logical values in another memory layout: 0 contiguous, 1 every other element of a
// larger buffer (strided), 2 transposed storage (for 2-D and up).
Tensor layout(const Tensor& t, int variant) {
  if (variant == 1) {
    std::vector<int64_t> doubled = t.sizes();
    doubled.push_back(2);
    return t.unsqueeze(-1).expand(doubled).contiguous().select(-1, 0);
  }
  if (variant == 2 && t.dim() >= 2) return t.transpose(0, 1).contiguous().transpose(0, 1);
  return t;
}

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
using BinaryScalar = std::function<Tensor(const Tensor&, Scalar)>;

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }}, {"abs", [](const Tensor& x) { return ember::abs(x); }},
      {"exp", [](const Tensor& x) { return ember::exp(x); }}, {"log", [](const Tensor& x) { return ember::log(x); }},
      {"sqrt", [](const Tensor& x) { return ember::sqrt(x); }}, {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }}, {"silu", [](const Tensor& x) { return silu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }}, {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"tanh", [](const Tensor& x) { return ember::tanh(x); }}, {"sin", [](const Tensor& x) { return ember::sin(x); }},
      {"cos", [](const Tensor& x) { return ember::cos(x); }}, {"erf", [](const Tensor& x) { return ember::erf(x); }},
      {"log1p", [](const Tensor& x) { return ember::log1p(x); }}, {"expm1", [](const Tensor& x) { return ember::expm1(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }}, {"square", [](const Tensor& x) { return square(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }}, {"floor", [](const Tensor& x) { return ember::floor(x); }},
      {"ceil", [](const Tensor& x) { return ember::ceil(x); }}, {"round", [](const Tensor& x) { return ember::round(x); }},
      {"trunc", [](const Tensor& x) { return ember::trunc(x); }}, {"sign", [](const Tensor& x) { return sign(x); }},
      {"logical_not", [](const Tensor& x) { return logical_not(x); }},
  };
  return ops;
}

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return ember::pow(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
      {"heaviside", [](const Tensor& a, const Tensor& b) { return heaviside(a, b); }},
      {"laguerre_polynomial_l", [](const Tensor& a, const Tensor& b) { return special::laguerre_polynomial_l(a, b); }},
  };
  return ops;
}

const std::map<std::string, BinaryScalar>& scalar_ops() {
  static const std::map<std::string, BinaryScalar> ops = {
      {"add", [](const Tensor& a, Scalar b) { return add(a, b); }}, {"sub", [](const Tensor& a, Scalar b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, Scalar b) { return mul(a, b); }}, {"div", [](const Tensor& a, Scalar b) { return div(a, b); }},
      {"pow", [](const Tensor& a, Scalar b) { return ember::pow(a, b); }}, {"eq", [](const Tensor& a, Scalar b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, Scalar b) { return ne(a, b); }}, {"lt", [](const Tensor& a, Scalar b) { return lt(a, b); }},
      {"le", [](const Tensor& a, Scalar b) { return le(a, b); }}, {"gt", [](const Tensor& a, Scalar b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, Scalar b) { return ge(a, b); }},
  };
  return ops;
}

std::vector<Tensor> run_case(const json& c, const std::vector<Tensor>& in) {
  const std::string op = c["op"];
  if (c.contains("scalar")) return {scalar_ops().at(op)(in[0], *decode_scalar(c["scalar"]))};
  if (op == "clamp") return {clamp(in[0], decode_scalar(c["lo"]), decode_scalar(c["hi"]))};
  if (op == "clamp_tensor") return {clamp(in[0], in[1], in[2])};
  if (op == "where") return {where(in[0], in[1], in[2])};
  if (op == "saturate_cast") return {saturate_cast(in[0], dtype_from_name(c["target"].get<std::string>()))};
  if (op == "frexp") {
    auto [m, e] = frexp(in[0]);
    return {m, e};
  }
  if (in.size() == 1) return {unary_ops().at(op)(in[0])};
  return {binary_ops().at(op)(in[0], in[1])};
}

// Ops whose float results are one correctly rounded operation (or none): compared bit for bit.
bool exact_op(const std::string& op, DType d) {
  static const std::set<std::string> exact = {"neg", "abs", "floor", "ceil", "round", "trunc", "sign", "relu",
                                              "square", "add", "sub", "mul", "div", "heaviside", "clamp",
                                              "clamp_tensor", "where", "frexp", "saturate_cast"};
  return exact.count(op) && !is_complex(d);
}

void check_output(const std::string& op, const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.sizes(), expected.sizes());
  const DType d = expected.dtype();
  if (!is_floating_point(d) && !is_complex(d)) EXPECT_TENSOR_EQ(actual, expected);
  else if (exact_op(op, d)) EXPECT_ALLCLOSE(actual, expected, 0, 0);  // equal values; -0 == 0 (torch's own max/clamp vary)
  else EXPECT_ALLCLOSE(actual, expected);
}

void run_fixture_cases(const std::function<bool(const json&)>& select) {
  int ran = 0;
  for (const json& c : ops_fixture()["cases"]) {
    if (!select(c)) continue;
    std::vector<Tensor> inputs;
    for (const auto& t : c["inputs"]) inputs.push_back(decode(t));
    const std::string trace = fmt::format("op {} on {}", c["op"].get<std::string>(), name(inputs[0].dtype()));
    SCOPED_TRACE(trace);
    if (c.contains("error")) {
      EXPECT_THROW(run_case(c, inputs), Error) << "torch refuses this case; ember must too";
      ++ran;
      continue;
    }
    std::vector<Tensor> expected{decode(c["out"])};
    if (c.contains("out2")) expected.push_back(decode(c["out2"]));
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(fmt::format("layout {}", variant));
      std::vector<Tensor> laid;
      for (const Tensor& t : inputs) laid.push_back(layout(t, variant));
      std::vector<Tensor> actual;
      try {
        actual = run_case(c, laid);
      } catch (const Error& e) {
        ADD_FAILURE() << "unexpected ember::Error: " << e.what();
        break;
      }
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i < actual.size(); ++i) check_output(c["op"], actual[i], expected[i]);
    }
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no fixture case selected";
}

bool is_unary_case(const json& c) { return c["inputs"].size() == 1 && unary_ops().count(c["op"]) && !c.contains("scalar"); }

}  // namespace

TEST(Elementwise, UnaryMatchesTorch) { run_fixture_cases(is_unary_case); }

TEST(Elementwise, BinaryMatchesTorch) {
  run_fixture_cases([](const json& c) { return c["inputs"].size() == 2 && binary_ops().count(c["op"]); });
}

TEST(Elementwise, ScalarOperandsMatchTorch) {
  run_fixture_cases([](const json& c) { return c.contains("scalar"); });
}

TEST(Elementwise, ClampWhereFrexpSaturateMatchTorch) {
  static const std::set<std::string> ops = {"clamp", "clamp_tensor", "where", "frexp", "saturate_cast"};
  run_fixture_cases([](const json& c) { return ops.count(c["op"]) > 0; });
}

TEST(Elementwise, ResultTypeTableMatchesTorch) {
  const json& f = load("elementwise_result_type.json");
  std::vector<DType> dtypes;
  for (const auto& n : f["dtypes"]) dtypes.push_back(dtype_from_name(n.get<std::string>()));
  int checked = 0;
  for (const auto& row : f["table"]) {
    const DType a = dtypes[row[0].get<int>()];
    const Tensor ta = zeros(std::vector<int64_t>(row[1].get<int>(), 2), a);
    const int expected = row[4];
    std::function<DType()> compute;
    std::string what;
    if (row[3].get<int>() < 0) {
      const std::string kind = row[2];
      const Scalar s = kind == "bool" ? Scalar(true) : kind == "int" ? Scalar(3) : kind == "float" ? Scalar(2.5)
                                                                                                     : Scalar(std::complex<double>(0, 1));
      compute = [ta, s] { return result_type(ta, s); };
      what = kind + " Scalar";
    } else {
      const DType b = dtypes[row[2].get<int>()];
      const Tensor tb = zeros(std::vector<int64_t>(row[3].get<int>(), 2), b);
      compute = [ta, tb] { return result_type(ta, tb); };
      what = fmt::format("{} (dim {})", name(b), row[3].get<int>());
    }
    SCOPED_TRACE(fmt::format("{} (dim {}) with {}", name(a), row[1].get<int>(), what));
    if (expected == -1) {
      EXPECT_THROW(compute(), Error);
    } else if (expected == -2) {
      // torch gives complex32/bcomplex32 here (not ember dtypes); ember uses complex64.
      EXPECT_EQ(name(compute()), "complex64");
    } else {
      EXPECT_EQ(name(compute()), name(dtypes[expected]));
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(Elementwise, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}), (std::vector<int64_t>{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}), (std::vector<int64_t>{0, 3}));
  try {
    broadcast_shapes({2, 3}, {4});
    FAIL() << "expected an ember::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[broadcast_shapes] shapes must broadcast: expected equal sizes or 1 at dim 1 of "
                                     "the result, got 3 and 4 (shapes [2, 3] and [4])");
  }
  try {
    add(zeros({2, 3}), zeros({2}));
    FAIL() << "expected an ember::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[add] shapes must broadcast: expected compatible shapes, got [2, 3] and [2]");
  }
  // Expanded (stride-0) inputs and an empty broadcast.
  Tensor row = tensor<float>({1, 2, 3}).expand({4, 3});
  Tensor col = tensor<float>({10, 20, 30, 40}, {4, 1});
  EXPECT_EQ((row + col).to_vector<float>(),
            (std::vector<float>{11, 12, 13, 21, 22, 23, 31, 32, 33, 41, 42, 43}));
  EXPECT_EQ(add(zeros({0, 3}), zeros({3})).sizes(), (std::vector<int64_t>{0, 3}));
}

TEST(Elementwise, ErrorsNameTheOpAndCause) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { heaviside(zeros({2}), zeros({2}, kFloat64)); }),
            "[heaviside] dtypes of input and values: expected equal dtypes (torch does not promote here), got float32 and float64");
  EXPECT_EQ(message([] { where(zeros({2}, kInt64), zeros({2}), zeros({2})); }),
            "[where] condition dtype: expected bool, got int64");
  EXPECT_EQ(message([] { ember::pow(tensor<int32_t>({2}), -1); }),
            "[pow] exponent: expected a non-negative integer (Integers to negative integer powers are not allowed), got -1");
  EXPECT_EQ(message([] { neg(zeros({2}, kBool)); }),
            "[neg] dtype: expected a numeric type (torch refuses bool; use logical_not), got bool");
  EXPECT_EQ(message([] { gelu(zeros({2}), "fast"); }), "[gelu] approximate: expected \"none\" or \"tanh\", got \"fast\"");
  EXPECT_EQ(message([] { clamp(zeros({2}), std::nullopt, std::nullopt); }),
            "[clamp] bounds: expected at least one of min and max, got neither");
  EXPECT_EQ(message([] { clamp(tensor<uint8_t>({1}), 300, std::nullopt); }),
            "[clamp] min: expected a value representable in uint8, got 300");
  EXPECT_EQ(message([] { silu(zeros({2}, kInt32)); }), "[silu] dtype: expected a floating point or complex type, got int32");
  EXPECT_EQ(message([] { maximum(zeros({2}, kComplex64), zeros({2}, kComplex64)); }),
            "[maximum] dtype: expected a real type (torch refuses complex), got complex64");
  EXPECT_EQ(message([] { saturate_cast(zeros({2}), kInt8); }),
            "[saturate_cast] target dtype: expected a floating point type, got int8");
  EXPECT_THROW(sub(zeros({2}, kBool), zeros({2}, kBool)), Error);
  EXPECT_THROW(sub(zeros({2}, kInt32), true), Error);
  EXPECT_THROW(add(zeros({2}, kUInt16), zeros({2}, kInt8)), Error);  // torch refuses this promotion
  EXPECT_THROW(add(zeros({2}, kFloat8_e4m3fn), zeros({2}, kFloat32)), Error);
  EXPECT_THROW(add(Tensor(), zeros({2})), Error);
}

TEST(Elementwise, IntegerPowerOfTensorsFollowsAtenPowi) {
  // Negative tensor exponents do not raise: 1 -> 1, -1 -> +-1, anything else -> 0.
  Tensor base = tensor<int32_t>({1, -1, -1, 0, 2, 3, 2});
  Tensor exp = tensor<int32_t>({-3, -1, -2, -1, -1, 4, 31});
  EXPECT_EQ(ember::pow(base, exp).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 1, 0, 0, 81, INT32_MIN}));
}

TEST(Elementwise, ContiguousFloat32LoopsLargeAndOddSizes) {
  // Sizes past the OpenMP grain and odd tails; checked against a float64 loop.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{100003}}) {
    std::vector<float> av(n), bv(n);
    uint32_t state = 12345;
    auto next = [&state] { state = state * 1664525u + 1013904223u; return static_cast<float>(state >> 8) / 16777216.0f * 8 - 4; };
    for (int64_t i = 0; i < n; ++i) { av[i] = next(); bv[i] = next(); }
    Tensor a = tensor<float>(av), b = tensor<float>(bv);
    const auto sum = (a + b).to_vector<float>(), prod = (a * b).to_vector<float>();
    const auto ex = ember::exp(a).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(sum[i], av[i] + bv[i]);
      ASSERT_EQ(prod[i], av[i] * bv[i]);
      ASSERT_NEAR(ex[i], std::exp(static_cast<double>(av[i])), 2e-7 * std::exp(static_cast<double>(av[i])));
    }
  }
}
