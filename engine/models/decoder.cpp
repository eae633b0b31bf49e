#include "engine/models/decoder.h"

#include <optional>
#include <vector>

#include "ember/ops.h"
#include "engine/layers.h"

namespace ember::engine::models {

namespace {

struct DecoderLayer {
  RmsNorm input_layernorm, post_attention_layernorm;
  Attention self_attn;
  std::optional<MoeBlock> moe;  // the sparse block, or
  std::optional<DenseMlp> mlp;  // the dense MLP
};

class Decoder final : public Model {
 public:
  Decoder(const ModelConfig& config, WeightSource& weights, const ModelOptions& options, const DecoderSpec& spec)
      : Model(config, options) {
    load_embeddings(weights);
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      DecoderLayer layer{
          load_rms_norm(weights, prefix + ".input_layernorm.weight", config_.hidden_size, config_, options_),
          load_rms_norm(weights, prefix + ".post_attention_layernorm.weight", config_.hidden_size, config_, options_),
          load_attention(weights, prefix + ".self_attn", config_, spec.qk_norm, options_), std::nullopt, std::nullopt};
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
      const DecoderLayer& layer = layers_[i];
      const Tensor h = layer.input_layernorm(x);                                              // [B, L, H]
      x = x + layer.self_attn(h, rope_, cache_, static_cast<int64_t>(i), start_pos);          // [B, L, H]
      const Tensor g = layer.post_attention_layernorm(x);                                     // [B, L, H]
      x = x + (layer.moe ? (*layer.moe)(g) : (*layer.mlp)(g));                                // [B, L, H]
    }
    return norm_(x);                                                                          // [B, L, H]
  }

 private:
  std::vector<DecoderLayer> layers_;
  RmsNorm norm_;
  Rope rope_;
};

}  // namespace

std::unique_ptr<Model> decoder(const ModelConfig& config, WeightSource& weights, const ModelOptions& options,
                               const DecoderSpec& spec) {
  return std::make_unique<Decoder>(config, weights, options, spec);
}

}  // namespace ember::engine::models
