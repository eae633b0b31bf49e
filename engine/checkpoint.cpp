#include "engine/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "ember/ops.h"

namespace ember::engine {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int64_t kBlock = 128;                // FP8 block scales cover 128x128 elements
constexpr uint64_t kChunkBytes = 64ull << 20;  // one progress step (and one host->device copy)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

/// What the directory holds instead of a checkpoint, for the error.
std::string directory_listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names.empty()) return "an empty directory";
  std::string text = "files ";
  for (size_t i = 0; i < names.size() && i < 8; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 8) text += fmt::format(" and {} more", names.size() - 8);
  const bool has_bin = std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.size() > 4 && n.compare(n.size() - 4, 4, ".bin") == 0;
  });
  if (has_bin) text += " (PyTorch .bin weights are not read: convert them to safetensors)";
  return text;
}

enum class ScaleKind { Tensorwise, Channel, Block };

/// The decoding scale of one [N, K] matrix in the layout the ops take: [] (one scale), [N, 1]
/// (one per output channel) or [ceil(N/128), ceil(K/128)] (blocks). Anything else is an error.
struct Scale {
  Tensor value;
  ScaleKind kind = ScaleKind::Tensorwise;
};

Scale normalize_scale(const Tensor& scale, int64_t n, int64_t k, const std::string& scale_name,
                      const std::string& weight_name) {
  if (scale.numel() == 1) return {scale.reshape({}), ScaleKind::Tensorwise};
  if ((scale.dim() == 1 && scale.size(0) == n) || (scale.dim() == 2 && scale.sizes() == std::vector<int64_t>{n, 1})) {
    return {scale.reshape({n, 1}), ScaleKind::Channel};
  }
  if (scale.dim() == 2 && scale.sizes() == std::vector<int64_t>{ceil_div(n, kBlock), ceil_div(k, kBlock)}) {
    return {scale, ScaleKind::Block};
  }
  fail("checkpoint", "scale \"{}\" of \"{}\" ({} weight): expected one value, [{}] per channel or [{}, {}] 128x128 "
       "blocks, got {}", scale_name, weight_name, shape_text({n, k}), n, ceil_div(n, kBlock), ceil_div(k, kBlock),
       shape_text(scale.sizes()));
}

/// Rows [row, row + rows) of one expert's [N, K] matrix, as the file stores them: `q` a CPU
/// tensor on the mapping, `scale` its normalized fp32 decoding scale (fp8 files only).
struct Part {
  Tensor q;
  Scale scale;
  int64_t row = 0;
  std::string name;
};
using ExpertParts = std::vector<std::vector<Part>>;  // [expert][part]

struct Stacked {
  Tensor weight, scale;
};

}  // namespace

// ---- opening -----------------------------------------------------------------------------------

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  EMBER_CHECK(fs::is_directory(dir), "checkpoint", "{}: expected a model directory, got {}", dir,
              fs::exists(dir) ? "a file that is not a directory" : "a path that does not exist");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  if (fs::exists(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    Json index;
    try {
      index = Json::parse(text.str());
    } catch (const Json::parse_error& e) {
      fail("checkpoint", "{}: invalid JSON: {}", index_path.string(), e.what());
    }
    const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
    EMBER_CHECK(index.is_object() && weight_map != index.end() && weight_map->is_object(), "checkpoint",
                "{}: \"weight_map\": expected an object of tensor name -> shard file, got {}", index_path.string(),
                weight_map == index.end() || !index.is_object() ? "no such key" : weight_map->type_name());
    std::vector<std::string> shards;
    for (const auto& [name, shard] : weight_map->items()) {
      EMBER_CHECK(shard.is_string(), "checkpoint", "{}: \"weight_map\".\"{}\": expected a shard file name, got {}",
                  index_path.string(), name, shard.dump());
      index_entries_[name] = shard.get<std::string>();
      if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end()) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
    for (const std::string& shard : shards) {
      const fs::path path = fs::path(dir) / shard;
      EMBER_CHECK(fs::exists(path), "checkpoint",
                  "{}: shard \"{}\" named by the index is missing: expected {}, got no such file (an incomplete "
                  "download?)", index_path.string(), shard, path.string());
      files_.push_back(std::make_unique<SafetensorsFile>(path.string()));
    }
  } else if (fs::exists(single_path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path.string()));
  } else {
    fail("checkpoint", "{}: expected model.safetensors or model.safetensors.index.json, got {}", dir,
         directory_listing(dir));
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    const std::string shard = fs::path(files_[i]->path()).filename().string();
    for (const std::string& name : files_[i]->names()) {
      // The index decides where a tensor is; one it does not list is taken from its first file.
      const auto listed = index_entries_.find(name);
      if (listed != index_entries_.end() ? listed->second == shard : file_of_.count(name) == 0) file_of_[name] = i;
    }
  }
  for (const auto& [name, file] : file_of_) {
    const SafetensorsInfo& info = files_[file]->info(name);
    total_bytes_ += info.end - info.begin;
  }
}

bool Checkpoint::contains(const std::string& name) const { return file_of_.count(name) != 0; }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& file : files_) out.push_back(file->path());
  return out;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  if (const auto it = file_of_.find(name); it != file_of_.end()) return *files_[it->second];
  if (const auto listed = index_entries_.find(name); listed != index_entries_.end()) {
    fail("checkpoint", "tensor \"{}\": expected in {} (where model.safetensors.index.json puts it), got no such tensor "
         "in that file", name, (fs::path(dir_) / listed->second).string());
  }
  if (!index_entries_.empty()) {
    fail("checkpoint", "tensor \"{}\": expected in {} or one of its shards, got no such tensor",
         name, (fs::path(dir_) / "model.safetensors.index.json").string());
  }
  fail("checkpoint", "tensor \"{}\": expected in {}, got no such tensor", name, files_[0]->path());
}

const SafetensorsInfo& Checkpoint::info(const std::string& name) const { return file_of(name).info(name); }

void Checkpoint::report(const std::string& stage, const std::string& file, uint64_t bytes) const {
  bytes_done_ += bytes;
  if (!progress_) return;
  progress_(LoadProgress{stage, file, std::min(bytes_done_, total_bytes_), total_bytes_});
}

// ---- dense tensors -----------------------------------------------------------------------------

namespace {

/// `src` (a CPU tensor on the mapping) on `device` as `dtype`, copied in chunks of rows so that
/// progress advances within large tensors. On the CPU in the stored dtype it stays on the mapping.
template <class Report>
Tensor transfer(const Tensor& src, Device device, DType dtype, const Report& report) {
  const uint64_t bytes = src.nbytes();
  if (device.is_cpu() && dtype == src.dtype()) {
    report(bytes);
    return src;
  }
  Tensor out = empty(src.sizes(), dtype, device);
  if (src.dim() == 0 || src.size(0) <= 1 || bytes <= kChunkBytes) {
    out.copy_(src);
    report(bytes);
    return out;
  }
  const int64_t rows = src.size(0);
  const uint64_t row_bytes = bytes / static_cast<uint64_t>(rows);
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / std::max<uint64_t>(row_bytes, 1)));
  for (int64_t row = 0; row < rows; row += step) {
    const int64_t n = std::min(step, rows - row);
    out.narrow(0, row, n).copy_(src.narrow(0, row, n));
    report(static_cast<uint64_t>(n) * row_bytes);
  }
  return out;
}

}  // namespace

Tensor Checkpoint::load(const std::string& name, Device device, DType dtype) const {
  const SafetensorsFile& file = file_of(name);
  const DType stored = file.info(name).dtype;
  if (stored != dtype && (is_fp8(stored) || is_fp8(dtype))) {
    fail("checkpoint", "tensor \"{}\" in {}: a plain cast from {} to {} would ignore the FP8 scales: expected the "
         "same dtype, got a conversion (load_linear applies and computes scales)", name, file.path(), ember::name(stored),
         ember::name(dtype));
  }
  return transfer(file.get(name), device, dtype, [&](uint64_t bytes) { report("load", file.path(), bytes); });
}

Tensor Checkpoint::load_scale(const std::string& weight_name, const std::string& scale_base, Device device) const {
  for (const char* suffix : {"_scale_inv", "_scale"}) {
    const std::string name = scale_base + suffix;
    if (!contains(name)) continue;
    const SafetensorsFile& file = file_of(name);
    EMBER_CHECK(is_floating_point(file.info(name).dtype) && !is_fp8(file.info(name).dtype), "checkpoint",
                "scale \"{}\" in {}: expected float32, bfloat16 or float16, got {}", name, file.path(),
                ember::name(file.info(name).dtype));
    return file.get(name).to(device, kFloat32);
  }
  fail("checkpoint", "FP8 weight \"{}\" in {}: expected its decoding scale \"{}_scale_inv\" or \"{}_scale\", got "
       "neither (refusing to use FP8 values without their scales)", weight_name, file_of(weight_name).path(),
       scale_base, scale_base);
}

Weight Checkpoint::load_linear(const std::string& prefix, Device device, DType dtype) const {
  const std::string name = prefix + ".weight";
  const SafetensorsFile& file = file_of(name);
  const SafetensorsInfo& info = file.info(name);
  EMBER_CHECK(info.shape.size() == 2, "checkpoint", "linear weight \"{}\" in {}: expected 2 dims [out, in], got {}",
              name, file.path(), shape_text(info.shape));
  EMBER_CHECK(is_floating_point(dtype), "checkpoint", "linear weight \"{}\": expected a floating dtype, got {}", name,
              ember::name(dtype));
  auto progress = [&](const char* stage) {
    return [this, stage, &file](uint64_t bytes) { report(stage, file.path(), bytes); };
  };
  const int64_t n = info.shape[0], k = info.shape[1];
  if (is_fp8(info.dtype)) {
    const Tensor scale = normalize_scale(load_scale(name, name, device), n, k, name + "_scale_inv", name).value;
    const Tensor q = transfer(file.get(name), device, info.dtype, progress("load"));
    if (dtype == info.dtype) return {q, scale};
    if (!is_fp8(dtype)) return {dequantize_fp8(q, scale, dtype), {}};
    auto [requantized, block_scale] = quantize_fp8(dequantize_fp8(q, scale, kFloat32), Fp8Granularity::Block128, dtype);
    return {requantized, block_scale};
  }
  if (is_fp8(dtype)) {
    const Tensor w = transfer(file.get(name), device, info.dtype, progress("quantize"));
    auto [q, scale] = quantize_fp8(w, Fp8Granularity::Block128, dtype);
    return {q, scale};
  }
  return {transfer(file.get(name), device, dtype, progress("load")), {}};
}

// ---- experts -----------------------------------------------------------------------------------

namespace {

/// Stacks one matrix per expert ([N, K], assembled from its parts) into [E, N, K] on `device`:
/// the destination is allocated once and each part is copied (cast, dequantized or quantized on
/// the way) straight from the mapping into its rows.
template <class Report>
Stacked stack_experts(const ExpertParts& experts, int64_t n, int64_t k, Device device, DType dtype,
                      const Report& report) {
  const auto e = static_cast<int64_t>(experts.size());
  const DType stored = experts[0][0].q.dtype();
  Stacked out;
  if (!is_fp8(dtype)) {
    out.weight = empty({e, n, k}, dtype, device);
    for (int64_t j = 0; j < e; ++j) {
      for (const Part& part : experts[static_cast<size_t>(j)]) {
        Tensor rows = out.weight.select(0, j).narrow(0, part.row, part.q.size(0));
        if (is_fp8(stored)) rows.copy_(dequantize_fp8(part.q.to(device), part.scale.value.to(device), dtype));
        else rows.copy_(part.q);
        report("experts", part.q.nbytes());
      }
    }
    return out;
  }
  if (stored != dtype) {
    // Quantized per expert matrix (the same blocks as quantizing the whole stack), so only one
    // expert's float matrix is ever held besides the destination.
    out.weight = empty({e, n, k}, dtype, device);
    out.scale = empty({e, ceil_div(n, kBlock), ceil_div(k, kBlock)}, kFloat32, device);
    const DType work = is_fp8(stored) ? kFloat32 : stored;
    for (int64_t j = 0; j < e; ++j) {
      const auto& parts = experts[static_cast<size_t>(j)];
      Tensor matrix;
      if (parts.size() == 1 && !is_fp8(stored)) {
        matrix = parts[0].q.to(device);
      } else {
        matrix = empty({n, k}, work, device);
        for (const Part& part : parts) {
          Tensor rows = matrix.narrow(0, part.row, part.q.size(0));
          if (is_fp8(stored)) rows.copy_(dequantize_fp8(part.q.to(device), part.scale.value.to(device), kFloat32));
          else rows.copy_(part.q);
        }
      }
      auto [q, scale] = quantize_fp8(matrix, Fp8Granularity::Block128, dtype);
      out.weight.select(0, j).copy_(q);
      out.scale.select(0, j).copy_(scale);
      for (const Part& part : parts) report("quantize", part.q.nbytes());
    }
    return out;
  }
  // Stored FP8 kept as is, scales stacked: [E] tensorwise, [E, N] per channel (also for parts
  // with one scale each: repeated over their rows), [E, N/128, K/128] blocks.
  const auto& first = experts[0];
  ScaleKind kind = first[0].scale.kind;
  if (first.size() > 1 && kind == ScaleKind::Tensorwise) kind = ScaleKind::Channel;
  out.weight = empty({e, n, k}, dtype, device);
  if (kind == ScaleKind::Tensorwise) out.scale = empty({e}, kFloat32, device);
  else if (kind == ScaleKind::Channel) out.scale = empty({e, n}, kFloat32, device);
  else out.scale = empty({e, ceil_div(n, kBlock), ceil_div(k, kBlock)}, kFloat32, device);
  for (int64_t j = 0; j < e; ++j) {
    for (const Part& part : experts[static_cast<size_t>(j)]) {
      const int64_t rows = part.q.size(0);
      out.weight.select(0, j).narrow(0, part.row, rows).copy_(part.q);
      const ScaleKind part_kind = part.scale.kind;
      const bool same_kind = part_kind == kind || (kind == ScaleKind::Channel && part_kind == ScaleKind::Tensorwise);
      EMBER_CHECK(same_kind && (kind != ScaleKind::Block || part.row % kBlock == 0), "checkpoint",
                  "scale of \"{}\": expected the layout of expert 0's ({}), got {}", part.name,
                  shape_text(first[0].scale.value.sizes()), shape_text(part.scale.value.sizes()));
      Tensor dst = out.scale.select(0, j);
      const Tensor& scale = part.scale.value;
      if (kind == ScaleKind::Tensorwise) dst.copy_(scale);
      else if (kind == ScaleKind::Channel) dst.narrow(0, part.row, rows).copy_(scale.reshape({-1}).expand({rows}));
      else dst.narrow(0, part.row / kBlock, scale.size(0)).copy_(scale);
      report("experts", part.q.nbytes());
    }
  }
  return out;
}

}  // namespace

MoeExperts Checkpoint::load_experts(const std::string& mlp_prefix, int64_t num_experts, Device device,
                                    DType dtype) const {
  EMBER_CHECK(num_experts > 0, "checkpoint", "experts of \"{}\": expected num_experts > 0, got {}", mlp_prefix,
              num_experts);
  EMBER_CHECK(is_floating_point(dtype), "checkpoint", "experts of \"{}\": expected a floating dtype, got {}",
              mlp_prefix, ember::name(dtype));
  const std::string experts = mlp_prefix + ".experts";
  const std::string fused_gate_up = experts + ".gate_up_proj", fused_down = experts + ".down_proj";
  const std::string hub_first = experts + ".0.gate_proj.weight";
  auto reporter = [this](const std::string& file) {
    return [this, file](const char* stage, uint64_t bytes) { report(stage, file, bytes); };
  };

  ExpertParts gate_up_parts(static_cast<size_t>(num_experts)), down_parts(static_cast<size_t>(num_experts));
  int64_t inter = 0, hidden = 0;
  std::string file_name;
  if (contains(fused_gate_up) || contains(fused_down)) {
    // transformers 5 in memory (save_pretrained(save_original_format=False)): gate_up [E, 2I, H]
    // with the gate rows first, down [E, H, I]; FP8 scales <name>_scale_inv stacked along E.
    const SafetensorsFile& gu_file = file_of(fused_gate_up);
    const SafetensorsFile& down_file = file_of(fused_down);
    const std::vector<int64_t>& gu = gu_file.info(fused_gate_up).shape;
    const std::vector<int64_t>& dn = down_file.info(fused_down).shape;
    EMBER_CHECK(gu.size() == 3 && dn.size() == 3 && gu[0] == num_experts && dn[0] == num_experts &&
                    gu[1] == 2 * dn[2] && gu[2] == dn[1],
                "checkpoint", "fused experts \"{}\" {} and \"{}\" {}: expected [E, 2I, H] and [E, H, I] with E = {}",
                fused_gate_up, shape_text(gu), fused_down, shape_text(dn), num_experts);
    inter = dn[2];
    hidden = dn[1];
    const Tensor gate_up = gu_file.get(fused_gate_up), down = down_file.get(fused_down);
    Tensor gate_up_scale, down_scale;
    if (is_fp8(gate_up.dtype())) gate_up_scale = load_scale(fused_gate_up, fused_gate_up, Device::cpu());
    if (is_fp8(down.dtype())) down_scale = load_scale(fused_down, fused_down, Device::cpu());
    auto expert_scale = [&](const Tensor& stacked, int64_t j, int64_t n, int64_t k, const std::string& name) -> Scale {
      if (!stacked.defined()) return Scale{};
      EMBER_CHECK(stacked.dim() >= 1 && stacked.size(0) == num_experts, "checkpoint",
                  "scale of \"{}\": expected one per expert ([{}, ...]), got {}", name, num_experts,
                  shape_text(stacked.sizes()));
      return normalize_scale(stacked.select(0, j), n, k, name + "_scale_inv", name);
    };
    for (int64_t j = 0; j < num_experts; ++j) {
      gate_up_parts[static_cast<size_t>(j)].push_back(
          {gate_up.select(0, j), expert_scale(gate_up_scale, j, 2 * inter, hidden, fused_gate_up), 0, fused_gate_up});
      down_parts[static_cast<size_t>(j)].push_back(
          {down.select(0, j), expert_scale(down_scale, j, hidden, inter, fused_down), 0, fused_down});
    }
    file_name = gu_file.path();
  } else if (contains(hub_first)) {
    const SafetensorsInfo& first = info(hub_first);
    EMBER_CHECK(first.shape.size() == 2, "checkpoint", "\"{}\": expected [I, H], got {}", hub_first,
                shape_text(first.shape));
    inter = first.shape[0];
    hidden = first.shape[1];
    const std::string beyond = fmt::format("{}.{}.gate_proj.weight", experts, num_experts);
    EMBER_CHECK(!contains(beyond), "checkpoint", "experts of \"{}\": expected {} (num_experts of the config), got a "
                "tensor \"{}\" beyond them", mlp_prefix, num_experts, beyond);
    auto part = [&](const std::string& name, int64_t rows, int64_t cols, int64_t row) {
      const SafetensorsFile& file = file_of(name);
      const SafetensorsInfo& meta = file.info(name);
      EMBER_CHECK(meta.shape == (std::vector<int64_t>{rows, cols}) && meta.dtype == first.dtype, "checkpoint",
                  "\"{}\" in {}: expected {} {} like expert 0, got {} {}", name, file.path(), ember::name(first.dtype),
                  shape_text({rows, cols}), ember::name(meta.dtype), shape_text(meta.shape));
      Scale scale;
      if (is_fp8(meta.dtype)) scale = normalize_scale(load_scale(name, name, Device::cpu()), rows, cols, name + "_scale_inv", name);
      return Part{file.get(name), scale, row, name};
    };
    for (int64_t j = 0; j < num_experts; ++j) {
      const std::string p = fmt::format("{}.{}.", experts, j);
      auto& gu = gate_up_parts[static_cast<size_t>(j)];
      gu.push_back(part(p + "gate_proj.weight", inter, hidden, 0));
      gu.push_back(part(p + "up_proj.weight", inter, hidden, inter));
      down_parts[static_cast<size_t>(j)].push_back(part(p + "down_proj.weight", hidden, inter, 0));
    }
    file_name = file_of(hub_first).path();
  } else {
    fail("checkpoint", "experts of \"{}\": expected \"{}\" (per-expert hub layout) or \"{}\" (fused, transformers 5), "
         "got neither in {}", mlp_prefix, hub_first, fused_gate_up, index_entries_.empty() ? files_[0]->path() : dir_);
  }

  const auto report_to = reporter(file_name);
  MoeExperts out;
  const Part& gate0 = gate_up_parts[0][0];
  const bool keep_fp8 = is_fp8(dtype) && gate0.q.dtype() == dtype;
  if (keep_fp8 && gate_up_parts[0].size() == 2 && gate0.scale.kind == ScaleKind::Block && inter % kBlock != 0) {
    // Gate and up blocks do not tile [2I, H]: keep them as two stacks.
    ExpertParts gates(gate_up_parts.size()), ups(gate_up_parts.size());
    for (size_t j = 0; j < gate_up_parts.size(); ++j) {
      gates[j] = {gate_up_parts[j][0]};
      ups[j] = {gate_up_parts[j][1]};
      ups[j][0].row = 0;
    }
    Stacked gate = stack_experts(gates, inter, hidden, device, dtype, report_to);
    Stacked up = stack_experts(ups, inter, hidden, device, dtype, report_to);
    out.gate = gate.weight;
    out.gate_scale = gate.scale;
    out.up = up.weight;
    out.up_scale = up.scale;
  } else {
    Stacked gate_up = stack_experts(gate_up_parts, 2 * inter, hidden, device, dtype, report_to);
    out.gate_up = gate_up.weight;
    out.gate_up_scale = gate_up.scale;
  }
  Stacked down = stack_experts(down_parts, hidden, inter, device, dtype, report_to);
  out.down = down.weight;
  out.down_scale = down.scale;
  return out;
}

}  // namespace ember::engine
