// CUDA bmm / baddbmm: cuBLAS strided-batched GEMM for the float and complex types, an exact
// wrapping kernel for integers, mirroring src/cpu/matmul.cpp.
//
// Layouts: a row-major product C = op(A) op(B) is the column-major product C^T = op(B)^T op(A)^T,
// so each matrix is handed to cuBLAS in place when one of its last two strides is 1 (a
// transposed view becomes a transpose flag), and copied to a contiguous buffer otherwise. A
// column-major output is computed as out^T = b^T a^T; any other output goes through a buffer.
// f32 runs with CUBLAS_COMPUTE_32F and the default math mode (no TF32); f16/bf16 multiply in
// f32 and round once (reduced-precision split-K reductions disallowed); fp8 converts to f32
// like the CPU. One cuBLAS handle per device and thread, bound to the current stream per call.
// Matrix-vector shapes go to the GEMV kernels (gemv.h).
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

#include "core/matrix_layout.h"
#include "cuda/blas.h"
#include "cuda/gemv.h"
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuda", "{} failed: {}", call, cublasGetStatusString(status));
}

/// The handle of the current device for this thread, set to the device's current stream.
/// Handles live as long as the thread (destroying them at thread exit could outlive the
/// CUDA context at process exit).
cublasHandle_t handle_for(int device) {
  thread_local std::vector<cublasHandle_t> handles;
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  cublasHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) {
    check_cublas(cublasCreate(&h), "cublasCreate");
    check_cublas(cublasSetMathMode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                 "cublasSetMathMode");
  }
  check_cublas(cublasSetStream(h, current_raw_stream(device)), "cublasSetStream");
  return h;
}

/// How cuBLAS reads a matrix in place (core/matrix_layout.h decides; this names its enum).
struct BlasLayout {
  cublasOperation_t op;
  int64_t ld;
};

std::optional<BlasLayout> blas_layout(const Tensor& x3) {
  const auto l = matrix_layout(x3);
  if (!l) return std::nullopt;
  return BlasLayout{l->transposed ? CUBLAS_OP_T : CUBLAS_OP_N, l->ld};
}

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
GemmTypes gemm_types(DType d) {
  switch (d) {
    case DType::Float32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::Complex64: return {CUDA_C_32F, CUBLAS_COMPUTE_32F};
    case DType::Complex128: return {CUDA_C_64F, CUBLAS_COMPUTE_64F};
    default: fail("matmul", "dtype for cuBLAS: expected float16, bfloat16, float32, float64 or complex, got {}", name(d));
  }
}

/// c[i] (+)= a[i] @ b[i] through cuBLAS; a, b, c [B,M,K], [B,K,N], [B,M,N] of one cuBLAS dtype;
/// c writable in place (checked by the caller); with `accumulate` c already holds the bias.
void cublas_bmm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, bool accumulate) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a_in.size(2);
  EMBER_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && batch <= INT_MAX, "matmul",
              "sizes within cuBLAS's 32-bit indices: expected B, M, N, K <= {}, got B={}, M={}, N={}, K={}", INT_MAX, batch,
              m, n, k);
  const BlasLayout cl = *blas_layout(c);
  // Row-major C as it is, or a column-major C computed as C^T = B^T A^T.
  const bool transposed_out = cl.op == CUBLAS_OP_T;
  const Tensor a = blas_readable(transposed_out ? b_in.transpose(1, 2) : a_in);
  const Tensor b = blas_readable(transposed_out ? a_in.transpose(1, 2) : b_in);
  const int64_t rows = transposed_out ? n : m, cols = transposed_out ? m : n;
  const BlasLayout al = *blas_layout(a), bl = *blas_layout(b);
  const GemmTypes types = gemm_types(c.dtype());
  const int device = c.device().index;
  // alpha/beta in the compute type: float, double or their complex pairs.
  const double one_d[2] = {1.0, 0.0}, beta_d[2] = {accumulate ? 1.0 : 0.0, 0.0};
  const float one_f[2] = {1.0f, 0.0f}, beta_f[2] = {accumulate ? 1.0f : 0.0f, 0.0f};
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = f64 ? static_cast<const void*>(one_d) : static_cast<const void*>(one_f);
  const void* beta = f64 ? static_cast<const void*>(beta_d) : static_cast<const void*>(beta_f);
  // Column-major: C^T (cols x rows) = op(B)^T (cols x k) op(A)^T (k x rows).
  check_cublas(cublasGemmStridedBatchedEx(handle_for(device), bl.op, al.op, static_cast<int>(cols), static_cast<int>(rows),
                                          static_cast<int>(k), alpha, b.raw_data(), types.data, static_cast<int>(bl.ld),
                                          b.stride(0), a.raw_data(), types.data, static_cast<int>(al.ld), a.stride(0), beta,
                                          c.raw_data(), types.data, static_cast<int>(cl.ld), c.stride(0),
                                          static_cast<int>(batch), types.compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

/// Exact integer products: accumulate in uint64 (wrapping like torch's integer arithmetic),
/// store truncated to T. One thread per output element.
template <class T> struct IntegerBmmArgs {
  const T* a;
  const T* b;
  const T* bias;
  T* out;
  int64_t batch, m, n, k;
  int64_t as[3], bs[3], cs[3], os[3];
};

template <class T> __global__ void __launch_bounds__(kBlock) integer_bmm_kernel(IntegerBmmArgs<T> p) {
  const int64_t total = p.batch * p.m * p.n;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t j = e % p.n, r = (e / p.n) % p.m, i = e / (p.n * p.m);
    uint64_t acc = p.bias ? static_cast<uint64_t>(p.bias[i * p.cs[0] + r * p.cs[1] + j * p.cs[2]]) : 0;
    const T* arow = p.a + i * p.as[0] + r * p.as[1];
    const T* bcol = p.b + i * p.bs[0] + j * p.bs[2];
    for (int64_t q = 0; q < p.k; ++q) acc += static_cast<uint64_t>(arow[q * p.as[2]]) * static_cast<uint64_t>(bcol[q * p.bs[1]]);
    p.out[i * p.os[0] + r * p.os[1] + j * p.os[2]] = static_cast<T>(acc);
  }
}

template <class T> void integer_bmm(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  IntegerBmmArgs<T> p{static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
                      bias ? static_cast<const T*>(bias->raw_data()) : nullptr, static_cast<T*>(out.raw_data()),
                      out.size(0), out.size(1), out.size(2), a.size(2), {}, {}, {}, {}};
  for (int d = 0; d < 3; ++d) {
    p.as[d] = a.stride(d);
    p.bs[d] = b.stride(d);
    p.cs[d] = bias ? bias->stride(d) : 0;
    p.os[d] = out.stride(d);
  }
  const int device = out.device().index;
  integer_bmm_kernel<T><<<grid_for(p.batch * p.m * p.n, kBlock, device), kBlock, 0, current_raw_stream(device)>>>(p);
  EMBER_CUDA_CHECK_LAUNCH();
}

void product(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  if (gemv_applies(a, b, out) && (bias == nullptr || gemv_bias_applies(*bias, out))) {
    gemv(a, b, bias ? *bias : Tensor(), out);
    return;
  }
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("matmul", "dtype: expected a numeric type, got {}", name(out.dtype()));
    } else if constexpr (std::is_integral_v<T>) {
      integer_bmm<T>(a, b, bias, out);
    } else {
      // fp8 computes in f32 (converted copies); the other types go to cuBLAS as they are. C is
      // out itself when cuBLAS can write it in place, else a contiguous buffer copied out.
      constexpr bool via_f32 = is_low_float_v<T> && sizeof(T) == 1;
      const DType compute = via_f32 ? kFloat32 : out.dtype();
      const bool in_place = !via_f32 && blas_layout(out).has_value();
      const Tensor c = in_place ? out : empty(out.sizes(), compute, out.device());
      if (bias) copy(*bias, c);
      if (via_f32) cublas_bmm(converted(a, kFloat32), converted(b, kFloat32), c, bias != nullptr);
      else cublas_bmm(a, b, c, bias != nullptr);
      if (!in_place) copy(c, out);
    }
  });
}

}  // namespace

bool linear_f32_out(const Tensor& a, const Tensor& b, const Tensor& out) {
  const DType d = a.dtype();
  if ((d != kBFloat16 && d != kFloat16) || b.dtype() != d || out.dtype() != kFloat32 || a.dim() != 2 || b.dim() != 2 ||
      out.dim() != 2)
    return false;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  // Leading dimensions as cuBLAS's column-major view sees them (any, for a single row).
  const int64_t lda = m == 1 ? k : a.stride(0), ldb = n == 1 ? k : b.stride(0), ldo = m == 1 ? n : out.stride(0);
  if (b.size(1) != k || out.size(0) != m || out.size(1) != n || m == 0 || n == 0 || k == 0 || a.stride(1) != 1 ||
      b.stride(1) != 1 || out.stride(1) != 1 || lda < k || ldb < k || ldo < n ||
      std::max({m, n, k, lda, ldb, ldo}) > INT_MAX)
    return false;
  const cudaDataType_t type = gemm_types(d).data;
  const float one = 1.f, zero = 0.f;
  // Column-major: out^T (n x m) = b (n x k, stored k x n) ^T-op times a^T (k x m).
  check_cublas(cublasGemmEx(handle_for(out.device().index), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &one, b.raw_data(), type, static_cast<int>(ldb), a.raw_data(), type,
                            static_cast<int>(lda), &zero, out.raw_data(), CUDA_R_32F, static_cast<int>(ldo), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  return true;
}

void bmm(const Tensor& a, const Tensor& b, const Tensor& out) { product(a, b, nullptr, out); }

void baddbmm(const Tensor& bias, const Tensor& a, const Tensor& b, const Tensor& out) { product(a, b, &bias, out); }

}  // namespace ember::cuda
