#include "compare.h"

#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ember::test {
namespace {

// All elements as complex<double> on the CPU (real types get imag 0; uint64 loses nothing
// that matters for tolerance comparisons — exact comparisons use equal()).
std::vector<std::complex<double>> values(const Tensor& t) {
  return t.to(Device::cpu()).to(kComplex128).contiguous().to_vector<std::complex<double>>();
}

std::string index_str(int64_t flat, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) { idx[d] = flat % std::max<int64_t>(sizes[d], 1); flat /= std::max<int64_t>(sizes[d], 1); }
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < idx.size(); ++i) s << (i ? "," : "") << idx[i];
  return s.str() + "]";
}

}  // namespace

Tolerance default_tolerance(DType d) {
  switch (d) {
    case kFloat64: case kComplex128: return {1e-10, 1e-12};
    case kFloat32: case kComplex64: return {1e-5, 1e-6};
    case kFloat16: return {1e-3, 1e-4};
    case kBFloat16: return {1e-2, 1e-3};
    case kFloat8_e4m3fn: case kFloat8_e5m2: return {0.07, 1e-3};
    default: return {0, 0};
  }
}

::testing::AssertionResult allclose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "sizes differ: actual " << fmt::format("{}", fmt::join(actual.sizes(), ","))
                                         << " vs expected " << fmt::format("{}", fmt::join(expected.sizes(), ","));
  }
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "dtypes differ: actual " << name(actual.dtype()) << " vs expected "
                                         << name(expected.dtype());
  }
  const Tolerance def = default_tolerance(expected.dtype());
  if (rtol < 0) rtol = def.rtol;
  if (atol < 0) atol = def.atol;
  const auto a = values(actual), e = values(expected);
  int64_t bad = 0;
  std::ostringstream report;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = true;
    for (int part = 0; part < 2; ++part) {
      const double x = part ? a[i].imag() : a[i].real(), y = part ? e[i].imag() : e[i].real();
      if (std::isnan(y) || std::isnan(x)) { ok &= std::isnan(x) && std::isnan(y); continue; }
      if (std::isinf(y) || std::isinf(x)) { ok &= x == y; continue; }
      const double err = std::abs(x - y), allowed = atol + rtol * std::abs(y);
      ok &= err <= allowed;
      if (err > allowed) worst = std::max(worst, err / std::max(allowed, 1e-300));
    }
    if (!ok && bad++ < 5) {
      report << "\n  at " << index_str(static_cast<int64_t>(i), actual.sizes()) << ": actual " << a[i].real()
             << (a[i].imag() != 0 ? fmt::format("{:+}i", a[i].imag()) : "") << ", expected " << e[i].real()
             << (e[i].imag() != 0 ? fmt::format("{:+}i", e[i].imag()) : "");
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ (" << name(expected.dtype())
                                       << ", rtol " << rtol << ", atol " << atol << ", worst " << worst
                                       << "x the allowed error):" << report.str();
}

::testing::AssertionResult equal(const Tensor& actual, const Tensor& expected) {
  if (actual.sizes() != expected.sizes() || actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "sizes or dtypes differ: actual " << name(actual.dtype()) << " ["
                                         << fmt::format("{}", fmt::join(actual.sizes(), ",")) << "] vs expected "
                                         << name(expected.dtype()) << " ["
                                         << fmt::format("{}", fmt::join(expected.sizes(), ",")) << "]";
  }
  const Tensor a = actual.to(Device::cpu()).contiguous(), e = expected.to(Device::cpu()).contiguous();
  const size_t item = a.itemsize();
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pe = static_cast<const unsigned char*>(e.raw_data());
  const bool floating = is_floating_point(a.dtype()) || is_complex(a.dtype());
  const auto av = floating ? values(a) : std::vector<std::complex<double>>{};
  const auto ev = floating ? values(e) : std::vector<std::complex<double>>{};
  int64_t bad = 0;
  std::ostringstream report;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * item, pe + i * item, item) == 0) continue;
    if (floating && std::isnan(av[i].real()) && std::isnan(ev[i].real())) continue;
    if (bad++ < 5) {
      report << "\n  at " << index_str(i, a.sizes()) << ": bytes differ";
      if (floating) report << " (actual " << av[i].real() << ", expected " << ev[i].real() << ")";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.numel() << " elements differ:" << report.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}
ScopedEnv::~ScopedEnv() {
  if (old_) setenv(name_, old_->c_str(), 1);
  else unsetenv(name_);
}

std::string fixture_path(const std::string& name) { return std::string(EMBER_FIXTURES_DIR) + "/" + name; }

}  // namespace ember::test
