// ember side of the MoE benchmark (bench/torch_moe.py is the PyTorch side; scripts/gpu_check.sh
// runs both and bench/compare.py joins them). Cases: the MoE layer and grouped_mm alone for
// Qwen3-30B-A3B, Qwen3.5-35B-A3B and LFM2-8B-A1B shapes, T in {1, 2, 4, 8, 16, 64, 512}, bf16
// and FP8 (128x128 block-scaled experts). Method, identical to the PyTorch script: a CUDA graph of
// 16 calls over 16 different inputs (so each call routes to other experts and the weights come
// from HBM, not L2), replayed 15 times after a warm-up; the median replay / 16. One JSON object
// per line: {"impl", "op", "case", "us", ...}. The layer's line is printed twice, as "moe_layer"
// (against torch's grouped_mm path) and "moe_layer_batched" (against transformers' batched_mm
// decode path). T = 1 cases are first checked against the CPU reference. Usage: moe_bench [T [model
// [bf16|fp8]]], e.g. `moe_bench 1 qwen3-30b-a3b fp8`; "all" or nothing runs every model / type.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "graph_timer.h"

using namespace ember;

namespace {

constexpr int kReplays = 15, kInputs = 16;

struct Model {
  std::string name;
  int64_t experts, hidden, inter, top_k, shared_inter;
  MoeScoring scoring;
  bool expert_bias;
};


void print(const std::string& op, const std::string& c, double us, double gbytes, double err) {
  fmt::print("{{\"impl\": \"ember\", \"op\": \"{}\", \"case\": \"{}\", \"us\": {:.3f}, \"gbps\": {:.1f}, \"rel_err\": {:.2e}}}\n", op, c,
             us, gbytes / us * 1e3, err);
  std::fflush(stdout);
}

// max |t|, or infinity when t holds a NaN or an infinity.
double max_abs_or_inf(const Tensor& t) {
  double m = 0;
  for (const float v : t.to(Device::cpu()).to(kFloat32).contiguous().to_vector<float>()) {
    if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::fabs(static_cast<double>(v)));
  }
  return m;
}

MoeExperts to_cpu(const MoeExperts& e) {
  MoeExperts c;
  for (auto [dst, src] : {std::pair{&c.gate_up, &e.gate_up}, {&c.down, &e.down}, {&c.gate_up_scale, &e.gate_up_scale},
                          {&c.down_scale, &e.down_scale}})
    if (src->defined()) *dst = src->to(Device::cpu());
  return c;
}

void bench_model(const Model& m, bool fp8, const std::vector<int64_t>& tokens) {
  const Device gpu = Device::cuda();
  const std::string dt = fp8 ? "fp8" : "bf16";
  const int64_t e = m.experts, h = m.hidden, inter = m.inter, k = m.top_k;
  MoeExperts ex;
  const Tensor gate_up = randn({e, 2 * inter, h}, kBFloat16, gpu, 1) * Scalar(0.02);
  const Tensor down = randn({e, h, inter}, kBFloat16, gpu, 2) * Scalar(0.02);
  if (fp8) {
    std::tie(ex.gate_up, ex.gate_up_scale) = quantize_fp8(gate_up, Fp8Granularity::Block128);
    std::tie(ex.down, ex.down_scale) = quantize_fp8(down, Fp8Granularity::Block128);
  } else {
    ex.gate_up = gate_up;
    ex.down = down;
  }
  const Tensor router = randn({e, h}, kBFloat16, gpu, 3) * Scalar(0.05);
  MoeLayerOptions o;
  o.route.top_k = k;
  o.route.scoring = m.scoring;
  if (m.scoring == MoeScoring::Sigmoid) o.route.norm_eps = 1e-6;
  if (m.expert_bias) o.route.expert_bias = rand({e}, kFloat32, gpu, 4) * Scalar(0.01);
  if (m.shared_inter) {
    o.shared = MoeSharedExpert{randn({2 * m.shared_inter, h}, kBFloat16, gpu, 5) * Scalar(0.02),
                               randn({h, m.shared_inter}, kBFloat16, gpu, 6) * Scalar(0.02), randn({1, h}, kBFloat16, gpu, 7) * Scalar(0.05)};
  }
  const double w_byte = fp8 ? 1.0 : 2.0;
  for (int64_t t : tokens) {
    const std::string c = fmt::format("{} T={} {}", m.name, t, dt);
    try {
      std::vector<Tensor> xs;
      for (int i = 0; i < kInputs; ++i) xs.push_back(randn({t, h}, kBFloat16, gpu, 100 + i));
      double err = -1;
      if (t == 1) {
        MoeLayerOptions oc = o;
        if (o.route.expert_bias) oc.route.expert_bias = o.route.expert_bias->to(Device::cpu());
        if (o.shared) oc.shared = MoeSharedExpert{o.shared->gate_up.to(Device::cpu()), o.shared->down.to(Device::cpu()), o.shared->gate.to(Device::cpu())};
        const Tensor got = moe_layer(xs[0], router, ex, o), want = moe_layer(xs[0].to(Device::cpu()), router.to(Device::cpu()), to_cpu(ex), oc);
        err = bench::relative_error(got, want);
        // relative_error lets NaN match NaN; a layer's output has none, so any is an error. An
        // all-zero reference would make any error 0: reported as NaN (Qwen3.5's rows read exactly 0).
        const double got_max = max_abs_or_inf(got), want_max = max_abs_or_inf(want);
        if (std::isinf(got_max) || std::isinf(want_max)) err = std::numeric_limits<double>::infinity();
        if (want_max == 0) {
          err = std::numeric_limits<double>::quiet_NaN();
          fmt::print(stderr, "{}: the CPU reference is all zero (GPU max |out| {})\n", c, got_max);
        }
      }
      // Bytes the layer must read at least: the distinct experts of one call (expected count
      // for uniform routing), the router, the shared expert.
      const double distinct = static_cast<double>(e) * (1.0 - std::pow(1.0 - static_cast<double>(k) / e, static_cast<double>(t)));
      const double gbytes = (distinct * 3.0 * h * inter * w_byte + e * h * 2.0 + 3.0 * m.shared_inter * h * 2.0) / 1e9;
      std::vector<std::function<void()>> calls;
      for (int i = 0; i < kInputs; ++i) calls.push_back([&, i] { (void)moe_layer(xs[i], router, ex, o); });
      const double us = bench::time_graph(calls, kReplays, cudaStreamCaptureModeGlobal);
      print("moe_layer", c, us, gbytes, err);
      print("moe_layer_batched", c, us, gbytes, err);

      // grouped_mm alone: the gate_up product over the permuted rows of each input's routing.
      std::vector<Tensor> rows, offs;
      for (int i = 0; i < kInputs; ++i) {
        MoeRouteOptions route = o.route;
        if (route.expert_bias) route.expert_bias = route.expert_bias->to(Device::cpu());
        const Tensor logits = linear(xs[i].to(Device::cpu()).to(kFloat32), router.to(Device::cpu()).to(kFloat32));
        const auto [w, ids] = moe_route(logits, route);
        rows.push_back(randn({t * k, h}, kBFloat16, gpu, 200 + i));
        offs.push_back(moe_permute(ids, e).offsets.to(gpu));
      }
      std::vector<std::function<void()>> gcalls;
      for (int i = 0; i < kInputs; ++i) {
        if (fp8) gcalls.push_back([&, i] { (void)scaled_grouped_mm(rows[i], ex.gate_up.transpose(1, 2), std::nullopt, ex.gate_up_scale, offs[i]); });
        else gcalls.push_back([&, i] { (void)grouped_mm(rows[i], ex.gate_up.transpose(1, 2), offs[i]); });
      }
      const double gus = bench::time_graph(gcalls, kReplays, cudaStreamCaptureModeGlobal);
      print("grouped_mm", c, gus, distinct * 2.0 * h * inter * w_byte / 1e9, -1);
    } catch (const std::exception& err) {
      fmt::print("{{\"impl\": \"ember\", \"op\": \"moe_layer\", \"case\": \"{}\", \"error\": \"{}\"}}\n", c, err.what());
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    fmt::print(stderr, "moe_bench needs a GPU: {}\n", cuda::availability().reason);
    return 1;
  }
  const std::vector<Model> models = {{"qwen3-30b-a3b", 128, 2048, 768, 8, 0, MoeScoring::Softmax, false},
                                     {"qwen3.5-35b-a3b", 256, 2048, 512, 8, 512, MoeScoring::Softmax, false},
                                     {"lfm2-8b-a1b", 32, 2048, 1792, 4, 0, MoeScoring::Sigmoid, true}};
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 64, 512};
  if (argc > 1) tokens = {std::stoll(argv[1])};
  // Optional filters: argv[2] a model name (or "all"), argv[3] bf16 or fp8.
  const std::string only_model = argc > 2 ? argv[2] : "all", only_dtype = argc > 3 ? argv[3] : "all";
  for (const Model& m : models) {
    if (only_model != "all" && only_model != m.name) continue;
    for (bool fp8 : {false, true}) {
      if (only_dtype != "all" && only_dtype != (fp8 ? "fp8" : "bf16")) continue;
      try {
        bench_model(m, fp8, tokens);
      } catch (const std::exception& err) {  // weights could not be made: report, go on
        fmt::print("{{\"impl\": \"ember\", \"op\": \"moe_layer\", \"case\": \"{} {}\", \"error\": \"{}\"}}\n", m.name,
                   fp8 ? "fp8" : "bf16", err.what());
      }
    }
  }
  return 0;
}
