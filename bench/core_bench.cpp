// Bandwidth of the core CUDA engines (elementwise, copy/cast, reductions), contiguous and
// strided, next to bench/torch_core.py in the same device call. Each case moves hundreds of MB
// (far beyond the 60 MB L2). Method: warm-up, then 7 repetitions of 10 back-to-back calls timed
// with CUDA events; the median per call. Prints JSON lines (impl, op, case, us, gbps).
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <vector>

#include <ember/ember.h>

using namespace ember;

namespace {

double time_calls(const std::function<void()>& f) {
  f();
  cuda::synchronize();
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    cuda::Event a, b;
    a.record();
    for (int i = 0; i < 10; ++i) f();
    b.record();
    b.synchronize();
    times.push_back(a.elapsed_time(b) * 1e3 / 10);
  }
  std::sort(times.begin(), times.end());
  return times[3];
}

void report(const char* op, const std::string& name, double bytes, const std::function<void()>& f) {
  const double us = time_calls(f);
  fmt::print("{{\"impl\": \"ember\", \"op\": \"{}\", \"case\": \"{}\", \"us\": {:.2f}, \"gbps\": {:.1f}}}\n", op, name, us,
             bytes / us / 1e3);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    fmt::print(stderr, "core_bench needs a GPU: {}\n", cuda::availability().reason);
    return 1;
  }
  const Device g = Device::cuda();
  const int64_t n = 8192;
  const double f32 = n * n * 4.0, bf16 = n * n * 2.0;
  const Tensor a = randn({n, n}, kFloat32, g, 1), b = randn({n, n}, kFloat32, g, 2);
  const Tensor ah = a.to(kBFloat16), bh = b.to(kBFloat16);
  report("elementwise", "add f32 contiguous", 3 * f32, [&] { add(a, b); });
  report("elementwise", "add f32 transposed+contiguous", 3 * f32, [&] { add(a.t(), b); });
  report("elementwise", "add f32 broadcast row", 2 * f32, [&] { add(a, b.select(0, 0)); });
  report("elementwise", "mul bf16 contiguous", 3 * bf16, [&] { mul(ah, bh); });
  report("elementwise", "silu bf16 contiguous", 2 * bf16, [&] { silu(ah); });
  report("elementwise", "exp f32 strided (every 2nd col)", f32, [&] { exp(a.slice(1, 0, n, 2)); });
  report("copy", "cast f32->bf16 contiguous", f32 + bf16, [&] { a.to(kBFloat16); });
  report("copy", "transpose f32 (contiguous of .t())", 2 * f32, [&] { a.t().contiguous(); });
  report("reduce", "sum f32 last dim", f32, [&] { sum(a, {1}); });
  report("reduce", "sum f32 first dim", f32, [&] { sum(a, {0}); });
  report("reduce", "sum f32 all", f32, [&] { sum(a); });
  report("reduce", "amax bf16 last dim", bf16, [&] { amax(ah, {1}); });
  report("reduce", "sum f32 last dim of transposed", f32, [&] { sum(a.t(), {1}); });
  report("reduce", "argmax f32 last dim", f32, [&] { argmax(a, 1); });
  return 0;
}
