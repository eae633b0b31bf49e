#include "engine/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ember/ops.h"

namespace ember::engine {

namespace {

constexpr int64_t kDefaultMaxSeqLen = 4096;
constexpr double kInitStd = 0.02;  // transformers' initializer_range default

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

void check_shape(const std::string& name, const Tensor& t, const std::vector<int64_t>& expected) {
  EMBER_CHECK(t.sizes() == expected, "load_model", "shape of {}: expected {} from config.json, got {}", name,
              shape_text(expected), shape_text(t.sizes()));
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// FNV-1a: a stable 64-bit hash, so a tensor's random numbers depend on its name alone.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

DType activation_dtype(DType compute) { return compute == kFloat8_e4m3fn ? kBFloat16 : compute; }

DType resolve_dtype(const std::string& dtype_name, const ModelConfig& config) {
  if (dtype_name == "auto") {
    if (config.fp8) return kFloat8_e4m3fn;
    return config.dtype == kFloat32 || config.dtype == kFloat16 ? config.dtype : kBFloat16;
  }
  if (dtype_name == "f32" || dtype_name == "float32") return kFloat32;
  if (dtype_name == "bf16" || dtype_name == "bfloat16") return kBFloat16;
  if (dtype_name == "f16" || dtype_name == "float16") return kFloat16;
  if (dtype_name == "fp8" || dtype_name == "float8_e4m3fn") return kFloat8_e4m3fn;
  fail("dtype", "compute dtype: expected auto, f32, bf16, f16 or fp8, got '{}'", dtype_name);
}

int64_t resolve_max_seq_len(const ModelConfig& config, int64_t max_seq_len) {
  EMBER_CHECK(max_seq_len >= 0, "max_seq_len", "expected a positive length (or 0 for the default), got {}", max_seq_len);
  if (max_seq_len > 0) return max_seq_len;
  return config.max_position_embeddings > 0 ? std::min(config.max_position_embeddings, kDefaultMaxSeqLen)
                                            : kDefaultMaxSeqLen;
}

// ---- weight sources ------------------------------------------------------------------------------

Tensor CheckpointWeights::tensor(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) {
  Tensor t = checkpoint_.load(name, device, dtype);
  check_shape(name, t, shape);
  return t;
}

Weight CheckpointWeights::linear(const std::string& prefix, int64_t out_features, int64_t in_features, Device device,
                                 DType dtype) {
  Weight w = checkpoint_.load_linear(prefix, device, dtype);
  check_shape(prefix + ".weight", w.weight, {out_features, in_features});
  return w;
}

MoeExperts CheckpointWeights::experts(const std::string& mlp_prefix, int64_t num_experts, int64_t intermediate,
                                      int64_t hidden, Device device, DType dtype) {
  MoeExperts e = checkpoint_.load_experts(mlp_prefix, num_experts, device, dtype);
  if (e.gate_up.defined()) {
    check_shape(mlp_prefix + ".experts gate_up", e.gate_up, {num_experts, 2 * intermediate, hidden});
  } else {
    check_shape(mlp_prefix + ".experts gate", e.gate, {num_experts, intermediate, hidden});
    check_shape(mlp_prefix + ".experts up", e.up, {num_experts, intermediate, hidden});
  }
  check_shape(mlp_prefix + ".experts down", e.down, {num_experts, hidden, intermediate});
  return e;
}

Tensor RandomWeights::normal(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) const {
  return randn(shape, dtype, device, seed_ ^ name_hash(name)) * kInitStd;
}

Tensor RandomWeights::tensor(const std::string& name, const std::vector<int64_t>& shape, Device device, DType dtype) {
  if (ends_with(name, "norm.weight")) return ones(shape, dtype, device);
  if (ends_with(name, ".bias")) return zeros(shape, dtype, device);
  return normal(name, shape, device, dtype);
}

Weight RandomWeights::linear(const std::string& prefix, int64_t out_features, int64_t in_features, Device device,
                             DType dtype) {
  const std::string name = prefix + ".weight";
  if (dtype != kFloat8_e4m3fn) return {normal(name, {out_features, in_features}, device, dtype), Tensor()};
  auto [q, scale] = quantize_fp8(normal(name, {out_features, in_features}, device, kBFloat16), Fp8Granularity::Block128);
  return {q, scale};
}

MoeExperts RandomWeights::experts(const std::string& mlp_prefix, int64_t num_experts, int64_t intermediate,
                                  int64_t hidden, Device device, DType dtype) {
  const std::vector<int64_t> gate_up_shape = {num_experts, 2 * intermediate, hidden};
  const std::vector<int64_t> down_shape = {num_experts, hidden, intermediate};
  MoeExperts e;
  if (dtype != kFloat8_e4m3fn) {
    e.gate_up = normal(mlp_prefix + ".experts.gate_up_proj", gate_up_shape, device, dtype);
    e.down = normal(mlp_prefix + ".experts.down_proj", down_shape, device, dtype);
    return e;
  }
  // One 128x128 block grid for gate and up needs I % 128 == 0; otherwise quantize them apart.
  const auto quantize = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return quantize_fp8(normal(name, shape, device, kBFloat16), Fp8Granularity::Block128);
  };
  if (intermediate % 128 == 0) {
    std::tie(e.gate_up, e.gate_up_scale) = quantize(mlp_prefix + ".experts.gate_up_proj", gate_up_shape);
  } else {
    std::tie(e.gate, e.gate_scale) = quantize(mlp_prefix + ".experts.gate_proj", {num_experts, intermediate, hidden});
    std::tie(e.up, e.up_scale) = quantize(mlp_prefix + ".experts.up_proj", {num_experts, intermediate, hidden});
  }
  std::tie(e.down, e.down_scale) = quantize(mlp_prefix + ".experts.down_proj", down_shape);
  return e;
}

// ---- the model -----------------------------------------------------------------------------------

Model::Model(ModelConfig config, ModelOptions options) : config_(std::move(config)), options_(options) {
  EMBER_CHECK(options_.dtype == kFloat32 || options_.dtype == kBFloat16 || options_.dtype == kFloat16 ||
                  options_.dtype == kFloat8_e4m3fn,
              "load_model", "compute dtype: expected float32, bfloat16, float16 or float8_e4m3fn, got {}",
              name(options_.dtype));
  EMBER_CHECK(options_.max_batch >= 1, "load_model", "max_batch: expected at least 1, got {}", options_.max_batch);
  options_.max_seq_len = resolve_max_seq_len(config_, options_.max_seq_len);
  cache_ = KvCache({config_.num_hidden_layers, options_.max_batch, config_.num_key_value_heads, options_.max_seq_len,
                    config_.head_dim},
                   activation_dtype(options_.dtype), options_.device);
}

void Model::load_embeddings(WeightSource& weights) {
  const std::vector<int64_t> shape = {config_.vocab_size, config_.hidden_size};
  const DType dtype = activation_dtype(options_.dtype);
  embed_tokens = weights.tensor("model.embed_tokens.weight", shape, options_.device, dtype);
  lm_head = config_.tie_word_embeddings ? embed_tokens : weights.tensor("lm_head.weight", shape, options_.device, dtype);
}

Tensor Model::embed(const Tensor& ids) const {
  const int64_t batch = ids.size(0), length = ids.size(1);
  return index_select(embed_tokens, 0, ids.reshape({-1})).view({batch, length, config_.hidden_size});  // [B, L, H]
}

Tensor Model::forward(const Tensor& ids, int64_t start_pos, bool last_only) {
  EMBER_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()), "Model::forward",
              "token ids: expected an integer tensor [batch, tokens], got {}",
              ids.defined() ? fmt::format("{} {}", name(ids.dtype()), shape_text(ids.sizes())) : "an undefined tensor");
  const int64_t length = ids.size(1);
  cache_.check_forward(ids.size(0), start_pos, length);
  const Tensor host_ids = ids.to(Device::cpu(), kInt64);
  for (int64_t id : host_ids.to_vector<int64_t>()) {
    EMBER_CHECK(id >= 0 && id < config_.vocab_size, "Model::forward", "token id: expected 0 to {}, got {}",
                config_.vocab_size - 1, id);
  }
  cache_.set_filled(start_pos);  // positions from start_pos on are overwritten now
  Tensor x = hidden_states(host_ids.to(options_.device), start_pos);  // [B, L, H]
  cache_.set_filled(start_pos + length);
  if (last_only) x = x.narrow(1, length - 1, 1);                      // [B, 1, H]
  return linear(x, lm_head).to(kFloat32);                             // [B, L or 1, V]
}

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = {"qwen3_moe", "qwen3", "llama"};
  return types;
}

std::unique_ptr<Model> build_model(const ModelConfig& config, WeightSource& weights, const ModelOptions& options) {
  if (config.model_type == "qwen3_moe") return models::qwen3_moe(config, weights, options);
  if (config.model_type == "qwen3") return models::qwen3(config, weights, options);
  if (config.model_type == "llama") return models::llama(config, weights, options);
  fail("load_model", "model_type: expected one of {}, got '{}'", fmt::join(supported_model_types(), ", "),
       config.model_type);
}

std::unique_ptr<Model> load_model(const std::string& dir, ModelOptions options, ProgressCallback progress,
                                  const std::function<void(const MemoryPlan&)>& on_plan) {
  const ModelConfig config = load_model_config(dir);
  options.max_seq_len = resolve_max_seq_len(config, options.max_seq_len);
  Checkpoint checkpoint(dir);
  const MemoryPlan memory = plan_memory(config, checkpoint, options.device, options.dtype, options.max_seq_len,
                                        options.max_batch);
  if (on_plan) on_plan(memory);
  check_fits(memory, options.device);
  checkpoint.set_progress(std::move(progress));
  CheckpointWeights weights(checkpoint);
  return build_model(config, weights, options);
}

std::unique_ptr<Model> random_model(const ModelConfig& config, ModelOptions options, uint64_t seed,
                                    const std::function<void(const MemoryPlan&)>& on_plan) {
  options.max_seq_len = resolve_max_seq_len(config, options.max_seq_len);
  const MemoryPlan memory = plan_memory(config, config_weight_bytes(config, options.dtype), options.device, options.dtype,
                                        options.max_seq_len, options.max_batch);
  if (on_plan) on_plan(memory);
  check_fits(memory, options.device);
  RandomWeights weights(seed);
  return build_model(config, weights, options);
}

}  // namespace ember::engine
