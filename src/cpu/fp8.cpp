// CPU scaled_mm and fp8_linear: the FP8 operands decode exactly to float32, the product accumulates
// in float32 (OpenBLAS sgemm through ember::mm), then scales, bias and the (saturating, for fp8) cast.
#include "backend.h"
#include "cpu/loops.h"
#include "ember/ops.h"

namespace ember::cpu {

void scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out, bool /*use_fast_accum: always exact here*/) {
  const Tensor acc = mm(a.to(kFloat32), b.to(kFloat32)).contiguous();  // [M, N]
  const int64_t m = out.size(0), n = out.size(1);
  const std::vector<float> sa = scale_a.contiguous().to_vector<float>(), sb = scale_b.contiguous().to_vector<float>();
  const std::vector<float> bias_f = bias.defined() ? bias.to(kFloat32).contiguous().to_vector<float>() : std::vector<float>();
  Tensor scaled = empty({m, n}, kFloat32);
  const float* in = acc.data_ptr<float>();
  float* o = scaled.data_ptr<float>();
#pragma omp parallel for if (m * n > kParallelGrain)
  for (int64_t i = 0; i < m; ++i) {
    const float row_scale = sa[sa.size() == 1 ? 0 : i];
    for (int64_t j = 0; j < n; ++j) {
      float v = in[i * n + j] * row_scale * sb[sb.size() == 1 ? 0 : j];
      if (!bias_f.empty()) v += bias_f[j];
      o[i * n + j] = v;
    }
  }
  if (is_fp8(out.dtype())) saturate_copy(scaled, out);
  else copy(scaled, out);
}

void fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias, const Tensor& out) {
  const Tensor w = dequantize_fp8(weight, scale, kFloat32);  // [N, K]: each code times its scale, exact in f32
  const Tensor acc = mm(x.to(kFloat32), w.t());                // [M, N]
  copy(bias.defined() ? add(acc, bias.to(kFloat32)) : acc, out);
}

}  // namespace ember::cpu
