// A Hugging Face checkpoint directory: model.safetensors or model.safetensors.index.json with
// its shards, memory-mapped. Loads dense weights and stacks per-expert tensors into [E, ...]
// while streaming from the mapping (no second full copy), reports progress, and plans memory
// before anything is allocated.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/device.h"
#include "ember/moe.h"
#include "ember/safetensors.h"
#include "ember/tensor.h"

namespace ember::engine {

/// Progress of a load: called with growing bytes_done; stage is "load" (dense weights),
/// "experts" (stacking) or "quantize" (bf16 -> fp8 at load).
struct LoadProgress {
  std::string stage;
  std::string file;
  uint64_t bytes_done = 0, bytes_total = 0;
};
using ProgressCallback = std::function<void(const LoadProgress&)>;

/// A weight as the model uses it: `weight` in the compute dtype, or float8_e4m3fn with fp32
/// decoding `scale` ([], [N] / [N, 1], or 128x128 blocks [ceil(N/128), ceil(K/128)]).
struct Weight {
  Tensor weight;
  Tensor scale;  // undefined unless weight is fp8
};

class Checkpoint {
 public:
  /// Opens `dir`; throws ember::Error naming what is missing or malformed (no safetensors file,
  /// an index naming a shard that is absent, a Git LFS pointer, a truncated file).
  explicit Checkpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool contains(const std::string& name) const;
  /// Total bytes of tensor data over every file.
  uint64_t total_bytes() const;
  void set_progress(ProgressCallback progress) { progress_ = std::move(progress); }

  /// The tensor `name` on `device` cast to `dtype`. A missing tensor is an ember::Error naming it
  /// and the file it was expected in (the index's entry, or the single file).
  Tensor load(const std::string& name, Device device, DType dtype) const;
  /// A linear layer's weight `prefix`.weight: kept fp8 with its scale (`prefix`.weight_scale_inv
  /// or `prefix`.weight_scale; an fp8 weight without one is an error) when the file holds fp8
  /// and `dtype` is kFloat8_e4m3fn, dequantized to `dtype` otherwise; a float weight requested as
  /// kFloat8_e4m3fn is quantized at load (128x128 blocks).
  Weight load_linear(const std::string& prefix, Device device, DType dtype) const;
  /// The experts of the MoE block `mlp_prefix` (e.g. "model.layers.3.mlp"), stacked:
  /// per-expert `mlp_prefix`.experts.{j}.{gate,up,down}_proj.weight (the hub layout) or fused
  /// `mlp_prefix`.experts.gate_up_proj [E, 2I, H] and .down_proj [E, H, I] (transformers 5).
  /// Returns gate_up [E, 2I, H] and down [E, H, I] (fp8 with per-expert scales as for
  /// load_linear).
  MoeExperts load_experts(const std::string& mlp_prefix, int64_t num_experts, Device device, DType dtype) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into files_
  std::map<std::string, std::string> index_entries_;  // from the index: name -> shard file name
  ProgressCallback progress_;
};

/// What a model will occupy, computed from the files and the KV-cache formula before allocating.
struct MemoryPlan {
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t available_bytes = 0;  // free device memory (or RAM for the CPU)
  uint64_t total() const { return weight_bytes + kv_cache_bytes + workspace_bytes; }
  /// A table for stderr.
  std::string describe() const;
};

}  // namespace ember::engine
