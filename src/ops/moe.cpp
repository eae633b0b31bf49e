// Mixture-of-experts front ends: grouped_mm and scaled_grouped_mm with torch._grouped_mm's
// validation (same checks in the same order, torch's wording), routing, permutation, and the
// fused layer. No device value is ever read here: shapes come from sizes only.
#include <string>

#include "ember/moe.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

constexpr const char* kGroupedMm = "grouped_mm";

bool is_gemm_float(DType d) { return d == kFloat32 || d == kFloat16 || d == kBFloat16; }

// torch's _check_valid_strides_and_return_transposed: row- or column-major in the last two dims,
// the other stride a multiple of 16 bytes.
void check_strides(const char* op, const Tensor& m, const char* what) {
  const int64_t end = m.dim() - 1;
  const int64_t stride_m = m.stride(end - 1), stride_n = m.stride(end);
  const int64_t size_m = m.size(end - 1), size_n = m.size(end);
  const auto alignment = static_cast<int64_t>(16 / m.itemsize());
  if (stride_n == 1 && stride_m >= std::max<int64_t>(1, size_n)) {
    EMBER_CHECK(stride_m % alignment == 0, op, "strides should be multiple of 16 bytes: expected {} row stride a multiple of {}, got {}",
                what, alignment, stride_m);
    return;
  }
  if (stride_m == 1 && stride_n >= std::max<int64_t>(1, size_m)) {
    EMBER_CHECK(stride_n % alignment == 0, op, "strides should be multiple of 16 bytes: expected {} column stride a multiple of {}, got {}",
                what, alignment, stride_n);
    return;
  }
  fail(op, "Invalid strides/sizes: expected {} row- or column-major in its last two dims, got strides {} for sizes {}", what,
       shape_str(m.strides()), shape_str(m.sizes()));
}

// Output of `sizes` with the last dim padded to 16 bytes (torch's empty_strided), as a view.
Tensor padded_output(std::vector<int64_t> sizes, DType dtype, Device device) {
  const auto alignment = static_cast<int64_t>(16 / itemsize(dtype));
  const int64_t last = sizes.back();
  std::vector<int64_t> alloc = sizes;
  alloc.back() = (last + alignment - 1) / alignment * alignment;
  return empty(alloc, dtype, device).narrow(-1, 0, last);
}

void check_offs(const char* op, const Tensor& offs) {
  EMBER_CHECK(offs.dim() == 1, op, "offs has to be 1D: expected 1 dim, got {}", offs.dim());
  EMBER_CHECK(offs.dtype() == kInt32, op, "Offsets have to be int32: expected int32 offs, got {}", name(offs.dtype()));
}

Tensor grouped_mm_impl(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs_opt, bool has_bias,
                       std::optional<DType> out_dtype) {
  const char* op = kGroupedMm;
  ops::check_defined(op, a, "mat_a");
  ops::check_defined(op, b, "mat_b");
  EMBER_CHECK(is_gemm_float(a.dtype()), op, "Expected mat_a to be Float32, BFloat16 or Float16 matrix: expected one of those, got {}",
              name(a.dtype()));
  EMBER_CHECK(is_gemm_float(b.dtype()), op, "Expected mat_b to be Float32, BFloat16 or Float16 matrix: expected one of those, got {}",
              name(b.dtype()));
  EMBER_CHECK(a.dim() == 2 || a.dim() == 3, op, "mat_a has to be 2 or 3d: expected 2 or 3 dims, got {}", a.dim());
  EMBER_CHECK(b.dim() == 2 || b.dim() == 3, op, "mat_b has to be 2 or 3d: expected 2 or 3 dims, got {}", b.dim());
  EMBER_CHECK(a.dtype() == b.dtype(), op, "Expected mat_a and mat_b to have the same dtype: expected {}, got {}", name(a.dtype()),
              name(b.dtype()));
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  const int64_t ka = a.size(-1), kb = b2 && a2 ? b.size(0) : b.size(-2);
  EMBER_CHECK(ka == kb, op, "contraction dimension of mat_a and mat_b must match: expected {}, got {}", ka, kb);
  const Tensor offs_t = offs_opt.value_or(Tensor());
  ops::check_same_device(op, {&a, &b, &offs_t});
  check_strides(op, a, "mat_a");
  check_strides(op, b, "mat_b");
  EMBER_CHECK(offs_t.defined() == (a2 || b2), op,
              "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d: expected {}, got {}",
              a2 || b2 ? "offs" : "no offs", offs_t.defined() ? "offs" : "none");
  if (offs_t.defined()) check_offs(op, offs_t);
  EMBER_CHECK(!has_bias, op, "Bias not supported yet: expected no bias, got {}", "a bias");
  const DType out_type = out_dtype.value_or(a.dtype());
  EMBER_CHECK(out_type == a.dtype(), op, "Grouped gemm output dtype must match `mat_a` dtype: expected {}, got {}", name(a.dtype()),
              name(out_type));
  std::vector<int64_t> sizes;
  if (a2 && b2) {
    sizes = {offs_t.size(0), a.size(0), b.size(1)};
  } else if (a2) {
    EMBER_CHECK(offs_t.size(0) == b.size(0), op, "matrix batch sizes have to match: expected {} offsets, got {}", b.size(0),
                offs_t.size(0));
    sizes = {a.size(0), b.size(-1)};
  } else if (b2) {
    EMBER_CHECK(offs_t.size(0) == a.size(0), op, "matrix batch sizes have to match: expected {} offsets, got {}", a.size(0),
                offs_t.size(0));
    sizes = {a.size(1), b.size(1)};
  } else {
    EMBER_CHECK(a.size(0) == b.size(0), op, "batched dimension has to match: expected {}, got {}", a.size(0), b.size(0));
    sizes = {a.size(0), a.size(1), b.size(-1)};
  }
  Tensor out = padded_output(sizes, out_type, a.device());
  if (out.numel() == 0) return out;
  if (ka == 0) {  // empty contraction: zeros everywhere a group writes (torch zero-fills the output)
    EMBER_DISPATCH(out.device(), fill, out, Scalar(0));
    return out;
  }
  EMBER_DISPATCH(a.device(), grouped_mm, a, b, offs_t, out);
  return out;
}

// scale_b as [G, R, C]: [G] / [G, 1, 1] tensorwise, [G, N] / [G, N, 1] per output channel,
// [G, ceil(N/128), ceil(K/128)] blocks. Returns a view; throws naming the accepted layouts.
Tensor normalized_weight_scale(const char* op, const Tensor& scale, int64_t g, int64_t n, int64_t k) {
  EMBER_CHECK(scale.dtype() == kFloat32, op, "weight scale dtype: expected float32, got {}", name(scale.dtype()));
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
  if (scale.dim() == 1 && scale.size(0) == g) return scale.view({g, 1, 1});
  if (scale.dim() == 2 && scale.size(0) == g && scale.size(1) == n) return scale.unsqueeze(2);
  if (scale.dim() == 3 && scale.size(0) == g) {
    const int64_t r = scale.size(1), c = scale.size(2);
    if ((r == 1 && c == 1) || (r == n && c == 1) || (r == nb && c == kb)) return scale;
  }
  fail(op, "weight scale shape for {} experts of [{}, {}]: expected [{}] (tensorwise), [{}, {}] (per channel) or [{}, {}, {}] "
       "(128x128 blocks), got {}", g, n, k, g, g, n, g, nb, kb, shape_str(scale.sizes()));
}

void check_weight(const char* op, const Tensor& w, const char* what, int64_t e, int64_t rows, int64_t cols) {
  ops::check_defined(op, w, what);
  EMBER_CHECK(w.dim() == 3 && w.size(0) == e && w.size(1) == rows && w.size(2) == cols, op, "{} shape: expected [{}, {}, {}], got {}",
              what, e, rows, cols, shape_str(w.sizes()));
  EMBER_CHECK(w.stride(2) == 1, op, "{} layout: expected unit stride along its last dim, got strides {}", what,
              shape_str(w.strides()));
}

}  // namespace

Tensor grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> offs, std::optional<DType> out_dtype) {
  return grouped_mm_impl(a, b, offs, false, out_dtype);
}

Tensor grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> offs, std::optional<Tensor> bias,
                  std::optional<DType> out_dtype) {
  return grouped_mm_impl(a, b, offs, bias.has_value() && bias->defined(), out_dtype);
}

Tensor scaled_grouped_mm(const Tensor& a, const Tensor& b, std::optional<Tensor> scale_a, const Tensor& scale_b,
                         const Tensor& offs, DType out_dtype) {
  const char* op = "scaled_grouped_mm";
  ops::check_defined(op, a, "mat_a");
  ops::check_defined(op, b, "mat_b");
  ops::check_defined(op, offs, "offs");
  const Tensor sa = scale_a.value_or(Tensor());
  ops::check_same_device(op, {&a, &b, &sa, &scale_b, &offs});
  EMBER_CHECK(a.dim() == 2 && b.dim() == 3, op, "operand ranks: expected mat_a 2-D and mat_b 3-D, got {} and {}", a.dim(), b.dim());
  EMBER_CHECK(b.dtype() == kFloat8_e4m3fn, op, "mat_b dtype: expected float8_e4m3fn, got {}", name(b.dtype()));
  const int64_t t = a.size(0), k = a.size(1), g = b.size(0), n = b.size(2);
  EMBER_CHECK(b.size(1) == k, op, "contraction dimension of mat_a and mat_b must match: expected {}, got {}", k, b.size(1));
  if (a.dtype() == kFloat8_e4m3fn) {
    EMBER_CHECK(sa.defined() && sa.dtype() == kFloat32 && (sa.numel() == 1 || (sa.dim() == 1 && sa.size(0) == t)), op,
                "scale_a for a float8 mat_a: expected float32 with 1 or {} elements, got {}", t,
                sa.defined() ? shape_str(sa.sizes()) + " " + std::string(name(sa.dtype())) : std::string("none"));
  } else {
    EMBER_CHECK(is_gemm_float(a.dtype()), op, "mat_a dtype: expected float8_e4m3fn, float32, float16 or bfloat16, got {}",
                name(a.dtype()));
    EMBER_CHECK(!sa.defined(), op, "scale_a with a {} mat_a: expected none (weight-only FP8), got a scale", name(a.dtype()));
  }
  check_strides(op, a, "mat_a");
  check_strides(op, b, "mat_b");
  check_offs(op, offs);
  EMBER_CHECK(offs.size(0) == g, op, "matrix batch sizes have to match: expected {} offsets, got {}", g, offs.size(0));
  EMBER_CHECK(is_gemm_float(out_dtype), op, "out_dtype: expected float32, float16 or bfloat16, got {}", name(out_dtype));
  const Tensor sb = normalized_weight_scale(op, scale_b, g, n, k);
  Tensor out = padded_output({t, n}, out_dtype, a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    EMBER_DISPATCH(out.device(), fill, out, Scalar(0));
    return out;
  }
  const Tensor sa_flat = sa.defined() ? sa.reshape({-1}) : Tensor();
  EMBER_DISPATCH(a.device(), scaled_grouped_mm, a, b, sa_flat, sb, offs, out);
  return out;
}

std::tuple<Tensor, Tensor> moe_route(const Tensor& logits, const MoeRouteOptions& options) {
  const char* op = "moe_route";
  ops::check_defined(op, logits, "logits");
  EMBER_CHECK(logits.dim() == 2, op, "logits shape: expected [tokens, experts], got {}", shape_str(logits.sizes()));
  EMBER_CHECK(is_floating_point(logits.dtype()) && !is_fp8(logits.dtype()), op,
              "logits dtype: expected float16, bfloat16, float32 or float64, got {}", name(logits.dtype()));
  const int64_t t = logits.size(0), e = logits.size(1), k = options.top_k;
  EMBER_CHECK(e >= 1 && e <= 1024, op, "number of experts: expected 1 to 1024, got {}", e);
  EMBER_CHECK(k >= 1 && k <= std::min<int64_t>(e, 32), op, "top_k: expected 1 to {}, got {}", std::min<int64_t>(e, 32), k);
  const Tensor bias = options.expert_bias.value_or(Tensor());
  ops::check_same_device(op, {&logits, &bias});
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == e && is_floating_point(bias.dtype()) && !is_fp8(bias.dtype()), op,
                "expert_bias: expected a float tensor of shape [{}], got {} {}", e, shape_str(bias.sizes()), name(bias.dtype()));
  }
  Tensor weights = empty({t, k}, kFloat32, logits.device());
  Tensor ids = empty({t, k}, kInt32, logits.device());
  if (t == 0) return {weights, ids};
  EMBER_DISPATCH(logits.device(), moe_route, logits, bias, options, weights, ids);
  return {weights, ids};
}

MoePermutation moe_permute(const Tensor& expert_ids, int64_t num_experts) {
  const char* op = "moe_permute";
  ops::check_defined(op, expert_ids, "expert_ids");
  EMBER_CHECK(expert_ids.dim() == 2, op, "expert_ids shape: expected [tokens, top_k], got {}", shape_str(expert_ids.sizes()));
  EMBER_CHECK(expert_ids.dtype() == kInt32 || expert_ids.dtype() == kInt64, op, "expert_ids dtype: expected int32 or int64, got {}",
              name(expert_ids.dtype()));
  EMBER_CHECK(num_experts >= 1 && num_experts <= 1024, op, "num_experts: expected 1 to 1024, got {}", num_experts);
  const int64_t m = expert_ids.numel();
  EMBER_CHECK(m < (int64_t{1} << 31), op, "number of (token, slot) pairs: expected below 2^31, got {}", m);
  const Device d = expert_ids.device();
  MoePermutation p{empty({m}, kInt32, d), empty({m}, kInt32, d), empty({m}, kInt32, d), empty({num_experts}, kInt32, d),
                   empty({num_experts}, kInt32, d)};
  EMBER_DISPATCH(d, moe_permute, expert_ids, p.order, p.inverse, p.tokens, p.counts, p.offsets);
  return p;
}

Tensor moe_unpermute(const Tensor& y, const Tensor& inverse, const Tensor& weights) {
  const char* op = "moe_unpermute";
  ops::check_defined(op, y, "y");
  ops::check_defined(op, inverse, "inverse");
  ops::check_defined(op, weights, "weights");
  ops::check_same_device(op, {&y, &inverse, &weights});
  EMBER_CHECK(y.dim() == 2 && is_gemm_float(y.dtype()), op, "y: expected a [pairs, hidden] float32/float16/bfloat16 matrix, got {} {}",
              shape_str(y.sizes()), name(y.dtype()));
  EMBER_CHECK(weights.dim() == 2 && is_floating_point(weights.dtype()) && !is_fp8(weights.dtype()), op,
              "weights: expected a [tokens, top_k] float matrix, got {} {}", shape_str(weights.sizes()), name(weights.dtype()));
  const int64_t t = weights.size(0), k = weights.size(1);
  EMBER_CHECK(inverse.dim() == 1 && inverse.dtype() == kInt32 && inverse.size(0) == t * k, op,
              "inverse: expected int32 of shape [{}], got {} {}", t * k, shape_str(inverse.sizes()), name(inverse.dtype()));
  EMBER_CHECK(y.size(0) == t * k, op, "y rows: expected {} (tokens x top_k), got {}", t * k, y.size(0));
  Tensor out = empty({t, y.size(1)}, y.dtype(), y.device());
  if (out.numel() == 0) return out;
  EMBER_DISPATCH(y.device(), moe_unpermute, y, inverse, weights, out);
  return out;
}

Tensor moe_layer(const Tensor& x, const Tensor& router_weight, const MoeExperts& experts, const MoeLayerOptions& options) {
  const char* op = "moe_layer";
  ops::check_defined(op, x, "x");
  ops::check_defined(op, router_weight, "router_weight");
  EMBER_CHECK(x.dim() == 2 && is_gemm_float(x.dtype()), op, "x: expected a [tokens, hidden] float32/float16/bfloat16 matrix, got {} {}",
              shape_str(x.sizes()), name(x.dtype()));
  EMBER_CHECK(x.stride(1) == 1, op, "x layout: expected unit stride along hidden, got strides {}", shape_str(x.strides()));
  const int64_t t = x.size(0), h = x.size(1);
  EMBER_CHECK(router_weight.dim() == 2 && router_weight.size(1) == h && router_weight.dtype() == x.dtype(), op,
              "router_weight: expected [experts, {}] {}, got {} {}", h, name(x.dtype()), shape_str(router_weight.sizes()),
              name(router_weight.dtype()));
  EMBER_CHECK(router_weight.stride(1) == 1, op, "router_weight layout: expected unit stride along hidden, got strides {}",
              shape_str(router_weight.strides()));
  const int64_t e = router_weight.size(0), k = options.route.top_k;
  EMBER_CHECK(e >= 1 && e <= 1024, op, "number of experts: expected 1 to 1024, got {}", e);
  EMBER_CHECK(k >= 1 && k <= std::min<int64_t>(e, 32), op, "top_k: expected 1 to {}, got {}", std::min<int64_t>(e, 32), k);
  const Tensor bias = options.route.expert_bias.value_or(Tensor());
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == e && is_floating_point(bias.dtype()) && !is_fp8(bias.dtype()), op,
                "expert_bias: expected a float tensor of shape [{}], got {} {}", e, shape_str(bias.sizes()), name(bias.dtype()));
  }
  ops::check_defined(op, experts.down, "down");
  EMBER_CHECK(experts.down.dim() == 3, op, "down shape: expected [{}, {}, intermediate], got {}", e, h, shape_str(experts.down.sizes()));
  const int64_t inter = experts.down.size(2);
  EMBER_CHECK(inter >= 1, op, "intermediate size: expected at least 1, got {}", inter);
  MoeExperts w;
  const bool merged = experts.gate_up.defined();
  EMBER_CHECK(merged != (experts.gate.defined() || experts.up.defined()), op,
              "expert weights: expected gate_up, or gate and up, got {}", merged ? "gate_up and gate/up" : "neither");
  if (merged) {
    check_weight(op, experts.gate_up, "gate_up", e, 2 * inter, h);
    w.gate_up = experts.gate_up;  // kept beside its halves: a backend may run gate and up as one product
    w.gate = experts.gate_up.narrow(1, 0, inter);
    w.up = experts.gate_up.narrow(1, inter, inter);
  } else {
    check_weight(op, experts.gate, "gate", e, inter, h);
    check_weight(op, experts.up, "up", e, inter, h);
    w.gate = experts.gate;
    w.up = experts.up;
  }
  check_weight(op, experts.down, "down", e, h, inter);
  w.down = experts.down;
  const DType wd = w.gate.dtype();
  EMBER_CHECK(wd == x.dtype() || wd == kFloat8_e4m3fn, op, "expert weight dtype: expected {} or float8_e4m3fn, got {}", name(x.dtype()),
              name(wd));
  EMBER_CHECK(w.up.dtype() == wd && w.down.dtype() == wd, op, "expert weight dtypes: expected all {}, got up {} and down {}", name(wd),
              name(w.up.dtype()), name(w.down.dtype()));
  if (wd == kFloat8_e4m3fn) {
    if (merged) {
      ops::check_defined(op, experts.gate_up_scale, "gate_up_scale");
      const Tensor s = normalized_weight_scale(op, experts.gate_up_scale, e, 2 * inter, h);
      w.gate_up_scale = s;
      const int64_t r = s.size(1);
      if (r == 1) {
        w.gate_scale = w.up_scale = s;
      } else if (r == 2 * inter) {
        w.gate_scale = s.narrow(1, 0, inter);
        w.up_scale = s.narrow(1, inter, inter);
      } else {
        EMBER_CHECK(inter % 128 == 0, op, "block scales of a merged gate_up: expected an intermediate size divisible by 128, got {}",
                    inter);
        w.gate_scale = s.narrow(1, 0, inter / 128);
        w.up_scale = s.narrow(1, inter / 128, inter / 128);
      }
    } else {
      ops::check_defined(op, experts.gate_scale, "gate_scale");
      ops::check_defined(op, experts.up_scale, "up_scale");
      w.gate_scale = normalized_weight_scale(op, experts.gate_scale, e, inter, h);
      w.up_scale = normalized_weight_scale(op, experts.up_scale, e, inter, h);
    }
    ops::check_defined(op, experts.down_scale, "down_scale");
    w.down_scale = normalized_weight_scale(op, experts.down_scale, e, h, inter);
  }
  MoeLayerOptions opts = options;
  if (options.shared) {
    const MoeSharedExpert& s = *options.shared;
    ops::check_defined(op, s.gate_up, "shared gate_up");
    ops::check_defined(op, s.down, "shared down");
    EMBER_CHECK(s.down.dim() == 2 && s.down.size(0) == h && s.down.size(1) >= 1, op, "shared down shape: expected [{}, Is], got {}", h,
                shape_str(s.down.sizes()));
    const int64_t is = s.down.size(1);
    EMBER_CHECK(s.gate_up.dim() == 2 && s.gate_up.size(0) == 2 * is && s.gate_up.size(1) == h, op,
                "shared gate_up shape: expected [{}, {}], got {}", 2 * is, h, shape_str(s.gate_up.sizes()));
    for (const Tensor* p : {&s.gate_up, &s.down, &s.gate}) {
      if (!p->defined()) continue;
      EMBER_CHECK(p->dtype() == x.dtype() && p->stride(-1) == 1, op, "shared expert weights: expected {} with unit stride along the last dim, got {} strides {}",
                  name(x.dtype()), name(p->dtype()), shape_str(p->strides()));
    }
    if (s.gate.defined()) {
      EMBER_CHECK(s.gate.numel() == h && s.gate.dim() == 2 && s.gate.size(0) == 1, op, "shared expert gate shape: expected [1, {}], got {}",
                  h, shape_str(s.gate.sizes()));
    }
  }
  ops::check_same_device(op, {&x, &w.gate, &w.up, &w.down, &w.gate_scale, &w.up_scale, &w.down_scale, &router_weight, &bias});
  if (options.shared) {
    for (const Tensor* p : {&options.shared->gate_up, &options.shared->down, &options.shared->gate}) ops::check_same_device(op, {&x, p});
  }
  Tensor out = empty({t, h}, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  EMBER_DISPATCH(x.device(), moe_layer, x, router_weight, w, opts, out);
  return out;
}

Tensor moe_layer(const Tensor& x, const Tensor& router_weight, const Tensor& gate_up, const Tensor& down,
                 const MoeLayerOptions& options) {
  MoeExperts experts;
  experts.gate_up = gate_up;
  experts.down = down;
  return moe_layer(x, router_weight, experts, options);
}

}  // namespace ember
