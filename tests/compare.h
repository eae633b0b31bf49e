// Dtype-aware comparison of tensors for tests: exact for integer/bool, |a-b| <= atol + rtol*|b|
// for floats (NaN must match NaN, inf must match inf), with a report of the worst elements.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include <ember/ember.h>

namespace ember::test {

struct Tolerance { double rtol, atol; };
/// Default tolerances per dtype: f64 1e-10, f32 1e-5, f16 1e-3, bf16 1e-2, fp8 0.07 relative.
Tolerance default_tolerance(DType);

/// Compares `actual` to `expected` (any devices; same sizes; same dtype unless
/// `allow_dtype_mismatch`). rtol/atol < 0 take the dtype's default.
::testing::AssertionResult allclose(const Tensor& actual, const Tensor& expected, double rtol = -1, double atol = -1);
/// Bit-for-bit equal values (NaN payloads ignored: NaN equals NaN).
::testing::AssertionResult equal(const Tensor& actual, const Tensor& expected);

/// The message of the ember::Error that f throws, or "no error".
std::string error_of(const std::function<void()>& f);

/// Sets (or unsets, with nullptr) an environment variable for its scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Path of a fixture file under tests/fixtures.
std::string fixture_path(const std::string& name);

}  // namespace ember::test

#define EXPECT_ALLCLOSE(actual, expected, ...) EXPECT_TRUE(::ember::test::allclose(actual, expected, ##__VA_ARGS__))
#define EXPECT_TENSOR_EQ(actual, expected) EXPECT_TRUE(::ember::test::equal(actual, expected))
