// Qwen3MoeForCausalLM (transformers models/qwen3_moe): grouped-query attention with QK-norm, and
// on the layers config.is_moe_layer names (all of them unless mlp_only_layers /
// decoder_sparse_step say otherwise) the sparse MoE block: softmax router, top-k of E SwiGLU
// experts (renormalised when norm_topk_prob), no shared expert; a dense SwiGLU MLP elsewhere.
// Qwen3-30B-A3B: H 2048, 48 layers, Hq 32, Hkv 4, D 128, E 128, top-8, I 768, untied lm_head.
#include "engine/models/decoder.h"

namespace ember::engine {

std::unique_ptr<Model> models::qwen3_moe(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  return decoder(config, weights, options, {.qk_norm = true});
}

}  // namespace ember::engine
