// arange / linspace / logspace against torch 2.15 CPU (scripts/fixtures/make_range.py): every
// element bit for bit, apart from complex logspace, which torch computes with complex pow.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compare.h"

using namespace ember;
using nlohmann::json;

namespace {

json load_cases() {
  std::ifstream f(test::fixture_path("range.json"));
  EXPECT_TRUE(f.good()) << "missing tests/fixtures/range.json";
  return json::parse(f);
}

Tensor run_case(const json& c) {
  const std::string op = c["op"];
  const json& a = c["args"];
  const DType dtype = dtype_from_name(c["dtype"].get<std::string>());
  if (op == "linspace") return linspace(a[0].get<double>(), a[1].get<double>(), a[2].get<int64_t>(), dtype);
  if (op == "logspace") {
    return logspace(a[0].get<double>(), a[1].get<double>(), a[2].get<int64_t>(), a[3].get<double>(), dtype);
  }
  return arange(a[0].get<double>(), a[1].get<double>(), a[2].get<double>(), dtype);
}

}  // namespace

TEST(Range, MatchesTorchBitForBit) {
  const json cases = load_cases();
  ASSERT_GT(cases.size(), 200u);
  int checked = 0;
  for (const json& c : cases) {
    const std::string what = c["op"].get<std::string>() + c["args"].dump() + " " + c["dtype"].get<std::string>();
    const Tensor t = run_case(c);
    const DType dtype = t.dtype();
    const auto n = static_cast<int64_t>(c["values"].size());
    ASSERT_EQ(t.sizes(), std::vector<int64_t>{n}) << what;
    if (is_integral(dtype)) {
      EXPECT_EQ(t.to(kInt64).to_vector<int64_t>(), c["values"].get<std::vector<int64_t>>()) << what;
    } else if (is_complex(dtype)) {
      const Tensor z = t.to(kComplex128);
      std::vector<double> re, im;
      for (const auto& v : z.to_vector<std::complex<double>>()) {
        re.push_back(v.real());
        im.push_back(v.imag());
      }
      EXPECT_EQ(im, std::vector<double>(static_cast<size_t>(n), 0.0)) << what;
      const auto expected = c["values"].get<std::vector<double>>();
      if (c["op"] == "logspace") {
        // torch's complex64 pow works in float (a few ulp); ember's uses double.
        const double rtol = dtype == kComplex64 ? 1e-6 : 1e-15;
        for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(re[i], expected[i], rtol * std::abs(expected[i])) << what << " [" << i << "]";
      } else {
        EXPECT_EQ(re, expected) << what;
      }
    } else {
      EXPECT_EQ(t.to(kFloat64).to_vector<double>(), c["values"].get<std::vector<double>>()) << what;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(Range, EndpointsAreExact) {
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (int64_t steps : {2, 3, 10, 1001}) {
      const Tensor t = linspace(-0.7, 3.3, steps, d).to(kFloat64);
      EXPECT_EQ(t.select(0, 0).item<double>(), scalar_tensor(-0.7, d).to(kFloat64).item<double>()) << name(d);
      EXPECT_EQ(t.select(0, -1).item<double>(), scalar_tensor(3.3, d).to(kFloat64).item<double>()) << name(d);
    }
  }
  EXPECT_EQ(logspace(-2, 3, 7, 10, kFloat64).to_vector<double>().back(), 1000.0);
  EXPECT_EQ(logspace(-2, 3, 7, 10, kFloat64).to_vector<double>().front(), 0.01);
}

TEST(Range, RefusesWhatTorchRefuses) {
  // torch has no range kernels for these; a one-element linspace/logspace is a fill, as in torch.
  for (DType d : {kBool, kUInt16, kUInt32, kUInt64, kFloat8_e4m3fn, kFloat8_e5m2}) {
    EXPECT_THROW(arange(0, 5, 1, d), Error) << name(d);
    EXPECT_THROW(linspace(0, 1, 5, d), Error) << name(d);
    EXPECT_THROW(logspace(0, 1, 5, 10, d), Error) << name(d);
    EXPECT_EQ(linspace(1, 4, 1, d).to(kFloat64).item<double>(), 1.0) << name(d);
    EXPECT_EQ(logspace(1, 4, 1, 2, d).to(kFloat64).item<double>(), scalar_tensor(2.0, d).to(kFloat64).item<double>())
        << name(d);
    EXPECT_EQ(linspace(0, 1, 0, d).numel(), 0) << name(d);
  }
  for (DType d : {kComplex64, kComplex128}) EXPECT_THROW(arange(0, 5, 1, d), Error) << name(d);
  EXPECT_THROW(arange(0, 5, 0), Error);
  EXPECT_THROW(arange(5, 0, 1), Error);
  EXPECT_THROW(linspace(0, 1, -1), Error);
}
