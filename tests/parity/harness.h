// The parity harness: ONE list of cases, each run on the CPU (the reference) and on every CUDA
// device present, compared with dtype-aware tolerances. On a machine without a GPU each case
// reports SKIPPED with the reason from cuda::availability() — never a silent pass.
//
// Add a case (3-6 lines) anywhere under tests/parity/:
//
//   EMBER_PARITY_CASE(softmax_f32_odd, {
//     Tensor x = test::randn_on(d, {7, 4097}, kFloat32, 1);   // same numbers on every device
//     return {softmax(x, -1)};
//   });
//
// The body receives `d` (the Device) and returns the outputs to compare.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::test {

struct ParityCase {
  std::string name;
  std::function<std::vector<Tensor>(Device)> run;
  double rtol = -1, atol = -1;  // -1: the per-dtype default (compare.h)
};

std::vector<ParityCase>& parity_cases();

struct ParityRegistrar {
  ParityRegistrar(std::string name, std::function<std::vector<Tensor>(Device)> run, double rtol = -1, double atol = -1) {
    parity_cases().push_back({std::move(name), std::move(run), rtol, atol});
  }
};

/// Random inputs made on the CPU and moved, so every device sees identical numbers.
Tensor randn_on(Device d, std::vector<int64_t> shape, DType dtype, uint64_t seed);
Tensor rand_on(Device d, std::vector<int64_t> shape, DType dtype, uint64_t seed);
Tensor randint_on(Device d, int64_t low, int64_t high, std::vector<int64_t> shape, DType dtype, uint64_t seed);

}  // namespace ember::test

#define EMBER_PARITY_CONCAT2(a, b) a##b
#define EMBER_PARITY_CONCAT(a, b) EMBER_PARITY_CONCAT2(a, b)
/// EMBER_PARITY_CASE(name, body) or EMBER_PARITY_CASE_TOL(name, rtol, atol, body).
#define EMBER_PARITY_CASE(name, ...)                                                                 \
  static ::ember::test::ParityRegistrar EMBER_PARITY_CONCAT(parity_case_, name)(                   \
      #name, [](::ember::Device d) -> std::vector<::ember::Tensor> __VA_ARGS__)
#define EMBER_PARITY_CASE_TOL(name, rtol, atol, ...)                                                 \
  static ::ember::test::ParityRegistrar EMBER_PARITY_CONCAT(parity_case_, name)(                   \
      #name, [](::ember::Device d) -> std::vector<::ember::Tensor> __VA_ARGS__, rtol, atol)
