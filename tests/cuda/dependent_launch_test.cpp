// The decode kernels go out as programmatic dependent launches on sm_90 (src/cuda/dependent_launch.cuh):
// each lets the next kernel's blocks start at its own start, and each waits for the kernel before
// it before touching memory. A missing or misplaced wait shows up only in a chain of such kernels,
// each reading what the one before wrote into a fresh buffer: a chain of GEMVs over every kernel
// family (both weight layouts, small and mid N, split-K, 3 input rows), FP8 scaled_mm, and the MoE
// decode layer feeding a GEMV, run eagerly and as a replayed CUDA graph against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "compare.h"
#include "cuda/graph_capture.h"
#include "ember/ember.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace ember;

namespace {

#ifdef EMBER_WITH_CUDA
// N(0, 1/fan_in) values in `dtype`: activations stay O(1) down the chain.
Tensor weight(std::vector<int64_t> shape, int64_t fan_in, uint64_t seed, DType dtype = kBFloat16) {
  return (randn(std::move(shape), kFloat32, Device::cpu(), seed) * Scalar(1.0 / std::sqrt(static_cast<double>(fan_in)))).to(dtype);
}

// The chain's weights on one device. The GEMVs are below the 16 MiB from which gemv.cu launches
// plainly (one above it, to mix the two), each picked for a different kernel family.
struct Chain {
  Tensor w_rows3, b_batch, b_small, b_mid, w_rows, b_split, w_plain, w_after, fp8_w, fp8_scale, fp8_a, fp8_a_scale;
  Tensor moe_router, moe_gate_up, moe_down, w_last;

  Chain to(Device d) const {
    const auto on = [&](const Tensor& t) { return t.to(d); };
    return {on(w_rows3), on(b_batch), on(b_small), on(b_mid),     on(w_rows),      on(b_split),   on(w_plain), on(w_after), on(fp8_w),
            on(fp8_scale), on(fp8_a), on(fp8_a_scale), on(moe_router), on(moe_gate_up), on(moe_down), on(w_last)};
  }

  // x3 [3, 4096] bf16 through the GEMVs; xm [1, 256] through the MoE layer, whose output feeds the
  // last GEMV. Returns the GEMVs' end, the FP8 product's and the MoE layer's.
  std::vector<Tensor> run(const Tensor& x3, const Tensor& xm) const {
    const Tensor h3 = linear(x3, w_rows3);   // [3, 1024]  rows kernel, 3 input rows
    const Tensor h = h3.narrow(0, 1, 1);      // [1, 1024]  a view of row 1
    const Tensor c1 = matmul(h, b_batch);     // [1, 6144]  columns, batch kernel
    const Tensor c2 = matmul(c1, b_small);    // [1, 512]   columns, N <= 1024 and K > 2304
    const Tensor c3 = matmul(c2, b_mid);      // [1, 1000]  columns, K = 512
    const Tensor r = linear(c3, w_rows);      // [1, 3600]  one-row warp kernel
    const Tensor s = matmul(r, b_split);      // [1, 1104]  columns, split-K with tickets
    const Tensor p = linear(s, w_plain);      // [1, 8192]  18 MB: a plain launch between dependents
    const Tensor f = scaled_mm(fp8_a, fp8_w.t(), fp8_a_scale, fp8_scale, {}, kBFloat16, true);  // [1, 4104] FP8 M = 1
    MoeLayerOptions top4;
    top4.route.top_k = 4;
    const Tensor m = moe_layer(xm, moe_router, moe_gate_up, moe_down, top4);  // [1, 256] decode kernels
    return {linear(p, w_after), f, linear(m, w_last)};  // [1, 512], [1, 4104], [1, 1024]
  }
};

Chain make_chain() {
  Chain c;
  c.w_rows3 = weight({1024, 4096}, 4096, 1);
  c.b_batch = weight({1024, 6144}, 1024, 2);
  c.b_small = weight({6144, 512}, 6144, 3);
  c.b_mid = weight({512, 1000}, 512, 4);
  c.w_rows = weight({3600, 1000}, 1000, 5);
  c.b_split = weight({3600, 1104}, 3600, 6);
  c.w_plain = weight({8192, 1104}, 1104, 13);
  c.w_after = weight({512, 8192}, 8192, 14);
  // FP8 scaled_mm operands: a [1, 4096] and a [4104, 4096] weight, rowwise scales.
  auto [bq, bs] = quantize_fp8(weight({4104, 4096}, 4096, 7, kFloat32), Fp8Granularity::Rowwise);
  c.fp8_w = bq;
  c.fp8_scale = bs.t().contiguous();
  auto [aq, as] = quantize_fp8(randn({1, 4096}, kFloat32, Device::cpu(), 8), Fp8Granularity::Rowwise);
  c.fp8_a = aq;
  c.fp8_a_scale = as;
  // The router ranks the experts by channel 0 of xm (fixed at 4 by moe_input) with margins of 2,
  // far above what the other channels add: the routing cannot differ between CPU and GPU.
  std::vector<float> router = (randn({16, 256}, kFloat32, Device::cpu(), 9) * Scalar(0.001)).to_vector<float>();
  for (int e = 0; e < 16; ++e) router[static_cast<size_t>(e) * 256] = 0.5f * static_cast<float>((e * 7) % 16);
  c.moe_router = tensor(router, {16, 256}).to(kBFloat16);
  c.moe_gate_up = weight({16, 2 * 128, 256}, 256, 10);
  c.moe_down = weight({16, 256, 128}, 128, 11);
  c.w_last = weight({1024, 256}, 256, 12);
  return c;
}

Tensor moe_input(uint64_t seed) {
  std::vector<float> x = randn({1, 256}, kFloat32, Device::cpu(), seed).to_vector<float>();
  x[0] = 4.f;
  return tensor(x, {1, 256}).to(kBFloat16);
}
#endif

}  // namespace

TEST(CudaDependentLaunch, GemvChainReadsEachKernelsOutput) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  const Chain cpu = make_chain();
  const Chain gpu = cpu.to(Device::cuda());
  // A pool stream: the per-stream scratch (split-K tickets, the router's ticket) stays off the
  // default stream, whose memory the runtime tests count.
  const cuda::Stream stream = cuda::get_stream_from_pool();
  cuda::StreamGuard guard(stream);
  for (uint64_t seed : {20, 21, 22}) {
    const Tensor x = randn({3, 4096}, kFloat32, Device::cpu(), seed).to(kBFloat16), xm = moe_input(seed + 100);
    const std::vector<Tensor> got = gpu.run(x.to(Device::cuda()), xm.to(Device::cuda())), expected = cpu.run(x, xm);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_ALLCLOSE(got[i], expected[i], 3e-2, 3e-2) << "seed " << seed << ", output " << i;
  }
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}

// The same chain captured once and replayed with new inputs: in a graph the kernels' stream order
// becomes programmatic edges.
TEST(CudaDependentLaunch, GemvChainReplaysInAGraph) {
#ifdef EMBER_WITH_CUDA
  if (!cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  const Chain cpu = make_chain();
  const Chain gpu = cpu.to(Device::cuda());
  const Tensor x_g = empty({3, 4096}, kBFloat16, Device::cuda()), xm_g = empty({1, 256}, kBFloat16, Device::cuda());
  const cuda::Stream stream = cuda::get_stream_from_pool();
  cuda::StreamGuard guard(stream);
  const auto s = static_cast<cudaStream_t>(stream.handle());
  test::cuda_check(cudaMemsetAsync(x_g.raw_data(), 0, x_g.nbytes(), s), "zero x");
  test::cuda_check(cudaMemsetAsync(xm_g.raw_data(), 0, xm_g.nbytes(), s), "zero xm");
  (void)gpu.run(x_g, xm_g);  // warm-up: allocator cache, library handles
  stream.synchronize();
  std::vector<Tensor> out;
  std::optional<test::CapturedGraph> graph;
  try {
    graph.emplace(s, [&] { out = gpu.run(x_g, xm_g); });
  } catch (const std::exception& ex) {
    FAIL() << "the chain under capture: " << ex.what();
  }
  for (uint64_t seed : {30, 31}) {
    const Tensor x = randn({3, 4096}, kFloat32, Device::cpu(), seed).to(kBFloat16), xm = moe_input(seed + 100);
    test::cuda_check(cudaMemcpyAsync(x_g.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyHostToDevice, s), "upload x");
    test::cuda_check(cudaMemcpyAsync(xm_g.raw_data(), xm.raw_data(), xm.nbytes(), cudaMemcpyHostToDevice, s), "upload xm");
    graph->replay();
    stream.synchronize();
    const std::vector<Tensor> expected = cpu.run(x, xm);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_ALLCLOSE(out[i], expected[i], 3e-2, 3e-2) << "seed " << seed << ", output " << i;
  }
#else
  GTEST_SKIP() << cuda::availability().reason;
#endif
}
