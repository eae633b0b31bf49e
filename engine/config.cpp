#include "engine/config.h"

#include <algorithm>

namespace ember::engine {

bool ModelConfig::is_moe_layer(int64_t layer) const {
  const bool listed_dense = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return num_experts > 0 && !listed_dense && decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

}  // namespace ember::engine
