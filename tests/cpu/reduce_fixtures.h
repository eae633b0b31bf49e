// PyTorch fixtures for the reduction/sort/index/softmax tests (scripts/fixtures/make_reduce_fixtures.py):
// each case names an op, its arguments, inputs stored bit-exactly and torch's outputs.
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare.h"
#include "core/shape.h"

namespace ember::test {

inline std::vector<uint8_t> base64_decode(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> out;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : s) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    buf = (buf << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(buf >> bits));
    }
  }
  return out;
}

inline Tensor decode_tensor(const nlohmann::json& t) {
  const auto bytes = base64_decode(t.at("b64").get<std::string>());
  return detail::tensor_from_bytes(bytes.data(), bytes.size(), t.at("shape").get<std::vector<int64_t>>(),
                                   dtype_from_name(t.at("dtype").get<std::string>()));
}

struct FixtureCase {
  nlohmann::json json;
  std::vector<Tensor> inputs, outputs;
  const nlohmann::json& args() const { return json.at("args"); }
  /// inputs[0] with the case's view (a permutation and/or a step along dim 0) applied.
  Tensor viewed_input() const {
    Tensor x = inputs.at(0);
    if (!json.contains("view")) return x;
    const auto& v = json.at("view");
    if (v.contains("permute")) x = x.permute(v.at("permute").get<std::vector<int64_t>>());
    if (v.contains("step")) x = x.slice(0, 0, x.size(0), v.at("step").get<int64_t>());
    return x;
  }
  std::string describe(size_t i) const {
    return "case " + std::to_string(i) + ": " + json.at("op").get<std::string>() + " " + json.at("args").dump() + " on " +
           std::string(name(inputs.at(0).dtype())) + shape_str(inputs.at(0).sizes()) +
           (json.contains("view") ? " view " + json.at("view").dump() : "");
  }
};

inline std::vector<FixtureCase> load_fixture_cases(const std::string& file) {
  std::ifstream in(fixture_path(file));
  EXPECT_TRUE(in.good()) << "missing fixture " << fixture_path(file);
  if (!in.good()) return {};
  const auto doc = nlohmann::json::parse(in);
  std::vector<FixtureCase> cases;
  for (const auto& c : doc.at("cases")) {
    FixtureCase f{c, {}, {}};
    for (const auto& t : c.at("inputs")) f.inputs.push_back(decode_tensor(t));
    for (const auto& t : c.at("outputs")) f.outputs.push_back(decode_tensor(t));
    cases.push_back(std::move(f));
  }
  return cases;
}

/// Exact for integers and bool; for floats torch's and ember's accumulation orders differ, so
/// half types get about two units in the last place.
inline ::testing::AssertionResult matches_torch(const Tensor& actual, const Tensor& expected) {
  switch (expected.dtype()) {
    case kFloat16: return allclose(actual, expected, 2e-3, 1e-4);
    case kBFloat16: return allclose(actual, expected, 1.6e-2, 1e-3);
    case kFloat32: case kComplex64: return allclose(actual, expected, 1e-5, 1e-6);
    case kFloat64: case kComplex128: return allclose(actual, expected, 1e-12, 1e-14);
    default: return equal(actual, expected);
  }
}

}  // namespace ember::test
