#include "cuda/spin_kernel.h"

namespace ember::test {
namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void copy_kernel(const float* src, float* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) dst[i] = src[i];
}

__global__ void report_kernel(int* code, long long* value, long long* bound, int error_code, long long index,
                              long long size) {
  if (atomicCAS(code, 0, error_code) == 0) {
    *value = index;
    *bound = size;
  }
}

}  // namespace

cudaError_t spin(cudaStream_t stream, long long cycles) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError();
}

cudaError_t copy_floats(const float* src, float* dst, size_t n, cudaStream_t stream) {
  copy_kernel<<<256, 256, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

cudaError_t report_index_error(int* code, long long* value, long long* bound, int error_code, long long index,
                               long long size, cudaStream_t stream) {
  report_kernel<<<1, 1, 0, stream>>>(code, value, bound, error_code, index, size);
  return cudaGetLastError();
}

}  // namespace ember::test
