// ember side of the decode benchmark (scripts/gpu_check.sh bench-decode runs it next to bench/torch_decode.py
// in one device call). Reads cases ("gemv 1xKxN K N", "softmax ROWS VOCAB", "scaled_mm M K N MODE",
// "weight_fp8 M K N", "linear M K N") from stdin, prints one JSON object per case. Method, identical to the PyTorch
// script: a CUDA graph of a run of calls over inputs rotated through more than 4x the L2 (so HBM is measured, not the cache),
// replayed 15 times after a warm-up; the median replay divided by the number of calls.
// Each case is first checked against the CPU backend (small shapes) so a fast wrong kernel
// cannot report a number.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <sstream>
#include <vector>

#include <ember/ember.h>

#include "graph_timer.h"

using namespace ember;

namespace {

constexpr int64_t kL2Bytes = 60ll << 20;

int64_t copies_for(int64_t nbytes) { return std::max<int64_t>(1, std::min<int64_t>(64, (4 * kL2Bytes + nbytes - 1) / std::max<int64_t>(nbytes, 1))); }

void bench_gemv(const std::string& orientation, int64_t k, int64_t n) {
  const Device gpu = Device::cuda();
  const int64_t nbytes = k * n * 2, copies = copies_for(nbytes), n_calls = std::max<int64_t>(copies, 20);
  const bool row_vector = orientation == "1xKxN";
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c)
    ws.push_back(row_vector ? randn({k, n}, kBFloat16, gpu, 100 + c) : randn({n, k}, kBFloat16, gpu, 100 + c));
  const Tensor x = row_vector ? randn({1, k}, kBFloat16, gpu, 7) : randn({k, 1}, kBFloat16, gpu, 7);
  double rel_err = -1;
  if (k * n <= (64ll << 20)) {
    const Tensor out = row_vector ? mm(x, ws[0]) : mm(ws[0], x);
    const Tensor xc = x.to(Device::cpu()).to(kFloat32), wc = ws[0].to(Device::cpu()).to(kFloat32);
    rel_err = bench::relative_error(out, row_vector ? mm(xc, wc) : mm(wc, xc));
  }
  std::vector<std::function<void()>> calls;
  for (int64_t i = 0; i < n_calls; ++i) {
    const Tensor& w = ws[i % copies];
    calls.push_back(row_vector ? std::function<void()>([&x, &w] { mm(x, w); }) : std::function<void()>([&x, &w] { mm(w, x); }));
  }
  double nodes = 0;
  const double us = bench::time_graph(calls, 15, cudaStreamCaptureModeRelaxed, &nodes);
  fmt::print("{{\"impl\": \"ember\", \"op\": \"gemv\", \"case\": \"{} {} {}\", \"us\": {:.3f}, \"gbps\": {:.1f}, \"rel_err\": {:.2e}, "
             "\"graph_nodes_per_call\": {:.2f}}}\n",
             orientation, k, n, us, nbytes / us / 1e3, rel_err, nodes);
}

// bf16 x [m, K] against nn.Linear weights [N, K] rotated through more than 4x the L2, and the
// calls linear(x, w) over them: ember's bf16 linear, timed on its own (bench_linear) and beside
// the FP8 cases. Not movable: the calls refer to its members.
struct Bf16Linear {
  std::vector<Tensor> ws;
  Tensor x;
  std::vector<std::function<void()>> calls;
  Bf16Linear(int64_t m, int64_t k, int64_t n, uint64_t seed) : x(randn({m, k}, kBFloat16, Device::cuda(), seed)) {
    const int64_t copies = copies_for(k * n * 2);
    for (int64_t c = 0; c < copies; ++c) ws.push_back(randn({n, k}, kBFloat16, Device::cuda(), seed + 1 + c));
    for (int64_t i = 0; i < std::max<int64_t>(copies, 20); ++i) calls.push_back([this, i] { linear(x, ws[i % ws.size()]); });
  }
  Bf16Linear(const Bf16Linear&) = delete;
  Bf16Linear& operator=(const Bf16Linear&) = delete;
};

// bf16 linear of M rows against an nn.Linear weight [N, K] (small-batch decode).
void bench_linear(int64_t m, int64_t k, int64_t n) {
  const int64_t nbytes = k * n * 2;
  const Bf16Linear lin(m, k, n, 100);
  double rel_err = -1;
  if (k * n <= (64ll << 20)) {
    const Tensor xc = lin.x.to(Device::cpu()).to(kFloat32), wc = lin.ws[0].to(Device::cpu()).to(kFloat32);
    rel_err = bench::relative_error(linear(lin.x, lin.ws[0]), linear(xc, wc));
  }
  double nodes = 0;
  const double us = bench::time_graph(lin.calls, 15, cudaStreamCaptureModeRelaxed, &nodes);
  fmt::print("{{\"impl\": \"ember\", \"op\": \"linear\", \"case\": \"{} {} {}\", \"us\": {:.3f}, \"gbps\": {:.1f}, \"rel_err\": {:.2e}, "
             "\"graph_nodes_per_call\": {:.2f}}}\n",
             m, k, n, us, nbytes / us / 1e3, rel_err, nodes);
}

void bench_softmax(int64_t rows, int64_t vocab) {
  const Device gpu = Device::cuda();
  const int64_t nbytes = rows * vocab * 4 * 2, copies = copies_for(nbytes), n_calls = std::max<int64_t>(copies, 20);
  std::vector<Tensor> xs;
  for (int64_t c = 0; c < copies; ++c) xs.push_back(randn({rows, vocab}, kFloat32, gpu, 200 + c));
  const double rel_err = bench::relative_error(softmax(xs[0], -1), softmax(xs[0].to(Device::cpu()), -1));
  std::vector<std::function<void()>> calls;
  for (int64_t i = 0; i < n_calls; ++i) {
    const Tensor& x = xs[i % copies];
    calls.push_back([&x] { softmax(x, -1); });
  }
  const double us = bench::time_graph(calls);
  fmt::print("{{\"impl\": \"ember\", \"op\": \"softmax\", \"case\": \"{} {}\", \"us\": {:.3f}, \"gbps\": {:.1f}, \"rel_err\": {:.2e}}}\n",
             rows, vocab, us, nbytes / us / 1e3, rel_err);
}

// FP8 scaled_mm: a [M, K] e4m3fn, b = w.t() of w [N, K]; bf16 out. mode: tensorwise or rowwise,
// with "-fast" for use_fast_accum. For decode shapes (M <= 16) also ember's bf16 GEMV on the same
// shape ("bf16_us"), the speedup FP8 is for.
void bench_scaled_mm(int64_t m, int64_t k, int64_t n, const std::string& mode) {
  const Device gpu = Device::cuda();
  const bool decode = m <= 16;
  const int64_t nbytes = k * n, copies = decode ? copies_for(nbytes) : 1, n_calls = decode ? std::max<int64_t>(copies, 20) : 5;
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c) ws.push_back(randn({n, k}, kFloat32, gpu, 300 + c).to(kFloat8_e4m3fn));
  const Tensor a = randn({m, k}, kFloat32, gpu, 8).to(kFloat8_e4m3fn);
  const bool rowwise = mode.rfind("rowwise", 0) == 0, fast = mode.ends_with("-fast");
  const Tensor sa = rowwise ? add(rand({m, 1}, kFloat32, gpu, 9), 0.1) : scalar_tensor(0.5, kFloat32, gpu);
  const Tensor sb = rowwise ? add(rand({1, n}, kFloat32, gpu, 10), 0.1) : scalar_tensor(0.25, kFloat32, gpu);
  double rel_err = -1;
  if (decode && k * n <= (64ll << 20)) {
    const Tensor ref = scaled_mm(a.to(Device::cpu()), ws[0].to(Device::cpu()).t(), sa.to(Device::cpu()), sb.to(Device::cpu()));
    rel_err = bench::relative_error(scaled_mm(a, ws[0].t(), sa, sb, {}, kBFloat16, fast), ref);
  }
  std::vector<std::function<void()>> calls;
  for (int64_t i = 0; i < n_calls; ++i) {
    const Tensor& w = ws[i % copies];
    calls.push_back([&a, &w, &sa, &sb, fast] { scaled_mm(a, w.t(), sa, sb, {}, kBFloat16, fast); });
  }
  double nodes = 0;
  const double us = bench::time_graph(calls, 15, cudaStreamCaptureModeRelaxed, &nodes);
  const double bf16_us = decode ? bench::time_graph(Bf16Linear(m, k, n, 400).calls) : -1;
  fmt::print("{{\"impl\": \"ember\", \"op\": \"scaled_mm\", \"case\": \"{} {} {} {}\", \"us\": {:.3f}, \"gbps\": {:.1f}, "
             "\"tflops\": {:.1f}, \"bf16_us\": {:.3f}, \"rel_err\": {:.2e}, \"graph_nodes_per_call\": {:.2f}}}\n",
             m, k, n, mode, us, (m * k + nbytes) / us / 1e3, 2.0 * m * k * n / us / 1e6, bf16_us, rel_err, nodes);
}


// Weight-only FP8 linear (fp8_linear, the engine's FP8 projections): bf16 x [m, K] against an
// e4m3fn weight [N, K] with 128x128 block scales; beside it the same product through
// scaled_grouped_mm with one group (the engine's path before fp8_linear: "grouped_us") and ember's
// bf16 linear on the same shape ("bf16_us"). Device time from graph replay, and, since the engine
// decodes eagerly, the wall time per call of back-to-back eager calls ("*eager_us"), which adds
// the host's work per op.
void bench_weight_fp8(int64_t m, int64_t k, int64_t n) {
  const Device gpu = Device::cuda();
  const int64_t nbytes = k * n, copies = copies_for(nbytes), n_calls = std::max<int64_t>(copies, 20);
  std::vector<Tensor> qs, scales;
  for (int64_t c = 0; c < copies; ++c) {
    auto [q, scale] = quantize_fp8(randn({n, k}, kFloat32, gpu, 500 + c), Fp8Granularity::Block128);
    qs.push_back(q);
    scales.push_back(scale);  // [ceil(N/128), ceil(K/128)]
  }
  const Bf16Linear bf16(m, k, n, 600);
  const Tensor x = randn({m, k}, kBFloat16, gpu, 12);
  const auto grouped = [&x, m](const Tensor& q, const Tensor& scale) {
    const Tensor offsets = full({1}, m, kInt32, x.device());
    return scaled_grouped_mm(x, q.unsqueeze(0).transpose(1, 2), std::nullopt, scale.unsqueeze(0), offsets, kBFloat16);
  };
  double rel_err = -1;
  if (k * n <= (64ll << 20)) {
    const Tensor ref = linear(x.to(Device::cpu()).to(kFloat32), dequantize_fp8(qs[0], scales[0]).to(Device::cpu()));
    rel_err = bench::relative_error(fp8_linear(x, qs[0], scales[0]), ref);
  }
  std::vector<std::function<void()>> calls, gcalls;
  for (int64_t i = 0; i < n_calls; ++i) {
    calls.push_back([&, i] { fp8_linear(x, qs[i % copies], scales[i % copies]); });
    gcalls.push_back([&, i] { grouped(qs[i % copies], scales[i % copies]); });
  }
  double nodes = 0;
  const double us = bench::time_graph(calls, 15, cudaStreamCaptureModeRelaxed, &nodes);
  const double grouped_us = bench::time_graph(gcalls), bf16_us = bench::time_graph(bf16.calls);
  const auto eager = [](const std::vector<std::function<void()>>& fs) {  // median of 5 rounds of every call
    std::vector<double> rounds;
    for (int r = 0; r < 6; ++r) {
      bench::check(cudaDeviceSynchronize(), "sync");
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& f : fs) f();
      bench::check(cudaDeviceSynchronize(), "sync");
      const double total = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) rounds.push_back(total / static_cast<double>(fs.size()));  // round 0 warms up
    }
    std::nth_element(rounds.begin(), rounds.begin() + 2, rounds.end());
    return rounds[2];
  };
  const double eager_us = eager(calls), grouped_eager_us = eager(gcalls), bf16_eager_us = eager(bf16.calls);
  fmt::print("{{\"impl\": \"ember\", \"op\": \"weight_fp8\", \"case\": \"{} {} {}\", \"us\": {:.3f}, \"gbps\": {:.1f}, "
             "\"grouped_us\": {:.3f}, \"bf16_us\": {:.3f}, \"eager_us\": {:.3f}, \"grouped_eager_us\": {:.3f}, "
             "\"bf16_eager_us\": {:.3f}, \"rel_err\": {:.2e}, \"graph_nodes_per_call\": {:.2f}}}\n",
             m, k, n, us, nbytes / us / 1e3, grouped_us, bf16_us, eager_us, grouped_eager_us, bf16_eager_us, rel_err, nodes);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    fmt::print(stderr, "decode_bench needs a GPU: {}\n", cuda::availability().reason);
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string op;
    in >> op;
    try {
      if (op == "gemv") { std::string o; int64_t k, n; in >> o >> k >> n; bench_gemv(o, k, n); }
      else if (op == "softmax") { int64_t r, v; in >> r >> v; bench_softmax(r, v); }
      else if (op == "weight_fp8") { int64_t m, k, n; in >> m >> k >> n; bench_weight_fp8(m, k, n); }
      else if (op == "linear") { int64_t m, k, n; in >> m >> k >> n; bench_linear(m, k, n); }
      else if (op == "scaled_mm") { int64_t m, k, n; std::string mode; in >> m >> k >> n >> mode; bench_scaled_mm(m, k, n, mode); }
    } catch (const std::exception& e) {
      fmt::print("{{\"impl\": \"ember\", \"op\": \"{}\", \"case\": \"{}\", \"error\": \"{}\"}}\n", op, line, e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
