// A model's config.json and generation_config.json, read with the aliases seen on the hub:
// num_experts / num_local_experts, rope_theta / rope_parameters.rope_theta, torch_dtype / dtype,
// eos_token_id int or list, head_dim absent (hidden / heads), mlp_only_layers and
// decoder_sparse_step, quantization_config (fp8, weight_block_size).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember/dtype.h"

namespace ember::engine {

/// Llama-3 style RoPE frequency scaling (rope_scaling / rope_parameters with rope_type "llama3").
struct RopeLlama3Scaling {
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "qwen3_moe", "qwen3" or "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // = num_attention_heads when absent
  int64_t head_dim = 0;             // = hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  std::optional<RopeLlama3Scaling> rope_llama3;
  bool attention_bias = false;
  bool tie_word_embeddings = false;
  DType dtype = kFloat32;  // torch_dtype / dtype of the checkpoint's floating tensors

  // Mixture of experts (qwen3_moe); num_experts == 0 for dense models.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;  // read as false when config.json omits it (Qwen3MoeConfig's default)
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // every id that ends generation

  // quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128]}.
  bool fp8 = false;
  std::vector<int64_t> fp8_block_size;  // empty: per-tensor or per-channel scales

  /// True for layers whose MLP is the mixture of experts (transformers' rule: num_experts > 0,
  /// layer not in mlp_only_layers, (layer + 1) % decoder_sparse_step == 0).
  bool is_moe_layer(int64_t layer) const;
};

/// Sampling defaults from generation_config.json (absent file or keys: unset).
struct GenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::vector<int64_t> eos_token_ids;  // overrides the config's when present
};

/// Reads `dir`/config.json; throws ember::Error naming the file and the key on anything missing,
/// of the wrong type or unsupported (an unknown model_type lists the supported ones).
ModelConfig load_model_config(const std::string& dir);
/// Reads `dir`/generation_config.json if present.
GenerationDefaults load_generation_defaults(const std::string& dir);

}  // namespace ember::engine
