// Test-only kernels for the CUDA runtime tests (tests/cuda/spin_kernel.cu, CUDA builds only).
// Plain CUDA types only: the test target compiles .cu files without the library's
// --expt-relaxed-constexpr, which the ember headers (fmt) need under nvcc. Each launcher
// returns its launch status (cudaGetLastError()).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace ember::test {

/// One thread that busy-waits `cycles` SM clock cycles on `stream` (keeps the stream busy).
cudaError_t spin(cudaStream_t stream, long long cycles);
/// dst[i] = src[i] for i < n, on `stream`.
cudaError_t copy_floats(const float* src, float* dst, size_t n, cudaStream_t stream);
/// Reports an index out of range the way library kernels use cuda::DeviceError (pass the
/// addresses of its fields): the first report claims `code` with atomicCAS(0 -> error_code),
/// then writes value and bound.
cudaError_t report_index_error(int* code, long long* value, long long* bound, int error_code, long long index,
                               long long size, cudaStream_t stream);

}  // namespace ember::test
