// The timing shared by the standalone probes (bench/stream_probe.cu, bench/moe_probe.cu): a CUDA
// graph of a run of launches, replayed once to warm up, then kReplays times between events; the
// median replay divided by the number of launches, in microseconds. Standalone on purpose: the
// same method in bench/graph_timer.h needs the ember library (its streams and events), and the
// probes run on the GPU machine without building it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(status_));           \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// `capture(stream)` launches the run (`launches` kernels) on the stream being captured.
template <class Capture> float time_graph(Capture capture, int launches) {
  constexpr int kReplays = 5;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  capture(stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int r = 0; r < kReplays; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1000.f / static_cast<float>(launches));
  }
  std::sort(times.begin(), times.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaStreamDestroy(stream));
  return times[kReplays / 2];
}
