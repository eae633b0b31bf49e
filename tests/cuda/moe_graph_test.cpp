// The MoE layer never synchronises with the host: the whole layer is captured into a CUDA graph
// in global capture mode (where any synchronising call fails the capture), replayed, then the
// input is overwritten so the routing changes and the graph is replayed again; each replay must
// match the CPU reference. Decode (fused kernels) and prefill (permute + grouped_mm) both.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>

#include "compare.h"
#include "cuda/graph_capture.h"
#include "ember/ember.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace ember;

namespace {

#ifdef EMBER_WITH_CUDA
// x [T, H] whose token t routes by channel (t + shift) % 4, and a router [E, H] whose channels
// 0..3 each order the experts differently with wide margins: changing `shift` changes the routing.
Tensor routed_x(int64_t t, int64_t h, int64_t shift, uint64_t seed) {
  std::vector<float> x = (randn({t, h}, kFloat32, Device::cpu(), seed) * Scalar(0.5)).to_vector<float>();
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < 4; ++c) x[i * h + c] = 0.f;
    x[i * h + (i + shift) % 4] = 4.f;
  }
  return tensor(x, {t, h});
}

Tensor router_weight(int64_t e, int64_t h, uint64_t seed) {
  std::vector<float> r = (randn({e, h}, kFloat32, Device::cpu(), seed) * Scalar(0.002)).to_vector<float>();
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (int64_t c = 0; c < 4; ++c) {
    std::vector<int64_t> order(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t i = 0; i < e; ++i) r[order[i] * h + c] = 0.05f * static_cast<float>(i);
  }
  return tensor(r, {e, h});
}

void capture_and_replay(int64_t tokens, bool shared) {
  const int64_t h = 256, e = 32, inter = 128, k = 8;
  const Device gpu = Device::cuda();
  const Tensor router = router_weight(e, h, 1).to(kBFloat16);
  const Tensor gate_up = (randn({e, 2 * inter, h}, kFloat32, Device::cpu(), 2) * Scalar(0.05)).to(kBFloat16);
  const Tensor down = (randn({e, h, inter}, kFloat32, Device::cpu(), 3) * Scalar(0.05)).to(kBFloat16);
  MoeLayerOptions o;
  o.route.top_k = k;
  MoeLayerOptions o_gpu = o;
  if (shared) {
    o.shared = MoeSharedExpert{(randn({64, h}, kFloat32, Device::cpu(), 4) * Scalar(0.05)).to(kBFloat16),
                               (randn({h, 32}, kFloat32, Device::cpu(), 5) * Scalar(0.05)).to(kBFloat16),
                               (randn({1, h}, kFloat32, Device::cpu(), 6) * Scalar(0.05)).to(kBFloat16)};
    o_gpu.shared = MoeSharedExpert{o.shared->gate_up.to(gpu), o.shared->down.to(gpu), o.shared->gate.to(gpu)};
  }
  const Tensor router_g = router.to(gpu), gate_up_g = gate_up.to(gpu), down_g = down.to(gpu);
  const Tensor x1 = routed_x(tokens, h, 0, 7).to(kBFloat16), x2 = routed_x(tokens, h, 1, 8).to(kBFloat16);
  // The routing really differs between the two inputs.
  const auto ids_of = [&](const Tensor& x) { return std::get<1>(moe_route(linear(x.to(kFloat32), router.to(kFloat32)), o.route)); };
  ASSERT_FALSE(test::equal(ids_of(x1), ids_of(x2)));

  const Tensor x_g = x1.to(gpu);  // the graph's input buffer, overwritten between replays
  const cuda::Stream stream = cuda::get_stream_from_pool();
  cuda::StreamGuard guard(stream);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  (void)moe_layer(x_g, router_g, gate_up_g, down_g, o_gpu);  // warm-up: allocator cache, handles
  stream.synchronize();

  Tensor out;
  std::optional<test::CapturedGraph> graph;
  try {
    graph.emplace(s, [&] { out = moe_layer(x_g, router_g, gate_up_g, down_g, o_gpu); });
  } catch (const std::exception& ex) {
    FAIL() << "moe_layer under capture: " << ex.what();
  }

  for (const Tensor* x : {&x1, &x2, &x1}) {
    const Tensor host = x->contiguous();
    test::cuda_check(cudaMemcpyAsync(x_g.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, s), "upload x");
    graph->replay();
    stream.synchronize();
    EXPECT_ALLCLOSE(out, moe_layer(*x, router, gate_up, down, o));
  }
}
#endif

}  // namespace

TEST(CudaMoeGraph, DecodeLayerReplaysWithChangingRouting) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  capture_and_replay(2, false);
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}

TEST(CudaMoeGraph, DecodeLayerWithSharedExpertReplays) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  capture_and_replay(3, true);
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}

// T = 1: the per-pair decode kernels, with and without a shared expert.
TEST(CudaMoeGraph, SingleTokenLayerReplaysWithChangingRouting) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  capture_and_replay(1, false);
  capture_and_replay(1, true);
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}

TEST(CudaMoeGraph, PrefillLayerReplaysWithChangingRouting) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  capture_and_replay(40, true);  // 320 (token, expert) pairs: permute + grouped_mm path
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}

// EMBER_MOE_BATCHED_WARPS (the T > 1 warps per block of the decode mma kernels) takes 1, 2 or 4;
// anything else is an error that names the variable, not a silent default.
TEST(CudaMoeLayer, RejectsAnUnknownBatchedWarpsCount) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  const int64_t t = 2, h = 256, e = 32, inter = 128;
  const Device gpu = Device::cuda();
  const Tensor x = routed_x(t, h, 0, 1).to(kBFloat16).to(gpu), router = router_weight(e, h, 2).to(kBFloat16).to(gpu);
  const Tensor gate_up = (randn({e, 2 * inter, h}, kFloat32, Device::cpu(), 3) * Scalar(0.05)).to(kBFloat16).to(gpu);
  const Tensor down = (randn({e, h, inter}, kFloat32, Device::cpu(), 4) * Scalar(0.05)).to(kBFloat16).to(gpu);
  MoeLayerOptions o;
  o.route.top_k = 8;
  const test::ScopedEnv warps("EMBER_MOE_BATCHED_WARPS", "3");
  const std::string message = test::error_of([&] { (void)moe_layer(x, router, gate_up, down, o); });
  EXPECT_NE(message.find("EMBER_MOE_BATCHED_WARPS: expected 1, 2 or 4, got 3"), std::string::npos) << message;
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}
