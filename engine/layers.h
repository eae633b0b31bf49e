// The building blocks of the decoder models, as transformers computes them: RMSNorm, rotary
// position embeddings (with Llama-3 frequency scaling), linear layers over engine::Weight (fp8
// weights included), grouped-query attention with optional QK-norm over a KV cache, the dense
// SwiGLU MLP and the mixture-of-experts block. Every block runs on the device of its weights.
//
// Shape letters: B batch, L new tokens, S attended positions (start_pos + L), H hidden size,
// Hq / Hkv query / key-value heads, D head_dim, I intermediate size, V vocabulary, E experts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/config.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "ember/moe.h"
#include "ember/tensor.h"

namespace ember::engine {

/// transformers' RMSNorm: computed in float32, x * rsqrt(mean(x^2) + eps), cast back to x's
/// dtype, then times the weight.
struct RmsNorm {
  Tensor weight;  // [N]
  double eps = 1e-6;
  Tensor operator()(const Tensor& x) const;  // [..., N] -> [..., N]
};

/// Rotary position embeddings, rotate_half convention: cos and sin tables for every position
/// up to max_seq_len, computed once (inv_freq = theta^(-2i/D) in float32, Llama-3 scaling when
/// configured) and kept in the compute dtype like transformers' cos.to(x.dtype).
struct Rope {
  Tensor cos, sin;  // [max_seq_len, D]
  static Rope make(const ModelConfig& config, int64_t max_seq_len, DType dtype, Device device);
  /// x [B, heads, L, D] at positions start_pos .. start_pos + L - 1.
  Tensor operator()(const Tensor& x, int64_t start_pos) const;
};

/// The inverse frequencies [D / 2] (float32 values), Llama-3 scaling applied when configured.
std::vector<float> rope_inv_freq(const ModelConfig& config);

/// x @ weight^T (+ bias). An fp8 weight is used weight-only: x stays in its dtype, the product
/// applies the weight's decoding scales (per tensor, per output channel or 128x128 blocks).
struct Linear {
  Weight weight;  // [N, K]
  Tensor bias;    // [N] or undefined
  Tensor operator()(const Tensor& x) const;  // [..., K] -> [..., N]
};

/// Grouped-query causal self-attention with the KV cache; QK-norm (Qwen3) when q_norm is set.
struct Attention {
  Linear q_proj, k_proj, v_proj, o_proj;
  std::optional<RmsNorm> q_norm, k_norm;  // over head_dim, before RoPE
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  /// x [B, L, H] at positions start_pos.. -> [B, L, H]; writes this layer's keys and values.
  Tensor operator()(const Tensor& x, const Rope& rope, KvCache& cache, int64_t layer, int64_t start_pos) const;
};

/// The dense SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct DenseMlp {
  Linear gate_proj, up_proj, down_proj;
  Tensor operator()(const Tensor& x) const;  // [B, L, H] -> [B, L, H]
};

/// The sparse MoE block (Qwen3-MoE): softmax router, top-k experts, renormalised weights when
/// norm_topk_prob, SwiGLU experts; one ember::moe_layer call.
struct MoeBlock {
  Tensor router;       // [E, H] in the activation dtype
  MoeExperts experts;  // gate_up [E, 2I, H], down [E, H, I]
  MoeLayerOptions options;
  Tensor operator()(const Tensor& x) const;  // [B, L, H] -> [B, L, H]
};

/// Scaled dot-product attention, causal over the cache (ember::scaled_dot_product_attention with
/// GQA): q [B, Hq, L, D] at positions start_pos.., k and v [B, Hkv, S, D] with S = start_pos + L
/// -> [B, Hq, L, D].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t start_pos);

// ---- loading: transformers' tensor names under `prefix`, shapes checked by the source ------------
RmsNorm load_rms_norm(WeightSource& weights, const std::string& name, int64_t size, const ModelConfig& config,
                      const ModelOptions& options);
Linear load_linear(WeightSource& weights, const std::string& prefix, int64_t out_features, int64_t in_features,
                   bool bias, const ModelOptions& options);
/// `prefix` = "model.layers.{i}.self_attn".
Attention load_attention(WeightSource& weights, const std::string& prefix, const ModelConfig& config, bool qk_norm,
                         const ModelOptions& options);
/// `prefix` = "model.layers.{i}.mlp".
DenseMlp load_dense_mlp(WeightSource& weights, const std::string& prefix, const ModelConfig& config,
                        const ModelOptions& options);
MoeBlock load_moe_block(WeightSource& weights, const std::string& prefix, const ModelConfig& config,
                        const ModelOptions& options);

}  // namespace ember::engine
