// A CUDA graph captured from host code, for the tests that replay a captured op with new inputs,
// and the CUDA error check those tests use around it.
#pragma once
#ifdef EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace ember::test {

/// Throws std::runtime_error naming `what` when `e` is an error (a test body that throws fails;
/// an ASSERT inside a helper would only return from the helper).
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// `calls` captured on `stream` in global mode (any synchronising call inside invalidates the
/// capture, so a successful capture proves there is none) and instantiated. Throws
/// std::runtime_error naming the failed step, or what `calls` threw (the capture is ended first).
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& calls) : stream_(stream) {
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    try {
      calls();
    } catch (...) {
      if (cudaStreamEndCapture(stream, &graph_) == cudaSuccess && graph_) cudaGraphDestroy(graph_);
      graph_ = nullptr;
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream, &graph_), "end capture (a synchronising call inside invalidates it)");
    cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), "instantiate");
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  /// Launches the graph on the stream it was captured on.
  void replay() const { cuda_check(cudaGraphLaunch(exec_, stream_), "replay"); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace ember::test
#endif
