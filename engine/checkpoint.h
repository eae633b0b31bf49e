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
#include "engine/config.h"

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
  /// Every tensor name over all files, sorted.
  std::vector<std::string> names() const;
  /// The header entry (stored dtype, shape, byte range) of `name`; a missing tensor is an
  /// ember::Error as for load().
  const SafetensorsInfo& info(const std::string& name) const;
  /// The files opened (model.safetensors, or the index's shards in order).
  std::vector<std::string> files() const;
  /// Total bytes of tensor data over every file.
  uint64_t total_bytes() const { return total_bytes_; }
  void set_progress(ProgressCallback progress) { progress_ = std::move(progress); }

  /// The tensor `name` on `device` cast to `dtype`. A missing tensor is an ember::Error naming it
  /// and the file it was expected in (the index's entry, or the single file). On the CPU in the
  /// stored dtype it shares the mapping (no copy). A cast to or from fp8 is refused (it would
  /// ignore the scales): load_linear handles those.
  Tensor load(const std::string& name, Device device, DType dtype) const;
  /// A linear layer's weight `prefix`.weight. An fp8 file's weight needs its decoding scale
  /// `prefix`.weight_scale_inv or `prefix`.weight_scale (a multiplier either way; none is an
  /// error): kept fp8 with that scale as fp32 ([] for one scale, [N, 1] per output channel,
  /// [ceil(N/128), ceil(K/128)] for blocks) when `dtype` is kFloat8_e4m3fn, dequantized to
  /// `dtype` otherwise. A float weight requested as kFloat8_e4m3fn is quantized at load
  /// (128x128 blocks).
  Weight load_linear(const std::string& prefix, Device device, DType dtype) const;
  /// The experts of the MoE block `mlp_prefix` (e.g. "model.layers.3.mlp"), stacked:
  /// per-expert `mlp_prefix`.experts.{j}.{gate,up,down}_proj.weight (the hub layout) or fused
  /// `mlp_prefix`.experts.gate_up_proj [E, 2I, H] and .down_proj [E, H, I] (transformers 5).
  /// Returns gate_up [E, 2I, H] and down [E, H, I] (fp8 with per-expert scales as for
  /// load_linear: [E], [E, N] or [E, ceil(N/128), ceil(K/128)]). Exception: an fp8 hub checkpoint
  /// whose 128x128 blocks do not tile I (I % 128 != 0) cannot share one block grid for gate and
  /// up, so it returns gate and up [E, I, H] separately (MoeExperts allows both). Per-tensor fp8
  /// scales of gate and up become one scale per output channel [E, 2I] (exact). The stack is
  /// allocated once on `device` and filled expert by expert from the mapping: no second copy.
  MoeExperts load_experts(const std::string& mlp_prefix, int64_t num_experts, Device device, DType dtype) const;

 private:
  /// The file holding `name`; the error names the tensor and where it was expected.
  const SafetensorsFile& file_of(const std::string& name) const;
  /// Stored fp8 weight `weight_name`'s decoding scale (`scale_base`_scale_inv or _scale) as fp32
  /// on `device`, in the file's shape; an error when there is none.
  Tensor load_scale(const std::string& weight_name, const std::string& scale_base, Device device) const;
  void report(const std::string& stage, const std::string& file, uint64_t bytes) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into files_
  std::map<std::string, std::string> index_entries_;  // from the index: name -> shard file name
  ProgressCallback progress_;
  uint64_t total_bytes_ = 0;
  mutable uint64_t bytes_done_ = 0;  // bytes loaded so far over all calls, for progress
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

/// Plans `checkpoint` on `device` before anything is allocated:
///  - weights: each tensor's bytes at the dtype it will have. A float compute_dtype: every
///    floating tensor in compute_dtype, fp8 scales dropped (dequantized at load). kFloat8_e4m3fn:
///    projection weights (*_proj.weight, fused experts) 1 byte per element plus fp32 128x128-block
///    scales (stored fp8 weights keep their stored scales), every other floating tensor bfloat16.
///    Non-floating tensors as stored.
///  - KV cache: 2 * layers * batch * max_seq_len * kv_heads * head_dim * itemsize (bfloat16 for fp8).
///  - workspace (an estimate): f32 logits and probabilities (2 * batch * vocab * 4), activations of
///    one prefill chunk of T = batch * min(max_seq_len, 512) tokens
///    (T * (4 * hidden + (heads + 2 * kv_heads) * head_dim + ffn) * itemsize, ffn = the widest of
///    2 * intermediate_size for dense layers and 2 * top_k * moe_intermediate_size for MoE layers),
///    and f32 attention scores of that chunk (batch * heads * min(max_seq_len, 512) * max_seq_len * 4).
///  - available: free device memory (ember::cuda::mem_get_info) or MemAvailable of /proc/meminfo.
MemoryPlan plan_memory(const ModelConfig& config, const Checkpoint& checkpoint, Device device, DType compute_dtype,
                       int64_t max_seq_len, int64_t batch = 1);
/// Throws ember::Error with both numbers and the remedies when the plan does not fit:
/// "needs 41.2 GB, 23.9 GB available on cuda:0: use --dtype fp8, a shorter --max-seq-len, or another device".
void check_fits(const MemoryPlan& plan, Device device);

/// A progress printer for the CLI: on a terminal (stderr is a TTY) one line redrawn with \r
/// (stage, percent, GB/s, ETA); otherwise a plain line at each 25%.
ProgressCallback terminal_progress();

}  // namespace ember::engine
