// Qwen3MoeForCausalLM (transformers models/qwen3_moe): pre-norm decoder layers of grouped-query
// attention with QK-norm, then either the sparse MoE block (softmax router, top-k of E experts,
// SwiGLU experts) or, for layers in mlp_only_layers / off the decoder_sparse_step grid, a dense
// SwiGLU MLP. Qwen3-30B-A3B: H 2048, 48 layers, Hq 32, Hkv 4, D 128, E 128, top-8, I 768.
#include <optional>
#include <vector>

#include "ember/ops.h"
#include "engine/layers.h"
#include "engine/model.h"

namespace ember::engine {

namespace {

struct Qwen3MoeDecoderLayer {
  RmsNorm input_layernorm, post_attention_layernorm;
  Attention self_attn;
  std::optional<MoeBlock> moe;  // the sparse block, or
  std::optional<DenseMlp> mlp;  // the dense MLP
};

class Qwen3Moe final : public Model {
 public:
  Qwen3Moe(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) : Model(config, options) {
    load_embeddings(weights);
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      Qwen3MoeDecoderLayer layer{
          load_rms_norm(weights, prefix + ".input_layernorm.weight", config_.hidden_size, config_, options_),
          load_rms_norm(weights, prefix + ".post_attention_layernorm.weight", config_.hidden_size, config_, options_),
          load_attention(weights, prefix + ".self_attn", config_, /*qk_norm=*/true, options_), std::nullopt,
          std::nullopt};
      if (config_.is_moe_layer(i)) {
        layer.moe = load_moe_block(weights, prefix + ".mlp", config_, options_);
      } else {
        layer.mlp = load_dense_mlp(weights, prefix + ".mlp", config_, options_);
      }
      layers_.push_back(std::move(layer));
    }
    norm_ = load_rms_norm(weights, "model.norm.weight", config_.hidden_size, config_, options_);
    rope_ = Rope::make(config_, options_.max_seq_len, activation_dtype(options_.dtype), options_.device);
  }

 protected:
  Tensor hidden_states(const Tensor& ids, int64_t start_pos) override {
    Tensor x = embed(ids);                                                                    // [B, L, H]
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Qwen3MoeDecoderLayer& layer = layers_[i];
      const Tensor h = layer.input_layernorm(x);                                              // [B, L, H]
      x = x + layer.self_attn(h, rope_, cache_, static_cast<int64_t>(i), start_pos);          // [B, L, H]
      const Tensor g = layer.post_attention_layernorm(x);                                     // [B, L, H]
      x = x + (layer.moe ? (*layer.moe)(g) : (*layer.mlp)(g));                                // [B, L, H]
    }
    return norm_(x);                                                                          // [B, L, H]
  }

 private:
  std::vector<Qwen3MoeDecoderLayer> layers_;
  RmsNorm norm_;
  Rope rope_;
};

}  // namespace

std::unique_ptr<Model> models::qwen3_moe(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  return std::make_unique<Qwen3Moe>(config, weights, options);
}

}  // namespace ember::engine
