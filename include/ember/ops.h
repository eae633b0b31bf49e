// Operations: plain free functions. Every op validates its inputs and throws ember::Error
// ("[op] what: expected A, got B") on bad input, then runs on the inputs' device. Inputs must
// share a device. Elementwise ops broadcast like torch and promote dtypes like torch
// (torch.result_type: dimensioned tensors > 0-dim tensors > Scalars, by category).
#pragma once
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "ember/tensor.h"

namespace ember {

// ---- elementwise, unary (float ops on integer inputs compute in float32, like torch) -------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);
/// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor tanh(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // half to even, like torch
Tensor trunc(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor logical_not(const Tensor& x);  // -> kBool

// ---- elementwise, binary (broadcasting, torch type promotion) ---------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN propagates
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, Scalar b);
/// Comparisons: exact for every integer width (uint64 above 2^63 included); result kBool.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
/// torch.heaviside: values where input == 0, 0 where input < 0, 1 where input > 0. Both inputs
/// must have the same dtype (torch refuses mixed dtypes); no float promotion.
Tensor heaviside(const Tensor& input, const Tensor& values);
/// torch.frexp: x = mantissa * 2^exponent, |mantissa| in [0.5, 1) or 0; (mantissa like x, exponent kInt32).
std::tuple<Tensor, Tensor> frexp(const Tensor& x);
namespace special {
/// Laguerre polynomial L_n(x) by the three-term recurrence; integer inputs promote to float.
Tensor laguerre_polynomial_l(const Tensor& x, const Tensor& n);
}  // namespace special

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi);
/// cond must be kBool; a and b broadcast and promote.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// Casts to a float8 type (or any float type) clamping out-of-range values, infinities included,
/// to its largest finite value (the saturating cast FP8 recipes use); NaN stays NaN. Plain casts
/// to float8_e4m3fn already saturate (torch 2.15's rule); for e5m2 and the 16-bit types a plain
/// cast overflows to inf and this one does not.
Tensor saturate_cast(const Tensor& x, DType dtype);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);

/// torch.result_type of two tensors / a tensor and a Scalar.
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar b);
/// The shape two shapes broadcast to; throws ember::Error naming both when they do not.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// ---- reductions (dims = {} reduces everything) -------------------------------------------------
/// sum: bool and integer inputs accumulate and return kInt64, like torch; dtype overrides.
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false,
           std::optional<DType> dtype = {});
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);  // float/complex only
Tensor prod(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);  // -> kBool
Tensor all(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);  // -> kBool
/// Index of the first maximum (NaN counts as the maximum, like torch); kInt64.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// (values, kInt64 indices). Ties: sorted=true orders by value then by index.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
/// (values, kInt64 indices); NaN sorts as the largest value, like torch.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
/// Integer inputs accumulate in kInt64 unless dtype says otherwise.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = {});
/// torch.histc: float input, `bins` equal bins over [min, max] (max included in the last bin),
/// values outside ignored; min == max == 0 uses the data's min and max (computed on the device).
Tensor histc(const Tensor& x, int64_t bins = 100, double min = 0, double max = 0);

// ---- indexing and joining ------------------------------------------------------------------------
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);   // index kInt64/kInt32, 1-D
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);         // index kInt64
/// Out of place torch.index_add: a copy of x with src's slices added at `index` along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Scalar alpha = 1);
/// torch.take: index into the flattened C-order input; negative indices wrap.
Tensor take(const Tensor& input, const Tensor& index);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- softmax family: float inputs; a fully -inf row gives NaN like torch ----------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- normalisation -----------------------------------------------------------------------------
/// torch.nn.functional.rms_norm: y = x * rsqrt(mean(x^2) + eps) * weight over the trailing dims
/// `normalized_shape`, computed in float (double for f64) and rounded once to x's dtype (as
/// torch 2.15 does; Hugging Face's RMSNorm modules round before the weight product). Float
/// types other than fp8; weight has x's dtype and normalized_shape's sizes; eps nullopt means
/// the machine epsilon of the compute type (float32's for f16/bf16/f32), like torch.
Tensor rms_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);

// ---- rotary position embedding -----------------------------------------------------------------
/// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]) (the Llama /
/// Qwen convention of transformers' apply_rotary_pos_emb). x [..., L, D] with D even; cos and
/// sin [L, D], broadcast over x's leading dims; one float dtype (not fp8). Each product and the
/// sum are rounded to that dtype, as the unfused expression is, so f16/bf16 results equal
/// transformers' bit for bit.
Tensor apply_rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin);

// ---- matrix products ---------------------------------------------------------------------------
/// torch.matmul rules (1-D promotion, batch broadcasting). Float types; f16/bf16 accumulate in f32.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);     // [M,K] @ [K,N]
Tensor bmm(const Tensor& a, const Tensor& b);    // [B,M,K] @ [B,K,N]
/// x @ weight^T + bias; x [..., K], weight [N, K], bias [N].
Tensor linear(const Tensor& x, const Tensor& weight, std::optional<Tensor> bias = {});

// ---- FP8 ---------------------------------------------------------------------------------------
/// How quantize_fp8 groups values under one scale.
enum class Fp8Granularity {
  Tensorwise,  // one scale: shape [] (numel 1)
  Rowwise,     // one scale per row of the last two dims: shape [..., M, 1]
  Block128,    // one scale per 128x128 block of the last two dims: [..., ceil(M/128), ceil(K/128)]
};
/// (q, scale) with x ~= q * scale: scale = amax(|x|) / max(dtype) per group (amax clamped to
/// 1e-12, the recipe FP8 checkpoints use), q = saturate_cast(x / scale). Float input; scale fp32.
std::tuple<Tensor, Tensor> quantize_fp8(const Tensor& x, Fp8Granularity granularity, DType dtype = kFloat8_e4m3fn);
/// q * scale as `out_dtype`, for any of the three scale layouts of quantize_fp8.
Tensor dequantize_fp8(const Tensor& q, const Tensor& scale, DType out_dtype = kFloat32);
/// torch._scaled_mm / F.scaled_mm: out = (a * scale_a) @ (b * scale_b) (+ bias), cast to out_dtype.
/// a [M, K] and b [K, N] fp8 (e4m3fn or e5m2; b is typically w.t() of a [N, K] weight);
/// scale_a / scale_b are fp32 DECODING scales: numel 1 each (tensorwise) or scale_a (M, 1) and
/// scale_b (1, N), contiguous (rowwise). bias [N] must have out_dtype (bf16 or f16 out) and is
/// refused for f32 or fp8 out. out_dtype: f32, f16, bf16 or e4m3fn (saturating). K == 0 gives zeros.
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 std::optional<Tensor> bias = {}, DType out_dtype = kBFloat16);
/// The same with torch's use_fast_accum: true lets the GPU add the products with less than f32
/// precision (cuBLASLt's fast accumulation; at M = 1, half2 sums of 8 products: ~4e-4 of max|out|
/// on random data). false is the call above. The CPU backend is always exact.
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 std::optional<Tensor> bias, DType out_dtype, bool use_fast_accum);
/// Weight-only FP8 linear, as FP8 checkpoints' projections are used: x @ (weight * weight_scale)^T
/// (+ bias), in x's dtype, the products summed in f32. x [..., K] f32/f16/bf16; weight [N, K]
/// float8_e4m3fn or float8_e5m2; weight_scale fp32 DECODING scales, numel 1 (tensorwise), [N] or
/// [N, 1] (one per output row), or [ceil(N/128), ceil(K/128)] (128x128 blocks, as checkpoints'
/// weight_scale_inv); bias [N] in x's dtype. The weight is never dequantized in memory on the GPU;
/// up to 8 rows of x (decode) take a GEMV kernel reading each weight byte once.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& weight_scale, std::optional<Tensor> bias = {});

// ---- attention ---------------------------------------------------------------------------------
/// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v.
/// q [..., Hq, L, E], k [..., Hk, S, E], v [..., Hv, S, Ev] (rank >= 2; a missing head dim counts
/// as one head). The leading (batch) dims broadcast among q, k and v; the head counts are equal
/// or 1 (broadcast), or, with enable_gqa, Hk and Hv divide Hq and each k/v head serves Hq/Hk
/// (Hq/Hv) consecutive q heads (torch's repeat_interleave). One float dtype for q, k, v (f16 and
/// bf16 accumulate in f32); the result [..., H, L, Ev] has q's dtype.
/// attn_mask: kBool (true = attend) or an additive float mask of q's dtype or float32, that
/// broadcasts to [..., H, L, S] without enlarging it. is_causal: query i attends keys j <= i
/// (torch's top-left tril(ones(L, S))); not allowed together with attn_mask. scale defaults to
/// 1/sqrt(E). A query row whose keys are all masked (false, -inf, or causal with S = 0) gives
/// zeros, what torch's fused kernels return (torch's math backend gives NaN).
/// On CUDA, E and Ev must be at most 256; any strides are read in place. The f16/bf16 prefill
/// kernel (tensor cores) rounds the probabilities to q's dtype before multiplying by v, as
/// FlashAttention does.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    std::optional<Tensor> attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = {}, bool enable_gqa = false);

}  // namespace ember
