// Runs every registered parity case: CPU result as the reference, each CUDA device compared to it.
#include "parity/harness.h"

#include <gtest/gtest.h>

#include "compare.h"

namespace ember::test {

std::vector<ParityCase>& parity_cases() {
  static std::vector<ParityCase> cases;
  return cases;
}

Tensor randn_on(Device d, std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  return randn(std::move(shape), kFloat32, Device::cpu(), seed).to(dtype).to(d);
}
Tensor rand_on(Device d, std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  return rand(std::move(shape), kFloat32, Device::cpu(), seed).to(dtype).to(d);
}
Tensor randint_on(Device d, int64_t low, int64_t high, std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  return randint(low, high, std::move(shape), dtype, Device::cpu(), seed).to(d);
}

namespace {

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, CudaMatchesCpu) {
  const ParityCase* found = nullptr;
  for (const auto& c : parity_cases()) if (c.name == GetParam()) found = &c;
  ASSERT_NE(found, nullptr);
  const auto available = cuda::availability();
  if (!available.available) GTEST_SKIP() << "CUDA case skipped: " << available.reason;
  const std::vector<Tensor> expected = found->run(Device::cpu());
  for (int dev = 0; dev < cuda::device_count(); ++dev) {
    const std::vector<Tensor> actual = found->run(Device::cuda(dev));
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(actual[i].device(), Device::cuda(dev)) << "output " << i << " left the device";
      EXPECT_TRUE(allclose(actual[i], expected[i], found->rtol, found->atol))
          << "case " << found->name << ", output " << i << ", cuda:" << dev;
    }
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : parity_cases()) names.push_back(c.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cases, Parity, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);

}  // namespace
}  // namespace ember::test
