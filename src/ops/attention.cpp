// scaled_dot_product_attention: validation, batch and head broadcasting (enable_gqa aware), the
// mask broadcast to the score shape, then one backend call on 4-D [B, H, L, *] views.
//
// The batch dims of q, k and v are expanded to their common shape and flattened into one dim,
// which is a view for one batch dim (stride 0 where broadcast; a KV cache narrowed along S stays
// in place) and a copy only for several batch dims whose strides do not merge. Heads: q is
// expanded (stride 0) to H heads when it has one; k and v keep their head counts, which divide H,
// so the backend serves grouped heads (GQA) and broadcast heads (Hk = 1) the same way.
#include <algorithm>
#include <cmath>
#include <string>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

bool is_attention_float(DType d) { return d == kFloat32 || d == kFloat16 || d == kBFloat16 || d == kFloat64; }

/// x with size-1 dims in front up to `rank` dims.
Tensor left_pad(Tensor x, int64_t rank) {
  while (x.dim() < rank) x = x.unsqueeze(0);
  return x;
}

std::vector<int64_t> leading(const Tensor& x, int64_t n) { return {x.sizes().begin(), x.sizes().begin() + n}; }

/// The broadcast of three batch shapes of one rank; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast3(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                               const std::vector<int64_t>& c) {
  std::vector<int64_t> out(a.size(), 1);
  for (size_t i = 0; i < a.size(); ++i) {
    for (int64_t s : {a[i], b[i], c[i]}) {
      if (s == 1) continue;
      if (out[i] != 1 && out[i] != s) return std::nullopt;
      out[i] = s;
    }
  }
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<Tensor> attn_mask,
                                    bool is_causal, std::optional<double> scale, bool enable_gqa) {
  ops::check_defined(kOp, q, "query");
  ops::check_defined(kOp, k, "key");
  ops::check_defined(kOp, v, "value");
  const Tensor mask = attn_mask ? *attn_mask : Tensor();
  if (attn_mask) ops::check_defined(kOp, mask, "attn_mask");
  ops::check_same_device(kOp, {&q, &k, &v, &mask});
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp,
              "rank: expected query, key and value with at least 2 dims, got {}, {} and {}", q.dim(), k.dim(), v.dim());
  const DType dtype = q.dtype();
  EMBER_CHECK(is_attention_float(dtype), kOp, "query dtype: expected float16, bfloat16, float32 or float64, got {}", name(dtype));
  EMBER_CHECK(k.dtype() == dtype && v.dtype() == dtype, kOp, "dtype: expected key and value of query's dtype {}, got {} and {}",
              name(dtype), name(k.dtype()), name(v.dtype()));
  const int64_t E = q.size(-1), L = q.size(-2), S = k.size(-2), Ev = v.size(-1);
  EMBER_CHECK(k.size(-1) == E, kOp, "key head dim: expected {} (query's last dim), got {}", E, k.size(-1));
  EMBER_CHECK(v.size(-2) == S, kOp, "value sequence length: expected {} (key's dim -2), got {}", S, v.size(-2));

  // Everything at one rank R >= 3: batch dims [0, R - 3), heads at R - 3.
  const int64_t out_rank = std::max({q.dim(), k.dim(), v.dim()});
  const int64_t R = std::max<int64_t>(out_rank, 3);
  const Tensor qp = left_pad(q, R), kp = left_pad(k, R), vp = left_pad(v, R);
  const auto batch = broadcast3(leading(qp, R - 3), leading(kp, R - 3), leading(vp, R - 3));
  EMBER_CHECK(batch.has_value(), kOp, "batch dims: expected query, key and value batch shapes that broadcast, got {}, {} and {}",
              shape_str(leading(qp, R - 3)), shape_str(leading(kp, R - 3)), shape_str(leading(vp, R - 3)));
  const int64_t Hq = qp.size(R - 3), Hk = kp.size(R - 3), Hv = vp.size(R - 3);
  int64_t H = Hq;
  if (enable_gqa) {
    EMBER_CHECK(Hk > 0 && Hv > 0 && Hq % Hk == 0 && Hq % Hv == 0, kOp,
                "heads (enable_gqa): expected key and value head counts dividing the query's {}, got {} and {}", Hq, Hk, Hv);
  } else {
    const auto heads = broadcast3({Hq}, {Hk}, {Hv});
    EMBER_CHECK(heads.has_value(), kOp,
                "heads: expected query, key and value head counts equal or 1 (or enable_gqa with key and value heads "
                "dividing the query's), got {}, {} and {}",
                Hq, Hk, Hv);
    H = (*heads)[0];
  }

  std::vector<int64_t> score_shape = *batch;  // [batch..., H, L, S], then the output [..., Ev]
  score_shape.insert(score_shape.end(), {H, L, S});
  const auto drop = static_cast<std::ptrdiff_t>(R - out_rank);  // the padded head dim of 2-D inputs
  const std::vector<int64_t> user_scores(score_shape.begin() + drop, score_shape.end());
  if (mask.defined()) {
    EMBER_CHECK(!is_causal, kOp, "attn_mask: expected no attn_mask when is_causal is set, got a mask of shape {}",
                shape_str(mask.sizes()));
    const DType md = mask.dtype();
    EMBER_CHECK(md == kBool || md == kFloat32 || md == dtype, kOp, "attn_mask dtype: expected bool, float32 or {} (query's), got {}",
                name(dtype), name(md));
    bool broadcasts = mask.dim() <= static_cast<int64_t>(user_scores.size());
    for (int64_t i = 1; broadcasts && i <= mask.dim(); ++i) {
      const int64_t m = mask.size(-i), t = user_scores[user_scores.size() - static_cast<size_t>(i)];
      broadcasts = m == t || m == 1;
    }
    EMBER_CHECK(broadcasts, kOp, "attn_mask shape: expected a shape broadcastable to {}, got {}", shape_str(user_scores),
                shape_str(mask.sizes()));
  }

  std::vector<int64_t> out_shape(score_shape.begin() + drop, score_shape.end());
  out_shape.back() = Ev;
  if (shape_numel(out_shape) == 0) return empty(out_shape, dtype, q.device());
  if (S == 0) return zeros(out_shape, dtype, q.device());  // every row fully masked

  int64_t B = 1;
  for (int64_t s : *batch) B *= s;
  auto flat = [&](const Tensor& x, int64_t heads, int64_t rows) {
    std::vector<int64_t> sizes = *batch;
    sizes.insert(sizes.end(), {heads, rows, x.size(-1)});
    return x.expand(sizes).reshape({B, heads, rows, x.size(-1)});
  };
  const Tensor q4 = flat(qp, H, L), k4 = flat(kp, Hk, S), v4 = flat(vp, Hv, S);
  const Tensor mask4 = mask.defined() ? left_pad(mask, R).expand(score_shape).reshape({B, H, L, S}) : Tensor();
  // Every empty dot product is 0, whatever the scale (1/sqrt(0) = inf by default): torch's result.
  const double s = E == 0 ? 0.0 : scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));

  Tensor out = empty({B, H, L, Ev}, dtype, q.device());
  EMBER_DISPATCH(q.device(), scaled_dot_product_attention, q4, k4, v4, mask4, is_causal, s, out);
  return out.view(out_shape);
}

}  // namespace ember
