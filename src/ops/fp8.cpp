// FP8: quantization with scales, and scaled_mm with torch._scaled_mm's rules.
#include <cmath>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

double fp8_max(DType d) { return d == kFloat8_e4m3fn ? 448.0 : 57344.0; }

void check_fp8(const Tensor& t, const char* what) {
  EMBER_CHECK(is_fp8(t.dtype()), "scaled_mm", "{}: expected a float8_e4m3fn or float8_e5m2 matrix, got {}", what,
              name(t.dtype()));
  EMBER_CHECK(t.dim() == 2, "scaled_mm", "{}: expected a matrix (2 dims), got {} dims", what, t.dim());
}

// x padded with zeros to multiples of 128 in its last two dims.
Tensor pad_to_blocks(const Tensor& x) {
  const int64_t m = x.size(-2), k = x.size(-1);
  const int64_t pm = (m + 127) / 128 * 128, pk = (k + 127) / 128 * 128;
  if (pm == m && pk == k) return x;
  std::vector<int64_t> shape = x.sizes();
  shape[shape.size() - 2] = pm;
  shape.back() = pk;
  Tensor padded = zeros(shape, x.dtype(), x.device());
  ops::copy_into(x, padded.narrow(-2, 0, m).narrow(-1, 0, k));
  return padded;
}

// Per-group amax as fp32: [] / [..., M, 1] / [..., M/128, K/128].
Tensor group_amax(const Tensor& x, Fp8Granularity g) {
  const Tensor a = abs(x).to(kFloat32);
  switch (g) {
    case Fp8Granularity::Tensorwise: return amax(a);
    case Fp8Granularity::Rowwise: return amax(a, {-1}, true);
    case Fp8Granularity::Block128: {
      const Tensor p = pad_to_blocks(a);
      std::vector<int64_t> shape(p.sizes().begin(), p.sizes().end() - 2);
      const int64_t bm = p.size(-2) / 128, bk = p.size(-1) / 128;
      for (int64_t s : {bm, int64_t{128}, bk, int64_t{128}}) shape.push_back(s);
      const auto nd = static_cast<int64_t>(shape.size());
      return amax(p.reshape(shape), {nd - 3, nd - 1});
    }
  }
  fail("quantize_fp8", "granularity: expected Tensorwise, Rowwise or Block128, got code {}", static_cast<int>(g));
}

// scale broadcast to x's shape (block scales repeated 128x128 and cropped).
Tensor expand_scale(const Tensor& scale, const Tensor& x) {
  if (scale.dim() < 2 || (scale.size(-1) == 1 && scale.size(-2) == x.size(-2)) || scale.numel() == 1) {
    return scale.numel() == 1 ? scale.reshape({}).expand(x.sizes()) : scale.expand(x.sizes());
  }
  const int64_t bm = scale.size(-2), bk = scale.size(-1), m = x.size(-2), k = x.size(-1);
  EMBER_CHECK(bm == (m + 127) / 128 && bk == (k + 127) / 128, "dequantize_fp8",
              "block scale shape for a {}x{} tensor: expected [{}, {}], got [{}, {}]", m, k, (m + 127) / 128,
              (k + 127) / 128, bm, bk);
  std::vector<int64_t> shape(scale.sizes().begin(), scale.sizes().end() - 2);
  const auto lead = static_cast<int64_t>(shape.size());
  for (int64_t s : {bm, int64_t{128}, bk, int64_t{128}}) shape.push_back(s);
  Tensor s = scale.unsqueeze(lead + 1).unsqueeze(lead + 3).expand(shape);
  std::vector<int64_t> flat(scale.sizes().begin(), scale.sizes().end() - 2);
  flat.push_back(bm * 128);
  flat.push_back(bk * 128);
  return s.reshape(flat).narrow(-2, 0, m).narrow(-1, 0, k);
}

}  // namespace

std::tuple<Tensor, Tensor> quantize_fp8(const Tensor& x, Fp8Granularity granularity, DType dtype) {
  ops::check_defined("quantize_fp8", x);
  EMBER_CHECK(is_fp8(dtype), "quantize_fp8", "target dtype: expected float8_e4m3fn or float8_e5m2, got {}", name(dtype));
  EMBER_CHECK(is_floating_point(x.dtype()) && !is_fp8(x.dtype()), "quantize_fp8",
              "input dtype: expected float16, bfloat16, float32 or float64, got {}", name(x.dtype()));
  EMBER_CHECK(granularity == Fp8Granularity::Tensorwise || x.dim() >= 2, "quantize_fp8",
              "input for rowwise or block scales: expected at least 2 dims, got {}", x.dim());
  const Tensor scale = div(clamp(group_amax(x, granularity), Scalar(1e-12), std::nullopt), Scalar(fp8_max(dtype)));
  const Tensor q = saturate_cast(div(x.to(kFloat32), expand_scale(scale, x)), dtype);
  return {q, scale};
}

Tensor dequantize_fp8(const Tensor& q, const Tensor& scale, DType out_dtype) {
  ops::check_defined("dequantize_fp8", q);
  ops::check_same_device("dequantize_fp8", {&q, &scale});
  EMBER_CHECK(scale.dtype() == kFloat32, "dequantize_fp8", "scale dtype: expected float32, got {}", name(scale.dtype()));
  return mul(q.to(kFloat32), expand_scale(scale, q)).to(out_dtype);
}

Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 std::optional<Tensor> bias, DType out_dtype) {
  return scaled_mm(a, b, scale_a, scale_b, std::move(bias), out_dtype, false);
}

Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 std::optional<Tensor> bias, DType out_dtype, bool use_fast_accum) {
  const char* op = "scaled_mm";
  check_fp8(a, "mat_a");
  check_fp8(b, "mat_b");
  const Tensor bias_t = bias.value_or(Tensor());
  ops::check_same_device(op, {&a, &b, &scale_a, &scale_b, &bias_t});
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  EMBER_CHECK(b.size(0) == k, op, "mat_a and mat_b shapes cannot be multiplied: expected mat_b with {} rows, got ({}x{} and {}x{})",
              k, m, k, b.size(0), n);
  EMBER_CHECK(out_dtype == kFloat32 || out_dtype == kFloat16 || out_dtype == kBFloat16 || out_dtype == kFloat8_e4m3fn,
              op, "out_dtype: expected float32, float16, bfloat16 or float8_e4m3fn, got {}", name(out_dtype));
  const bool tensorwise = scale_a.numel() == 1 && scale_b.numel() == 1;
  const bool rowwise = scale_a.dim() == 2 && scale_b.dim() == 2 && scale_a.size(0) == m && scale_a.size(1) == 1 &&
                       scale_b.size(0) == 1 && scale_b.size(1) == n;
  EMBER_CHECK(scale_a.dtype() == kFloat32 && scale_b.dtype() == kFloat32 && (tensorwise || rowwise), op,
              "Invalid scaling configuration: expected float32 scales with one element each (tensorwise) or "
              "scale_a ({}, 1) and scale_b (1, {}) (rowwise), got scale_a {} {} and scale_b {} {}",
              m, n, shape_str(scale_a.sizes()), name(scale_a.dtype()), shape_str(scale_b.sizes()), name(scale_b.dtype()));
  if (rowwise && !tensorwise) {  // torch checks the inner stride, not is_contiguous()
    EMBER_CHECK(scale_a.stride(1) == 1, op, "rowwise scale_a: expected scale_a.stride(1) to be 1 (contiguous), got {}",
                scale_a.stride(1));
    EMBER_CHECK(scale_b.stride(1) == 1, op, "rowwise scale_b: expected scale_b.stride(1) to be 1 (contiguous), got {}",
                scale_b.stride(1));
  }
  if (bias_t.defined()) {
    EMBER_CHECK(out_dtype == kBFloat16 || out_dtype == kFloat16, op,
                "bias with out_dtype {}: expected no bias (bias needs bfloat16 or float16 output), got a bias",
                name(out_dtype));
    EMBER_CHECK(bias_t.dtype() == out_dtype, op, "bias dtype: expected {} (the output dtype), got {}", name(out_dtype),
                name(bias_t.dtype()));
    EMBER_CHECK(bias_t.numel() == n, op, "Bias must be size {}: expected {} elements, got {}", n, n, bias_t.numel());
  }
  Tensor out = empty({m, n}, out_dtype, a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    // An empty contraction is all zeros (plus the bias, like torch).
    ops::copy_into(bias_t.defined() ? bias_t.reshape({1, n}).expand({m, n}) : zeros({m, n}, out_dtype, a.device()), out);
    return out;
  }
  const Tensor scale_a_flat = tensorwise ? scale_a.reshape({1}) : scale_a;
  const Tensor scale_b_flat = tensorwise ? scale_b.reshape({1}) : scale_b;
  const Tensor bias_flat = bias_t.defined() ? bias_t.reshape({n}) : Tensor();
  EMBER_DISPATCH(a.device(), scaled_mm, a, b, scale_a_flat, scale_b_flat, bias_flat, out, use_fast_accum);
  return out;
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& weight_scale, std::optional<Tensor> bias) {
  const char* op = "fp8_linear";
  ops::check_defined(op, x, "x");
  ops::check_defined(op, weight, "weight");
  ops::check_defined(op, weight_scale, "weight_scale");
  const Tensor bias_t = bias.value_or(Tensor());
  ops::check_same_device(op, {&x, &weight, &weight_scale, &bias_t});
  EMBER_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat16 || x.dtype() == kBFloat16, op,
              "x dtype: expected float32, float16 or bfloat16, got {}", name(x.dtype()));
  EMBER_CHECK(is_fp8(weight.dtype()), op, "weight dtype: expected float8_e4m3fn or float8_e5m2, got {}", name(weight.dtype()));
  EMBER_CHECK(weight.dim() == 2, op, "weight: expected a matrix [N, K] (2 dims), got {} dims", weight.dim());
  EMBER_CHECK(x.dim() >= 1, op, "x: expected at least 1 dim [..., K], got a scalar");
  const int64_t n = weight.size(0), k = weight.size(1);
  EMBER_CHECK(x.size(-1) == k, op, "x and weight shapes cannot be multiplied: expected x [..., {}], got x {} and weight {}", k,
              shape_str(x.sizes()), shape_str(weight.sizes()));
  EMBER_CHECK(weight_scale.dtype() == kFloat32, op, "weight_scale dtype: expected float32, got {}", name(weight_scale.dtype()));
  const int64_t bn = (n + 127) / 128, bk = (k + 127) / 128;
  const bool tensorwise = weight_scale.numel() == 1 && weight_scale.dim() <= 2;
  const bool per_row = (weight_scale.dim() == 1 && weight_scale.size(0) == n) ||
                       (weight_scale.dim() == 2 && weight_scale.size(0) == n && weight_scale.size(1) == 1);
  const bool blocks = weight_scale.dim() == 2 && weight_scale.size(0) == bn && weight_scale.size(1) == bk;
  EMBER_CHECK(tensorwise || per_row || blocks, op,
              "weight_scale shape for a {}x{} weight: expected one element, [{}] or [{}, 1] (per row), or [{}, {}] (128x128 "
              "blocks), got {}", n, k, n, n, bn, bk, shape_str(weight_scale.sizes()));
  if (bias_t.defined()) {
    EMBER_CHECK(bias_t.dtype() == x.dtype(), op, "bias dtype: expected {} (x's dtype), got {}", name(x.dtype()), name(bias_t.dtype()));
    EMBER_CHECK(bias_t.dim() == 1 && bias_t.size(0) == n, op, "bias shape: expected [{}], got {}", n, shape_str(bias_t.sizes()));
  }
  std::vector<int64_t> out_shape = x.sizes();
  out_shape.back() = n;
  const int64_t m = k > 0 ? x.numel() / k : shape_numel(Shape(out_shape.begin(), out_shape.end() - 1));
  const Tensor rows = x.reshape({m, k});  // [M, K]
  Tensor out = empty({rows.size(0), n}, x.dtype(), x.device());
  if (out.numel() > 0 && k == 0) {  // an empty contraction: zeros, plus the bias
    ops::copy_into(bias_t.defined() ? bias_t.reshape({1, n}).expand(out.sizes()) : zeros(out.sizes(), x.dtype(), x.device()), out);
  } else if (out.numel() > 0) {
    // dequantize_fp8's layouts: [1], [N, 1] or the blocks, contiguous.
    const Tensor scale = (tensorwise ? weight_scale.reshape({1}) : per_row ? weight_scale.reshape({n, 1}) : weight_scale).contiguous();
    EMBER_DISPATCH(x.device(), fp8_linear, rows, weight, scale, bias_t.defined() ? bias_t.contiguous() : Tensor(), out);
  }
  return out.reshape(out_shape);
}

}  // namespace ember
