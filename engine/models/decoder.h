// The decoder-only transformer the supported architectures share: token embedding, then per
// layer pre-norm grouped-query attention over the KV cache and a pre-norm MLP (the sparse MoE
// block on the layers config.is_moe_layer names, a dense SwiGLU MLP elsewhere), each added to
// the residual stream, then the final norm (lm_head and logits: engine::Model). What differs
// between architectures is a DecoderSpec, given by each architecture's file.
#pragma once
#include <memory>

#include "engine/model.h"

namespace ember::engine::models {

struct DecoderSpec {
  bool qk_norm = false;  // RMSNorm over head_dim of q and k before RoPE (Qwen3)
};

std::unique_ptr<Model> decoder(const ModelConfig& config, WeightSource& weights, const ModelOptions& options,
                               const DecoderSpec& spec);

}  // namespace ember::engine::models
