// Qwen3ForCausalLM (transformers models/qwen3): grouped-query attention with QK-norm (RMSNorm
// over head_dim of q and k before RoPE, optional q/k/v/o biases) and a dense SwiGLU MLP in every
// layer (num_experts is 0). Small Qwen3 models tie lm_head to embed_tokens.
#include "engine/models/decoder.h"

namespace ember::engine {

std::unique_ptr<Model> models::qwen3(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  return decoder(config, weights, options, {.qk_norm = true});
}

}  // namespace ember::engine
