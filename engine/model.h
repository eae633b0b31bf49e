// The common interface of the decoder-only language models (qwen3_moe, qwen3, llama) and the
// factory that builds one from a checkpoint directory or from random weights.
//
//   auto model = load_model("Qwen3-30B-A3B", {.device = Device::cuda(), .dtype = kBFloat16});
//   Tensor logits = model->forward(ids /* [1, L] int64 */, 0);  // [1, L, V] float32, fills the KV cache
//   Tensor next = model->forward(one_id /* [1, 1] */, L);        // [1, 1, V] decodes one position
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/config.h"
#include "engine/kv_cache.h"
#include "ember/moe.h"
#include "ember/tensor.h"

namespace ember::engine {

struct ModelOptions {
  Device device = Device::cpu();
  /// The compute dtype: kFloat32, kBFloat16, kFloat16, or kFloat8_e4m3fn = fp8 weights for the
  /// linear layers and experts with bfloat16 activations (embeddings, norms, router, lm_head bf16).
  DType dtype = kFloat32;
  /// Positions the KV cache holds (prompt + generated tokens); 0 = min(config's
  /// max_position_embeddings, 4096).
  int64_t max_seq_len = 0;
  int64_t max_batch = 1;
};

/// The dtype activations (and non-linear weights) use for a compute dtype.
DType activation_dtype(DType compute);
/// "auto" resolved against a config: fp8 for an fp8 checkpoint, else the checkpoint's dtype.
DType resolve_dtype(const std::string& name, const ModelConfig& config);

/// Where a model's weights come from. The model asks for each tensor by its transformers name
/// together with the shape it expects; a checkpoint checks the shape, a random source makes it.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool contains(const std::string& name) const = 0;
  /// `name` [shape] as `dtype` on `device`.
  virtual Tensor tensor(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) = 0;
  /// The linear layer `prefix`.weight [out, in] (fp8 with its scale when dtype is fp8).
  virtual Weight linear(const std::string& prefix, int64_t out_features, int64_t in_features, Device device,
                        DType dtype) = 0;
  /// The stacked experts of `mlp_prefix`: gate_up [E, 2I, H], down [E, H, I].
  virtual MoeExperts experts(const std::string& mlp_prefix, int64_t num_experts, int64_t intermediate,
                             int64_t hidden, Device device, DType dtype) = 0;
};

/// Weights from a checkpoint directory (safetensors, sharded or not, experts stacked at load).
class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  bool contains(const std::string& name) const override { return checkpoint_.contains(name); }
  Tensor tensor(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) override;
  Weight linear(const std::string& prefix, int64_t out_features, int64_t in_features, Device device,
                DType dtype) override;
  MoeExperts experts(const std::string& mlp_prefix, int64_t num_experts, int64_t intermediate, int64_t hidden,
                     Device device, DType dtype) override;

 private:
  const Checkpoint& checkpoint_;
};

/// Random weights for benchmarks (no checkpoint needed): normal(0, 0.02) like transformers'
/// init, norm weights 1, biases 0; fp8 weights are quantized from those in 128x128 blocks.
/// Each tensor's numbers depend only on (seed, name), on every device.
class RandomWeights final : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed = 0) : seed_(seed) {}
  bool contains(const std::string&) const override { return true; }
  Tensor tensor(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) override;
  Weight linear(const std::string& prefix, int64_t out_features, int64_t in_features, Device device,
                DType dtype) override;
  MoeExperts experts(const std::string& mlp_prefix, int64_t num_experts, int64_t intermediate, int64_t hidden,
                     Device device, DType dtype) override;

 private:
  Tensor normal(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) const;
  uint64_t seed_;
};

class Model {
 public:
  Model(ModelConfig config, ModelOptions options);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  Device device() const { return options_.device; }
  int64_t max_seq_len() const { return options_.max_seq_len; }

  /// ids [B, L] int64 (any device) at positions start_pos .. start_pos + L - 1, attending to the
  /// cached positions before start_pos. Returns float32 logits [B, L, V] on the model's device,
  /// or [B, 1, V] for the last position only when last_only. The cache then holds positions
  /// [0, start_pos + L); start_pos may step back to reuse a prefix. Throws ember::Error when
  /// start_pos is past the cached positions or the sequence exceeds max_seq_len.
  Tensor forward(const Tensor& ids, int64_t start_pos, bool last_only = false);
  /// Forgets the cached positions.
  void reset() { cache_.set_filled(0); }
  /// Positions currently in the KV cache.
  int64_t cached_positions() const { return cache_.filled(); }

 protected:
  /// The architecture's forward: ids [B, L] int64 on the device -> hidden states [B, L, H]
  /// after the final norm.
  virtual Tensor hidden_states(const Tensor& ids, int64_t start_pos) = 0;
  /// The embeddings and lm_head every architecture shares (lm_head = embed_tokens when tied).
  void load_embeddings(WeightSource& weights);
  Tensor embed(const Tensor& ids) const;  // [B, L] -> [B, L, H]

  ModelConfig config_;
  ModelOptions options_;
  KvCache cache_;
  Tensor embed_tokens, lm_head;  // [V, H] each, in the activation dtype
};

/// Builds the architecture config.model_type names from `weights`. Throws ember::Error for an
/// unsupported model_type (listing the supported ones) or a weight of the wrong shape.
std::unique_ptr<Model> build_model(const ModelConfig& config, WeightSource& weights, const ModelOptions& options);

/// max_seq_len 0 resolved: min(config's max_position_embeddings, 4096).
int64_t resolve_max_seq_len(const ModelConfig& config, int64_t max_seq_len);

/// Reads `dir`'s config, plans memory (plan_memory; `on_plan` sees the plan first, e.g. to print
/// it) and refuses with both numbers when it does not fit (check_fits), then loads the weights,
/// reporting progress. options.dtype must be a resolved dtype (see resolve_dtype).
std::unique_ptr<Model> load_model(const std::string& dir, ModelOptions options, ProgressCallback progress = {},
                                  const std::function<void(const MemoryPlan&)>& on_plan = {});

/// A model of `config` with RandomWeights(seed) (no checkpoint: benchmarks of models too large to
/// download), planned and refused like load_model when it does not fit (config_weight_bytes).
std::unique_ptr<Model> random_model(const ModelConfig& config, ModelOptions options, uint64_t seed = 0,
                                    const std::function<void(const MemoryPlan&)>& on_plan = {});

namespace models {
// One file per architecture (engine/models/<model_type>.cpp) saying how it uses the shared
// decoder (engine/models/decoder.h).
std::unique_ptr<Model> qwen3_moe(const ModelConfig& config, WeightSource& weights, const ModelOptions& options);
std::unique_ptr<Model> qwen3(const ModelConfig& config, WeightSource& weights, const ModelOptions& options);
std::unique_ptr<Model> llama(const ModelConfig& config, WeightSource& weights, const ModelOptions& options);
}  // namespace models

/// The supported model_type values.
const std::vector<std::string>& supported_model_types();

}  // namespace ember::engine
