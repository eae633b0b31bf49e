// LlamaForCausalLM (transformers models/llama): grouped-query attention without QK-norm (RoPE
// with Llama-3 frequency scaling when rope_type is "llama3") and a dense SwiGLU MLP in every layer.
#include "engine/models/decoder.h"

namespace ember::engine {

std::unique_ptr<Model> models::llama(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  return decoder(config, weights, options, {.qk_norm = false});
}

}  // namespace ember::engine
