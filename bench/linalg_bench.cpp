// ember side of the linear algebra benchmark (bench/torch_linalg.py is the PyTorch side, same
// cases and method). Method: inputs rotated through copies covering more than 4x the L2 (so a
// bandwidth-bound batch is read from HBM), a warm-up pass, then 15 timed passes of one call per
// copy between CUDA events; the median pass divided by the number of calls. No CUDA graphs:
// svd checks convergence on the host, like torch's. The _ex variants (no host synchronisation)
// are timed where torch has them. Each case is first checked against the CPU backend on a slice
// of the batch (rel_err), so a fast wrong kernel cannot report a number.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

using namespace ember;

namespace {

constexpr int64_t kL2Bytes = 60ll << 20;
constexpr int kPasses = 15;

int64_t copies_for(int64_t nbytes) {
  return std::max<int64_t>(1, std::min<int64_t>(16, (4 * kL2Bytes + nbytes - 1) / std::max<int64_t>(nbytes, 1)));
}

/// Median microseconds per call over kPasses passes of `call(i)` for i in [0, copies).
double time_calls(int64_t copies, const std::function<void(int64_t)>& call) {
  for (int64_t i = 0; i < copies; ++i) call(i);
  cuda::synchronize();
  std::vector<double> times;
  for (int p = 0; p < kPasses; ++p) {
    cuda::Event a, b;
    a.record();
    for (int64_t i = 0; i < copies; ++i) call(i);
    b.record();
    b.synchronize();
    times.push_back(a.elapsed_time(b) * 1e3 / static_cast<double>(copies));
  }
  std::nth_element(times.begin(), times.begin() + kPasses / 2, times.end());
  return times[kPasses / 2];
}

/// max |gpu - cpu| / max |cpu| over all elements, computed on the host.
double rel_err(const Tensor& gpu, const Tensor& cpu) {
  if (gpu.sizes() != cpu.sizes()) return 1e30;
  const Tensor g = gpu.to(Device::cpu()), c = cpu.to(g.dtype());
  const auto diff = abs(sub(g, c)).to(kFloat64).contiguous().to_vector<double>();
  const auto ref = abs(c).to(kFloat64).contiguous().to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < diff.size(); ++i) {
    err = std::max(err, diff[i]);
    scale = std::max(scale, ref[i]);
  }
  return err / std::max(scale, 1e-30);
}

/// Well-conditioned batches: random matrices plus n on the diagonal.
Tensor well_conditioned(std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  const int64_t n = shape.back();
  std::vector<float> v = randn(shape, kFloat32, Device::cpu(), seed).to_vector<float>();
  for (size_t i = 0; i < v.size(); i += static_cast<size_t>(n * n))
    for (int64_t j = 0; j < n; ++j) v[i + static_cast<size_t>(j * (n + 1))] += static_cast<float>(n);
  return tensor<float>(std::move(v), shape).to(dtype).to(Device::cuda());
}

void print(const std::string& op, const std::string& name, double us, double bytes, double err) {
  fmt::print("{{\"impl\": \"ember\", \"op\": \"{}\", \"case\": \"{}\", \"us\": {:.3f}, \"gbps\": {:.1f}, \"rel_err\": {:.2e}}}\n",
             op, name, us, bytes / us / 1e3, err);
  std::fflush(stdout);
}

const char* short_name(DType d) {
  return d == kFloat32 ? "f32" : d == kFloat64 ? "f64" : d == kComplex64 ? "c64" : "c128";
}

void bench_inv(int64_t n, int64_t batch, DType dtype) {
  const double bytes = 2.0 * static_cast<double>(batch * n * n * itemsize(dtype));
  const int64_t copies = copies_for(static_cast<int64_t>(bytes));
  std::vector<Tensor> as;
  for (int64_t c = 0; c < copies; ++c) as.push_back(well_conditioned({batch, n, n}, dtype, 10 + c));
  const Tensor head = as[0].slice(0, 0, 4096);
  const double err = rel_err(std::get<0>(linalg::inv_ex(head)), std::get<0>(linalg::inv_ex(head.to(Device::cpu()))));
  const double us = time_calls(copies, [&](int64_t i) { linalg::inv_ex(as[static_cast<size_t>(i)]); });
  print("inv", fmt::format("{} {}x{} x{}", short_name(dtype), n, n, batch), us, bytes, err);
}

void bench_lu(int64_t n, int64_t batch, int64_t k, DType dtype) {
  const double bytes = 2.0 * static_cast<double>(batch * n * n * itemsize(dtype));
  const int64_t copies = copies_for(static_cast<int64_t>(bytes));
  std::vector<Tensor> as, lus, pivs, bs;
  for (int64_t c = 0; c < copies; ++c) {
    as.push_back(well_conditioned({batch, n, n}, dtype, 20 + c));
    auto [lu, piv, info] = linalg::lu_factor_ex(as.back());
    lus.push_back(lu);
    pivs.push_back(piv);
    bs.push_back(randn({batch, n, k}, kFloat32, Device::cpu(), 40 + c).to(dtype).to(Device::cuda()));
  }
  const std::string name = fmt::format("{} {}x{} x{} k{}", short_name(dtype), n, n, batch, k);
  const int64_t check = std::min<int64_t>(batch, 256);
  const Tensor a0 = as[0].slice(0, 0, check), b0 = bs[0].slice(0, 0, check);
  auto [lu_cpu, piv_cpu, info_cpu] = linalg::lu_factor_ex(a0.to(Device::cpu()));
  const double factor_err = rel_err(std::get<0>(linalg::lu_factor_ex(a0)), lu_cpu);
  double us = time_calls(copies, [&](int64_t i) { linalg::lu_factor_ex(as[static_cast<size_t>(i)]); });
  print("lu_factor", name, us, bytes, factor_err);

  const double solve_bytes = static_cast<double>(batch * (n * n + 2 * n * k) * itemsize(dtype));
  const double solve_err = rel_err(linalg::lu_solve(lus[0].slice(0, 0, check), pivs[0].slice(0, 0, check), b0),
                                   linalg::lu_solve(lu_cpu, piv_cpu, b0.to(Device::cpu())));
  us = time_calls(copies, [&](int64_t i) {
    linalg::lu_solve(lus[static_cast<size_t>(i)], pivs[static_cast<size_t>(i)], bs[static_cast<size_t>(i)]);
  });
  print("lu_solve", name, us, solve_bytes, solve_err);

  const double tri_err = rel_err(linalg::solve_triangular(lus[0].slice(0, 0, check), b0, true),
                                 linalg::solve_triangular(lu_cpu, b0.to(Device::cpu()), true));
  us = time_calls(copies, [&](int64_t i) { linalg::solve_triangular(lus[static_cast<size_t>(i)], bs[static_cast<size_t>(i)], true); });
  print("solve_triangular", name, us, solve_bytes, tri_err);
}

void bench_qr_svd(int64_t n, int64_t batch, DType dtype) {
  const Tensor a = randn({batch, n, n}, kFloat32, Device::cpu(), 60).to(dtype).to(Device::cuda());
  const double bytes = 3.0 * static_cast<double>(batch * n * n * itemsize(dtype));
  const std::string name = fmt::format("{} {}x{} x{}", short_name(dtype), n, n, batch);
  const Tensor a0 = a.slice(0, 0, 1);
  auto [q, r] = linalg::qr(a0);
  const Tensor a0c = a0.to(Device::cpu());
  auto [qc, rc] = linalg::qr(a0c);
  const double qr_err = rel_err(abs(r), abs(rc));  // R is unique up to the signs of its rows
  double us = time_calls(1, [&](int64_t) { linalg::qr(a); });
  print("qr", name, us, bytes, qr_err);
  const double svd_err = rel_err(linalg::svdvals(a0), linalg::svdvals(a0c));
  us = time_calls(1, [&](int64_t) { linalg::svd(a, false); });
  print("svd", name, us, bytes, svd_err);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    fmt::print(stderr, "linalg_bench needs a GPU: {}\n", cuda::availability().reason);
    return 1;
  }
  const std::vector<std::function<void()>> cases = {
      [] { bench_inv(2, 1 << 20, kFloat32); },
      [] { bench_inv(3, 1 << 20, kFloat32); },
      [] { bench_inv(4, 1 << 20, kFloat32); },
      [] { bench_lu(4, 1 << 20, 1, kComplex64); },
      [] { bench_lu(64, 4096, 1, kComplex64); },
      [] { bench_lu(64, 4096, 64, kComplex64); },
      [] { bench_lu(2048, 1, 1, kComplex64); },
      [] { bench_lu(2048, 1, 2048, kComplex64); },
      [] { bench_qr_svd(512, 16, kFloat32); },
      [] { bench_qr_svd(2048, 1, kFloat32); },
  };
  for (const auto& c : cases) {
    try {
      c();
    } catch (const std::exception& e) {
      fmt::print("{{\"impl\": \"ember\", \"op\": \"error\", \"case\": \"\", \"error\": \"{}\"}}\n", e.what());
    }
  }
  return 0;
}
