// The memory plan (weights, KV cache, workspace against what the device has free) and the
// terminal progress printer of a load.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "ember/cuda.h"
#include "ember/error.h"
#include "engine/checkpoint.h"

namespace ember::engine {

namespace {

constexpr int64_t kPrefillChunk = 512;  // tokens per prefill step, bounds the activations

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Weights the model multiplies (and that fp8 mode therefore stores as fp8).
bool is_projection(const std::string& name) {
  return ends_with(name, "_proj.weight") || ends_with(name, ".experts.gate_up_proj") ||
         ends_with(name, ".experts.down_proj");
}

bool is_scale(const std::string& name) { return ends_with(name, "_scale_inv") || ends_with(name, "_scale"); }

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t s : shape) n *= static_cast<uint64_t>(s);
  return n;
}

/// fp32 128x128-block scales of a [..., N, K] weight.
uint64_t block_scale_bytes(const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return 4;
  uint64_t blocks = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) blocks *= static_cast<uint64_t>(shape[d]);
  const auto ceil128 = [](int64_t v) { return static_cast<uint64_t>((v + 127) / 128); };
  return blocks * ceil128(shape[shape.size() - 2]) * ceil128(shape.back()) * 4;
}

/// MemAvailable of /proc/meminfo (kB), 0 when unreadable.
uint64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

std::string gigabytes(uint64_t bytes) { return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9); }

}  // namespace

MemoryPlan plan_memory(const ModelConfig& config, const Checkpoint& checkpoint, Device device, DType compute_dtype,
                       int64_t max_seq_len, int64_t batch) {
  EMBER_CHECK(is_floating_point(compute_dtype), "memory plan", "compute dtype: expected a floating dtype, got {}",
              name(compute_dtype));
  EMBER_CHECK(max_seq_len > 0 && batch > 0, "memory plan", "max_seq_len and batch: expected positive, got {} and {}",
              max_seq_len, batch);
  const bool fp8 = is_fp8(compute_dtype);
  const DType activation_dtype = fp8 ? kBFloat16 : compute_dtype;
  const uint64_t act = itemsize(activation_dtype);
  MemoryPlan plan;

  for (const std::string& tensor_name : checkpoint.names()) {
    const SafetensorsInfo& info = checkpoint.info(tensor_name);
    const uint64_t numel = numel_of(info.shape);
    if (!is_floating_point(info.dtype)) {
      plan.weight_bytes += info.end - info.begin;
    } else if (is_scale(tensor_name)) {
      if (fp8) plan.weight_bytes += numel * 4;  // kept with their fp8 weights, as fp32
    } else if (fp8 && is_projection(tensor_name)) {
      plan.weight_bytes += numel * itemsize(compute_dtype) + (is_fp8(info.dtype) ? 0 : block_scale_bytes(info.shape));
    } else {
      plan.weight_bytes += numel * act;
    }
  }

  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  plan.kv_cache_bytes = 2 * u(config.num_hidden_layers) * u(batch) * u(max_seq_len) * u(config.num_key_value_heads) *
                        u(config.head_dim) * act;

  const int64_t chunk = std::min(max_seq_len, kPrefillChunk);
  const uint64_t tokens = u(batch) * u(chunk);
  bool any_dense = config.num_experts == 0;
  for (int64_t layer = 0; layer < config.num_hidden_layers && !any_dense; ++layer) any_dense = !config.is_moe_layer(layer);
  uint64_t ffn = any_dense ? 2 * u(config.intermediate_size) : 0;
  if (config.num_experts > 0) ffn = std::max(ffn, 2 * u(config.num_experts_per_tok) * u(config.moe_intermediate_size));
  const uint64_t per_token = 4 * u(config.hidden_size) +
                             u(config.num_attention_heads + 2 * config.num_key_value_heads) * u(config.head_dim) + ffn;
  plan.workspace_bytes = 2 * u(batch) * u(config.vocab_size) * 4 + tokens * per_token * act +
                         u(batch) * u(config.num_attention_heads) * u(chunk) * u(max_seq_len) * 4;

  if (device.is_cuda()) {
    const cuda::MemoryStats stats = cuda::memory_stats(device.index);
    plan.available_bytes = stats.device_free + (stats.reserved - stats.allocated);  // cached blocks are reusable
  } else {
    plan.available_bytes = host_available_bytes();
  }
  return plan;
}

std::string MemoryPlan::describe() const {
  std::string out = "memory plan\n";
  const auto row = [&](const char* what, uint64_t bytes) { out += fmt::format("  {:<10} {:>10}\n", what, gigabytes(bytes)); };
  row("weights", weight_bytes);
  row("kv cache", kv_cache_bytes);
  row("workspace", workspace_bytes);
  row("total", total());
  row("available", available_bytes);
  return out;
}

void check_fits(const MemoryPlan& plan, Device device) {
  if (plan.total() <= plan.available_bytes) return;
  fail("memory plan", "needs {}, {} available on {}: use --dtype fp8, a shorter --max-seq-len, or another device "
       "(weights {}, KV cache {}, workspace {})", gigabytes(plan.total()), gigabytes(plan.available_bytes), device.str(),
       gigabytes(plan.weight_bytes), gigabytes(plan.kv_cache_bytes), gigabytes(plan.workspace_bytes));
}

ProgressCallback terminal_progress() {
  struct State {
    bool tty = ::isatty(STDERR_FILENO) == 1;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last_draw{};
    int next_quarter = 1;  // plain output: the next 25% step to print
  };
  auto state = std::make_shared<State>();
  return [state](const LoadProgress& p) {
    const double fraction = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - state->start).count();
    const double rate = seconds > 0 ? static_cast<double>(p.bytes_done) / seconds : 0;  // bytes/s
    const bool done = p.bytes_done >= p.bytes_total;
    if (state->tty) {
      if (!done && now - state->last_draw < std::chrono::milliseconds(100)) return;
      state->last_draw = now;
      const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : 0;
      std::fprintf(stderr, "\r\033[Kloading %-8s %5.1f%%  %s / %s  %.2f GB/s  ETA %.0fs", p.stage.c_str(),
                   100 * fraction, gigabytes(p.bytes_done).c_str(), gigabytes(p.bytes_total).c_str(), rate / 1e9, eta);
      if (done) std::fputc('\n', stderr);
    } else {
      if (state->next_quarter > 4 || fraction < 0.25 * state->next_quarter) return;
      while (state->next_quarter <= 4 && fraction >= 0.25 * state->next_quarter) ++state->next_quarter;
      std::fprintf(stderr, "loading: %3.0f%% (%s of %s, %.2f GB/s)\n", 100 * fraction, gigabytes(p.bytes_done).c_str(),
                   gigabytes(p.bytes_total).c_str(), rate / 1e9);
    }
    std::fflush(stderr);
  };
}

}  // namespace ember::engine
