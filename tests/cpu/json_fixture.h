// Reading the JSON fixtures written by scripts/fixtures/make_{matmul,linalg}_fixtures.py.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "compare.h"

namespace ember::test {

/// The "cases" array of tests/fixtures/<name>.
inline nlohmann::json load_json_cases(const std::string& name) {
  std::ifstream in(fixture_path(name));
  if (!in.good()) throw std::runtime_error("missing fixture " + fixture_path(name));
  return nlohmann::json::parse(in).at("cases");
}

/// A fixture tensor {dtype, shape, data}: ints, or floats as the shortest decimal of the value
/// (float32 digits for the types of at most 32 bits), complex as [re, im] pairs; exact.
inline Tensor decode_json_tensor(const nlohmann::json& j) {
  const DType dtype = dtype_from_name(j.at("dtype").get<std::string>());
  const auto shape = j.at("shape").get<std::vector<int64_t>>();
  const nlohmann::json& data = j.at("data");
  if (is_complex(dtype)) {
    std::vector<std::complex<double>> v;
    for (size_t i = 0; i + 1 < data.size(); i += 2) v.emplace_back(data[i].get<double>(), data[i + 1].get<double>());
    const Tensor wide = tensor<std::complex<double>>(std::move(v), shape);
    return dtype == kComplex128 ? wide : wide.to(kComplex64);
  }
  if (is_floating_point(dtype)) {
    const Tensor wide = tensor<double>(data.get<std::vector<double>>(), shape);
    return dtype == kFloat64 ? wide : wide.to(kFloat32).to(dtype);  // float32 first: exact
  }
  return tensor<int64_t>(data.get<std::vector<int64_t>>(), shape).to(dtype);
}

}  // namespace ember::test
