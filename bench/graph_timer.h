// The timing method shared by the C++ benchmarks (bench/timing.py is the PyTorch side): a CUDA
// graph of a run of calls captured on a pool stream after a warm-up run, replayed after one
// warm replay; the median replay over `replays`, divided by the number of calls.
#pragma once
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include <ember/ember.h>

namespace ember::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

/// Median microseconds per call. `mode` cudaStreamCaptureModeGlobal also proves the calls
/// never synchronise with the host (the capture fails if they do). `nodes`, when given, receives
/// the captured graph's node count (kernels, memsets, ...) divided by the number of calls.
inline double time_graph(const std::vector<std::function<void()>>& calls, int replays = 15,
                         cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed, double* nodes = nullptr) {
  const cuda::Stream stream = cuda::get_stream_from_pool();
  cuda::StreamGuard guard(stream);
  for (const auto& f : calls) f();  // warm-up: fills the allocator cache and library handles
  stream.synchronize();
  auto s = static_cast<cudaStream_t>(stream.handle());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s, mode), "begin capture");
  try {
    for (const auto& f : calls) f();
  } catch (...) {  // leave the stream usable for the next case
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    throw;
  }
  check(cudaStreamEndCapture(s, &graph), "end capture");
  if (nodes) {
    size_t count = 0;
    check(cudaGraphGetNodes(graph, nullptr, &count), "graph nodes");
    *nodes = static_cast<double>(count) / static_cast<double>(calls.size());
  }
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, s), "launch");
  stream.synchronize();
  std::vector<double> times;
  for (int r = 0; r < replays; ++r) {
    cuda::Event a, b;
    a.record(stream);
    check(cudaGraphLaunch(exec, s), "launch");
    b.record(stream);
    b.synchronize();
    times.push_back(a.elapsed_time(b) * 1e3 / static_cast<double>(calls.size()));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::nth_element(times.begin(), times.begin() + replays / 2, times.end());
  return times[replays / 2];
}

/// max |gpu - reference| / max |reference| over the finite values (reference on any device);
/// infinity when a value is NaN or infinite on one side only or the two differ in infinity. Until
/// session 8 a NaN on either side dropped out of the maxima (std::max keeps its first argument
/// against NaN), so an all-NaN result could read as 0.
inline double relative_error(const Tensor& gpu, const Tensor& reference) {
  const auto g = gpu.to(Device::cpu()).to(kFloat64).contiguous().to_vector<double>();
  const auto c = reference.to(Device::cpu()).to(kFloat64).contiguous().to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == c[i] || (std::isnan(g[i]) && std::isnan(c[i]))) continue;  // equal, the same infinity, or both NaN
    if (!std::isfinite(g[i]) || !std::isfinite(c[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(g[i] - c[i]));
  }
  for (double v : c)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  return err / std::max(scale, 1e-30);
}

}  // namespace ember::bench
