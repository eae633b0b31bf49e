#include "engine/layers.h"

#include <cmath>
#include <numbers>

#include "ember/ops.h"

namespace ember::engine {

Tensor RmsNorm::operator()(const Tensor& x) const {
  // One fused op (was 7 launches: cast, square, mean, add, rsqrt, product, cast, weight). It
  // rounds once, as torch's F.rms_norm does; transformers' module rounds x * rsqrt(var + eps)
  // to x's dtype before the weight product: identical in float32, within a bf16 ulp otherwise.
  return rms_norm(x, {x.size(-1)}, weight, eps);  // [..., N]; weight is loaded in the activation dtype
}

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  // float32 arithmetic in transformers' order, so the tables match its bit for bit or nearly.
  const int64_t dim = config.head_dim;
  const float base = static_cast<float>(config.rope_theta);
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  }
  if (!config.rope_llama3) return inv_freq;
  const RopeLlama3Scaling& s = *config.rope_llama3;
  const auto factor = static_cast<float>(s.factor), low = static_cast<float>(s.low_freq_factor),
             high = static_cast<float>(s.high_freq_factor);
  const auto old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  // torch evaluates scalar / tensor as reciprocal(tensor) * scalar.
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * static_cast<float>(2 * std::numbers::pi);
    if (wavelen > low_freq_wavelen) {
      f = f / factor;  // long wavelengths: interpolated by the full factor
    } else if (!(wavelen < high_freq_wavelen)) {
      const float smooth = ((1.0f / wavelen) * old_context - low) / (high - low);  // medium: blended
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
  return inv_freq;
}

Rope Rope::make(const ModelConfig& config, int64_t max_seq_len, DType dtype, Device device) {
  const std::vector<float> inv_freq = rope_inv_freq(config);
  const int64_t dim = config.head_dim, half = dim / 2;
  std::vector<float> cos_table(static_cast<size_t>(max_seq_len * dim)), sin_table(cos_table.size());
  for (int64_t pos = 0; pos < max_seq_len; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];
      for (int64_t j : {i, i + half}) {  // emb = cat(freqs, freqs)
        cos_table[pos * dim + j] = std::cos(angle);
        sin_table[pos * dim + j] = std::sin(angle);
      }
    }
  }
  return {tensor<float>(std::move(cos_table), {max_seq_len, dim}).to(device, dtype),
          tensor<float>(std::move(sin_table), {max_seq_len, dim}).to(device, dtype)};
}

Tensor Rope::operator()(const Tensor& x, int64_t start_pos) const {
  const int64_t length = x.size(2);
  const Tensor c = cos.narrow(0, start_pos, length), s = sin.narrow(0, start_pos, length);  // [L, D]
  return apply_rotary_emb(x, c, s);  // [B, heads, L, D]: x * c + rotate_half(x) * s, one launch
}

Tensor Linear::operator()(const Tensor& x) const {
  const std::optional<Tensor> b = bias.defined() ? std::optional<Tensor>(bias) : std::nullopt;
  const Tensor& w = weight.weight;
  return is_fp8(w.dtype()) ? fp8_linear(x, w, weight.scale, b)  // [..., N]: weight-only fp8, never dequantized
                           : linear(x, w, b);                   // [..., N]
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t start_pos) {
  const int64_t length = q.size(2), positions = k.size(2);
  if (length == 1 || start_pos == 0) {  // decode (sees everything), or prefill with L == S: torch's top-left rule
    return scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/length > 1, std::nullopt,
                                        /*enable_gqa=*/true);                                  // [B, Hq, L, D]
  }
  // A chunk after cached positions: query i sits at position start_pos + i and sees keys j <= start_pos + i.
  const Tensor key_pos = arange(0, static_cast<double>(positions), 1, kInt64, q.device()).view({1, positions});  // [1, S]
  const Tensor query_pos = arange(static_cast<double>(start_pos), static_cast<double>(start_pos + length), 1, kInt64,
                                  q.device()).view({length, 1});                               // [L, 1]
  return scaled_dot_product_attention(q, k, v, le(key_pos, query_pos), /*is_causal=*/false, std::nullopt,
                                      /*enable_gqa=*/true);                                    // [B, Hq, L, D]
}

Tensor Attention::operator()(const Tensor& x, const Rope& rope, KvCache& cache, int64_t layer, int64_t start_pos) const {
  const int64_t batch = x.size(0), length = x.size(1);
  Tensor q = q_proj(x).reshape({batch, length, num_heads, head_dim});         // [B, L, Hq, D]
  Tensor k = k_proj(x).reshape({batch, length, num_kv_heads, head_dim});      // [B, L, Hkv, D]
  const Tensor v = v_proj(x).reshape({batch, length, num_kv_heads, head_dim}).transpose(1, 2);  // [B, Hkv, L, D]
  if (q_norm) {
    q = (*q_norm)(q);                                                         // [B, L, Hq, D]
    k = (*k_norm)(k);                                                         // [B, L, Hkv, D]
  }
  q = rope(q.transpose(1, 2), start_pos);                                     // [B, Hq, L, D]
  k = rope(k.transpose(1, 2), start_pos);                                     // [B, Hkv, L, D]
  const auto [keys, values] = cache.update(layer, k, v, start_pos);          // [B, Hkv, S, D] each
  const Tensor out = causal_attention(q, keys, values, start_pos);           // [B, Hq, L, D]
  return o_proj(out.transpose(1, 2).reshape({batch, length, num_heads * head_dim}));  // [B, L, H]
}

Tensor DenseMlp::operator()(const Tensor& x) const {
  return down_proj(silu(gate_proj(x)) * up_proj(x));  // [B, L, I] -> [B, L, H]
}

Tensor MoeBlock::operator()(const Tensor& x) const {
  const int64_t hidden = x.size(-1);
  const Tensor tokens = x.reshape({-1, hidden});                       // [T, H], T = B*L
  return moe_layer(tokens, router, experts, options).view(x.sizes());  // [T, H] -> [B, L, H]
}

// ---- loading -------------------------------------------------------------------------------------

RmsNorm load_rms_norm(WeightSource& weights, const std::string& name, int64_t size, const ModelConfig& config,
                      const ModelOptions& options) {
  return {weights.tensor(name, {size}, options.device, activation_dtype(options.dtype)), config.rms_norm_eps};
}

Linear load_linear(WeightSource& weights, const std::string& prefix, int64_t out_features, int64_t in_features,
                   bool bias, const ModelOptions& options) {
  Linear layer{weights.linear(prefix, out_features, in_features, options.device, options.dtype), Tensor()};
  if (bias) layer.bias = weights.tensor(prefix + ".bias", {out_features}, options.device, activation_dtype(options.dtype));
  return layer;
}

Attention load_attention(WeightSource& weights, const std::string& prefix, const ModelConfig& config, bool qk_norm,
                         const ModelOptions& options) {
  const int64_t hidden = config.hidden_size, heads = config.num_attention_heads, kv_heads = config.num_key_value_heads,
                dim = config.head_dim;
  const bool bias = config.attention_bias;
  Attention attention{load_linear(weights, prefix + ".q_proj", heads * dim, hidden, bias, options),
                      load_linear(weights, prefix + ".k_proj", kv_heads * dim, hidden, bias, options),
                      load_linear(weights, prefix + ".v_proj", kv_heads * dim, hidden, bias, options),
                      load_linear(weights, prefix + ".o_proj", hidden, heads * dim, bias, options),
                      std::nullopt, std::nullopt, heads, kv_heads, dim};
  if (qk_norm) {
    attention.q_norm = load_rms_norm(weights, prefix + ".q_norm.weight", dim, config, options);
    attention.k_norm = load_rms_norm(weights, prefix + ".k_norm.weight", dim, config, options);
  }
  return attention;
}

DenseMlp load_dense_mlp(WeightSource& weights, const std::string& prefix, const ModelConfig& config,
                        const ModelOptions& options) {
  const int64_t hidden = config.hidden_size, inter = config.intermediate_size;
  return {load_linear(weights, prefix + ".gate_proj", inter, hidden, false, options),
          load_linear(weights, prefix + ".up_proj", inter, hidden, false, options),
          load_linear(weights, prefix + ".down_proj", hidden, inter, false, options)};
}

MoeBlock load_moe_block(WeightSource& weights, const std::string& prefix, const ModelConfig& config,
                        const ModelOptions& options) {
  MoeBlock block;
  block.router = weights.tensor(prefix + ".gate.weight", {config.num_experts, config.hidden_size}, options.device,
                                activation_dtype(options.dtype));
  block.experts = weights.experts(prefix, config.num_experts, config.moe_intermediate_size, config.hidden_size,
                                  options.device, options.dtype);
  block.options.route.top_k = config.num_experts_per_tok;
  block.options.route.scoring = MoeScoring::Softmax;
  block.options.route.norm_topk = config.norm_topk_prob;
  return block;
}

}  // namespace ember::engine
