// Qwen3ForCausalLM (transformers models/qwen3): pre-norm decoder layers of grouped-query
// attention with QK-norm (RMSNorm over head_dim of q and k before RoPE, optional q/k/v/o
// biases) and a dense SwiGLU MLP. Small Qwen3 models tie lm_head to embed_tokens.
#include <vector>

#include "ember/ops.h"
#include "engine/layers.h"
#include "engine/model.h"

namespace ember::engine {

namespace {

struct Qwen3DecoderLayer {
  RmsNorm input_layernorm, post_attention_layernorm;
  Attention self_attn;
  DenseMlp mlp;
};

class Qwen3 final : public Model {
 public:
  Qwen3(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) : Model(config, options) {
    load_embeddings(weights);
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      layers_.push_back(
          {load_rms_norm(weights, prefix + ".input_layernorm.weight", config_.hidden_size, config_, options_),
           load_rms_norm(weights, prefix + ".post_attention_layernorm.weight", config_.hidden_size, config_, options_),
           load_attention(weights, prefix + ".self_attn", config_, /*qk_norm=*/true, options_),
           load_dense_mlp(weights, prefix + ".mlp", config_, options_)});
    }
    norm_ = load_rms_norm(weights, "model.norm.weight", config_.hidden_size, config_, options_);
    rope_ = Rope::make(config_, options_.max_seq_len, activation_dtype(options_.dtype), options_.device);
  }

 protected:
  Tensor hidden_states(const Tensor& ids, int64_t start_pos) override {
    Tensor x = embed(ids);                                                                    // [B, L, H]
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Qwen3DecoderLayer& layer = layers_[i];
      const Tensor h = layer.input_layernorm(x);                                              // [B, L, H]
      x = x + layer.self_attn(h, rope_, cache_, static_cast<int64_t>(i), start_pos);          // [B, L, H]
      x = x + layer.mlp(layer.post_attention_layernorm(x));                                   // [B, L, H]
    }
    return norm_(x);                                                                          // [B, L, H]
  }

 private:
  std::vector<Qwen3DecoderLayer> layers_;
  RmsNorm norm_;
  Rope rope_;
};

}  // namespace

std::unique_ptr<Model> models::qwen3(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  return std::make_unique<Qwen3>(config, weights, options);
}

}  // namespace ember::engine
