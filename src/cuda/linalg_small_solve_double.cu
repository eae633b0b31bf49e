// lu_solve of small float64 and complex128 matrices: linalg_small_solve.cuh instantiated for these
// two element types (float32 and complex64 are in linalg_small_solve_float.cu, so the two
// files compile in parallel).
#include "cuda/linalg_small_solve.cuh"

namespace ember::cuda::linalg_detail {

void small_lu_solve_as(Tag<double>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose, bool conjugate,
                       cudaStream_t stream, DeviceError* error) {
  launch_small_solve<double>(LU, pivots, X, transpose, conjugate, stream, error);
}

void small_lu_solve_as(Tag<Cx<double>>, const Tensor& LU, const Tensor& pivots, const Tensor& X, bool transpose,
                       bool conjugate, cudaStream_t stream, DeviceError* error) {
  launch_small_solve<Cx<double>>(LU, pivots, X, transpose, conjugate, stream, error);
}

}  // namespace ember::cuda::linalg_detail
