// Checkpoint directories written in the test (ember::save_safetensors + JSON text): single file
// and sharded, the experts' two layouts, FP8 weights and scales, every kind of broken directory,
// the memory plan; and a tiny Qwen3-MoE saved by transformers (scripts/fixtures/make_checkpoint_fixtures.py).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compare.h"
#include "ember/ops.h"
#include "engine/checkpoint.h"
#include "engine/config.h"

using namespace ember;
using namespace ember::engine;
using ember::test::error_of;

namespace {

namespace fs = std::filesystem;

/// Values (k % 19 - 9) * 0.125 + offset for flat index k: distinct per tensor through `offset`.
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Tensor pattern(const std::vector<int64_t>& shape, float offset) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t k = 0; k < v.size(); ++k) v[k] = (static_cast<float>(k % 19) - 9) * 0.125f + offset;
  return tensor<float>(v, shape);
}

class CheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ember_ckpt_" + std::to_string(::getpid()) + "_" + test->test_suite_name() + "_" + test->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  void write_text(const std::string& file, const std::string& text) {
    std::ofstream(dir_ / file, std::ios::binary) << text;
  }
  void save(const std::string& file, const std::map<std::string, Tensor>& tensors) { save_safetensors(path(file), tensors); }
  /// model.safetensors.index.json mapping every tensor of each shard to it.
  void write_index(const std::map<std::string, std::map<std::string, Tensor>>& shards) {
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [shard, tensors] : shards) {
      for (const auto& [name, t] : tensors) map[name] = shard;
    }
    write_text("model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  }

  fs::path dir_;
};

using CheckpointTest = CheckpointDir;

// ---- the per-expert test model: E experts, gate/up [I, H], down [H, I] -----------------------------
constexpr int64_t kE = 3, kI = 4, kH = 6;

Tensor expert_gate(int64_t j) { return pattern({kI, kH}, 0.5f * static_cast<float>(j) + 0.01f); }
Tensor expert_up(int64_t j) { return pattern({kI, kH}, -0.5f * static_cast<float>(j) + 0.02f); }
Tensor expert_down(int64_t j) { return pattern({kH, kI}, 0.25f * static_cast<float>(j) + 0.03f); }

std::map<std::string, Tensor> hub_experts(const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (int64_t j = 0; j < kE; ++j) {
    const std::string p = prefix + ".experts." + std::to_string(j) + ".";
    out[p + "gate_proj.weight"] = expert_gate(j);
    out[p + "up_proj.weight"] = expert_up(j);
    out[p + "down_proj.weight"] = expert_down(j);
  }
  return out;
}

/// gate_up [E, 2I, H] and down [E, H, I] written element by element from the per-expert values.
std::pair<Tensor, Tensor> hand_stacked() {
  std::vector<float> gate_up, down;
  for (int64_t j = 0; j < kE; ++j) {
    for (float v : expert_gate(j).to_vector<float>()) gate_up.push_back(v);
    for (float v : expert_up(j).to_vector<float>()) gate_up.push_back(v);
    for (float v : expert_down(j).to_vector<float>()) down.push_back(v);
  }
  return {tensor<float>(gate_up, {kE, 2 * kI, kH}), tensor<float>(down, {kE, kH, kI})};
}

TEST_F(CheckpointTest, SingleFileLoadsAndCasts) {
  const Tensor w = pattern({5, 3}, 0.1f);
  const Tensor ids = tensor<int64_t>({4, 5, 6});
  save("model.safetensors", {{"a.weight", w}, {"ids", ids}});
  Checkpoint ckpt(dir_.string());
  EXPECT_TRUE(ckpt.contains("a.weight"));
  EXPECT_FALSE(ckpt.contains("b.weight"));
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a.weight", "ids"}));
  EXPECT_EQ(ckpt.total_bytes(), 5u * 3 * 4 + 3 * 8);
  EXPECT_TENSOR_EQ(ckpt.load("a.weight", Device::cpu(), kFloat32), w);
  EXPECT_TENSOR_EQ(ckpt.load("a.weight", Device::cpu(), kBFloat16), w.to(kBFloat16));
  EXPECT_TENSOR_EQ(ckpt.load("ids", Device::cpu(), kInt64), ids);
  const Weight linear = ckpt.load_linear("a", Device::cpu(), kFloat16);
  EXPECT_TENSOR_EQ(linear.weight, w.to(kFloat16));
  EXPECT_FALSE(linear.scale.defined());
}

TEST_F(CheckpointTest, ShardedIndexFindsEachTensorInItsShard) {
  const std::map<std::string, Tensor> first = {{"x.weight", pattern({2, 3}, 1)}, {"y.weight", pattern({4}, 2)}};
  const std::map<std::string, Tensor> second = {{"z.weight", pattern({3, 3}, 3)}};
  save("model-00001-of-00002.safetensors", first);
  save("model-00002-of-00002.safetensors", second);
  write_index({{"model-00001-of-00002.safetensors", first}, {"model-00002-of-00002.safetensors", second}});
  Checkpoint ckpt(dir_.string());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x.weight", "y.weight", "z.weight"}));
  EXPECT_TENSOR_EQ(ckpt.load("x.weight", Device::cpu(), kFloat32), first.at("x.weight"));
  EXPECT_TENSOR_EQ(ckpt.load("z.weight", Device::cpu(), kFloat32), second.at("z.weight"));
  EXPECT_EQ(ckpt.total_bytes(), (6u + 4 + 9) * 4);
}

TEST_F(CheckpointTest, ShardNamedByTheIndexButAbsent) {
  const std::map<std::string, Tensor> first = {{"x.weight", pattern({2}, 1)}};
  const std::map<std::string, Tensor> second = {{"z.weight", pattern({2}, 3)}};
  save("model-00001-of-00002.safetensors", first);
  write_index({{"model-00001-of-00002.safetensors", first}, {"model-00002-of-00002.safetensors", second}});
  const std::string e = error_of([&] { Checkpoint ckpt(dir_.string()); });
  EXPECT_NE(e.find("shard \"model-00002-of-00002.safetensors\" named by the index is missing"), std::string::npos) << e;
  EXPECT_NE(e.find(path("model-00002-of-00002.safetensors")), std::string::npos) << e;
}

TEST_F(CheckpointTest, MissingTensorNamesTheFileItWasExpectedIn) {
  // The index says shard 2 holds "z.weight", but shard 2 does not.
  const std::map<std::string, Tensor> first = {{"x.weight", pattern({2}, 1)}};
  const std::map<std::string, Tensor> second = {{"w.weight", pattern({2}, 3)}};
  save("model-00001-of-00002.safetensors", first);
  save("model-00002-of-00002.safetensors", second);
  write_index({{"model-00001-of-00002.safetensors", first},
               {"model-00002-of-00002.safetensors", {{"w.weight", second.at("w.weight")}, {"z.weight", Tensor()}}}});
  Checkpoint sharded(dir_.string());
  std::string e = error_of([&] { sharded.load("z.weight", Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("tensor \"z.weight\""), std::string::npos) << e;
  EXPECT_NE(e.find(path("model-00002-of-00002.safetensors")), std::string::npos) << e;
  e = error_of([&] { sharded.load("nowhere.weight", Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("tensor \"nowhere.weight\""), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors.index.json"), std::string::npos) << e;

  fs::remove_all(dir_);
  fs::create_directories(dir_);
  save("model.safetensors", first);
  Checkpoint single(dir_.string());
  e = error_of([&] { single.load_linear("q_proj", Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("tensor \"q_proj.weight\": expected in " + path("model.safetensors")), std::string::npos) << e;
}

TEST_F(CheckpointTest, NoCheckpointInTheDirectory) {
  write_text("pytorch_model.bin", "x");
  const std::string e = error_of([&] { Checkpoint ckpt(dir_.string()); });
  EXPECT_NE(e.find("expected model.safetensors or model.safetensors.index.json"), std::string::npos) << e;
  EXPECT_NE(e.find("pytorch_model.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("convert them to safetensors"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { Checkpoint ckpt(path("absent")); }).find("does not exist"), std::string::npos);
}

TEST_F(CheckpointTest, GitLfsPointerInsteadOfTheWeights) {
  write_text("model.safetensors",
             "version https://git-lfs.github.com/spec/v1\n"
             "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 16384\n");
  const std::string e = error_of([&] { Checkpoint ckpt(dir_.string()); });
  EXPECT_NE(e.find("Git LFS pointer"), std::string::npos) << e;
  EXPECT_NE(e.find(path("model.safetensors")), std::string::npos) << e;
}

TEST_F(CheckpointTest, TruncatedShard) {
  const std::map<std::string, Tensor> tensors = {{"x.weight", pattern({64, 64}, 1)}};
  save("model.safetensors", tensors);
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 100);
  const std::string e = error_of([&] { Checkpoint ckpt(dir_.string()); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(path("model.safetensors")), std::string::npos) << e;
}

TEST_F(CheckpointTest, PerExpertAndFusedLayoutsStackToTheSameTensors) {
  const auto [gate_up_ref, down_ref] = hand_stacked();
  save("model.safetensors", hub_experts("model.layers.0.mlp"));
  Checkpoint hub(dir_.string());
  const MoeExperts from_hub = hub.load_experts("model.layers.0.mlp", kE, Device::cpu(), kFloat32);
  EXPECT_TENSOR_EQ(from_hub.gate_up, gate_up_ref);
  EXPECT_TENSOR_EQ(from_hub.down, down_ref);
  EXPECT_FALSE(from_hub.gate_up_scale.defined());
  EXPECT_FALSE(from_hub.gate.defined());

  fs::remove(dir_ / "model.safetensors");
  save("model.safetensors",
       {{"model.layers.0.mlp.experts.gate_up_proj", gate_up_ref}, {"model.layers.0.mlp.experts.down_proj", down_ref}});
  Checkpoint fused(dir_.string());
  const MoeExperts from_fused = fused.load_experts("model.layers.0.mlp", kE, Device::cpu(), kFloat32);
  EXPECT_TENSOR_EQ(from_fused.gate_up, gate_up_ref);
  EXPECT_TENSOR_EQ(from_fused.down, down_ref);
  // A cast on the way: bf16 of the same values.
  EXPECT_TENSOR_EQ(fused.load_experts("model.layers.0.mlp", kE, Device::cpu(), kBFloat16).gate_up, gate_up_ref.to(kBFloat16));
  EXPECT_TENSOR_EQ(hub.load_experts("model.layers.0.mlp", kE, Device::cpu(), kBFloat16).down, down_ref.to(kBFloat16));
}

TEST_F(CheckpointTest, ExpertsAcrossShards) {
  // Experts split over two shards, as big checkpoints do.
  std::map<std::string, Tensor> all = hub_experts("m.mlp"), first, second;
  for (const auto& [name, t] : all) (name.find(".experts.1.") != std::string::npos ? second : first)[name] = t;
  save("a.safetensors", first);
  save("b.safetensors", second);
  write_index({{"a.safetensors", first}, {"b.safetensors", second}});
  const auto [gate_up_ref, down_ref] = hand_stacked();
  const MoeExperts experts = Checkpoint(dir_.string()).load_experts("m.mlp", kE, Device::cpu(), kFloat32);
  EXPECT_TENSOR_EQ(experts.gate_up, gate_up_ref);
  EXPECT_TENSOR_EQ(experts.down, down_ref);
}

TEST_F(CheckpointTest, ExpertErrors) {
  save("model.safetensors", hub_experts("m.mlp"));
  Checkpoint ckpt(dir_.string());
  std::string e = error_of([&] { ckpt.load_experts("m.mlp", kE + 1, Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("tensor \"m.mlp.experts.3.gate_proj.weight\""), std::string::npos) << e;
  e = error_of([&] { ckpt.load_experts("m.mlp", kE - 1, Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("beyond them"), std::string::npos) << e;
  e = error_of([&] { ckpt.load_experts("other.mlp", kE, Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("other.mlp.experts.0.gate_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("other.mlp.experts.gate_up_proj"), std::string::npos) << e;
}

TEST_F(CheckpointTest, ProgressReachesTheTotal) {
  save("model.safetensors", hub_experts("m.mlp"));
  Checkpoint ckpt(dir_.string());
  std::vector<LoadProgress> seen;
  ckpt.set_progress([&](const LoadProgress& p) { seen.push_back(p); });
  ckpt.load_experts("m.mlp", kE, Device::cpu(), kFloat32);
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
  EXPECT_EQ(seen.back().bytes_done, ckpt.total_bytes());
  EXPECT_EQ(seen.back().bytes_total, ckpt.total_bytes());
  EXPECT_EQ(seen.back().stage, "experts");
  EXPECT_EQ(seen.back().file, path("model.safetensors"));
}

// ---- FP8 -----------------------------------------------------------------------------------------

/// Multiples of 1/8 in [-1.875, 1.875]: exact in float8_e4m3fn, so fp8 and float references agree.
Tensor exact_fp8(const std::vector<int64_t>& shape, float offset) {
  return pattern(shape, offset).to(kFloat8_e4m3fn);
}

/// q [N, K] * scale ([] / [N] / blocks [ceil(N/128), ceil(K/128)]) element by element in double.
Tensor dequantized_by_hand(const Tensor& q, const Tensor& scale) {
  const int64_t n = q.size(0), k = q.size(1);
  const std::vector<float> values = q.to(kFloat32).to_vector<float>();
  const std::vector<float> s = scale.to(kFloat32).to_vector<float>();
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      double factor = s[0];
      if (scale.numel() == n && n > 1) factor = s[static_cast<size_t>(r)];
      else if (scale.dim() == 2 && scale.numel() > 1) factor = s[static_cast<size_t>((r / 128) * scale.size(1) + c / 128)];
      out[static_cast<size_t>(r * k + c)] = static_cast<float>(values[static_cast<size_t>(r * k + c)] * factor);
    }
  }
  return tensor<float>(out, {n, k});
}

TEST_F(CheckpointTest, Fp8LinearWithBlockScaleInv) {
  const Tensor q = exact_fp8({200, 130}, 0);
  const Tensor scale_inv = tensor<float>({0.5f, 2.f, 0.25f, 4.f}, {2, 2});  // a multiplier despite its name
  save("model.safetensors", {{"l.weight", q}, {"l.weight_scale_inv", scale_inv}});
  Checkpoint ckpt(dir_.string());
  const Weight kept = ckpt.load_linear("l", Device::cpu(), kFloat8_e4m3fn);
  EXPECT_EQ(kept.weight.dtype(), kFloat8_e4m3fn);
  EXPECT_TENSOR_EQ(kept.weight, q);
  EXPECT_TENSOR_EQ(kept.scale, scale_inv);
  const Tensor expected = dequantized_by_hand(q, scale_inv);
  const Weight f32 = ckpt.load_linear("l", Device::cpu(), kFloat32);
  EXPECT_TENSOR_EQ(f32.weight, expected);
  EXPECT_FALSE(f32.scale.defined());
  EXPECT_TENSOR_EQ(ckpt.load_linear("l", Device::cpu(), kBFloat16).weight, expected.to(kBFloat16));
}

TEST_F(CheckpointTest, Fp8LinearWeightScaleNamePerChannelAndTensorwise) {
  const Tensor q = exact_fp8({5, 7}, 0.25f);
  const Tensor per_channel = tensor<float>({0.5f, 1.f, 2.f, 4.f, 0.25f});
  const Tensor bf16_scalar = tensor<float>({0.5f}, {}).to(kBFloat16);  // some requants store bf16 scales
  save("model.safetensors", {{"c.weight", q}, {"c.weight_scale", per_channel}, {"t.weight", q}, {"t.weight_scale_inv", bf16_scalar}});
  Checkpoint ckpt(dir_.string());
  const Weight channel = ckpt.load_linear("c", Device::cpu(), kFloat8_e4m3fn);
  EXPECT_EQ(channel.scale.sizes(), (std::vector<int64_t>{5, 1}));
  EXPECT_TENSOR_EQ(channel.scale.reshape({5}), per_channel);
  EXPECT_TENSOR_EQ(ckpt.load_linear("c", Device::cpu(), kFloat32).weight, dequantized_by_hand(q, per_channel));
  const Weight tensorwise = ckpt.load_linear("t", Device::cpu(), kFloat8_e4m3fn);
  EXPECT_EQ(tensorwise.scale.dim(), 0);
  EXPECT_EQ(tensorwise.scale.dtype(), kFloat32);
  EXPECT_EQ(tensorwise.scale.item<float>(), 0.5f);
  EXPECT_TENSOR_EQ(ckpt.load_linear("t", Device::cpu(), kFloat32).weight, dequantized_by_hand(q, tensor<float>({0.5f})));
}

TEST_F(CheckpointTest, Fp8WeightWithoutScaleIsAnError) {
  save("model.safetensors", {{"l.weight", exact_fp8({4, 4}, 0)}, {"odd.weight", exact_fp8({4, 4}, 0)},
                             {"odd.weight_scale_inv", tensor<float>({1.f, 2.f, 3.f}, {3})}});
  Checkpoint ckpt(dir_.string());
  for (DType dtype : {kFloat8_e4m3fn, kFloat32}) {
    const std::string e = error_of([&] { ckpt.load_linear("l", Device::cpu(), dtype); });
    EXPECT_NE(e.find("FP8 weight \"l.weight\""), std::string::npos) << e;
    EXPECT_NE(e.find("l.weight_scale_inv"), std::string::npos) << e;
    EXPECT_NE(e.find("refusing"), std::string::npos) << e;
  }
  const std::string e = error_of([&] { ckpt.load_linear("odd", Device::cpu(), kFloat32); });
  EXPECT_NE(e.find("scale \"odd.weight_scale_inv\""), std::string::npos) << e;
  // A plain load would drop the scale: refused.
  EXPECT_NE(error_of([&] { ckpt.load("l.weight", Device::cpu(), kFloat32); }).find("load_linear"), std::string::npos);
}

TEST_F(CheckpointTest, FloatQuantizedToFp8AtLoadRoundTrips) {
  const Tensor w = randn({200, 130}, kFloat32, Device::cpu(), 7).to(kBFloat16);
  save("model.safetensors", {{"l.weight", w}});
  const Weight q = Checkpoint(dir_.string()).load_linear("l", Device::cpu(), kFloat8_e4m3fn);
  ASSERT_EQ(q.weight.dtype(), kFloat8_e4m3fn);
  ASSERT_EQ(q.scale.sizes(), (std::vector<int64_t>{2, 2}));
  const std::vector<float> ref = w.to(kFloat32).to_vector<float>();
  const std::vector<float> s = q.scale.to_vector<float>();
  // Each block's scale is its amax / 448 (e4m3fn's largest value).
  std::vector<double> amax(4, 0);
  for (int64_t r = 0; r < 200; ++r) {
    for (int64_t c = 0; c < 130; ++c) {
      double& m = amax[static_cast<size_t>((r / 128) * 2 + c / 128)];
      m = std::max(m, std::fabs(static_cast<double>(ref[static_cast<size_t>(r * 130 + c)])));
    }
  }
  for (size_t b = 0; b < 4; ++b) EXPECT_NEAR(s[b], amax[b] / 448, 1e-7 * amax[b]) << b;
  // q * scale is within e4m3fn's rounding (3 mantissa bits: 1/16 relative, subnormal steps below).
  const std::vector<float> deq = dequantized_by_hand(q.weight, q.scale).to_vector<float>();
  for (int64_t r = 0; r < 200; ++r) {
    for (int64_t c = 0; c < 130; ++c) {
      const size_t i = static_cast<size_t>(r * 130 + c);
      const double block_scale = s[static_cast<size_t>((r / 128) * 2 + c / 128)];
      ASSERT_LE(std::fabs(deq[i] - ref[i]), std::fabs(ref[i]) / 16 + block_scale * std::ldexp(1.0, -10)) << r << "," << c;
    }
  }
}

/// Hub-layout fp8 experts with exact values and the given scales per expert.
struct Fp8Experts {
  std::map<std::string, Tensor> tensors;
  std::vector<Tensor> gate, up, down, gate_scale, up_scale, down_scale;
};

Fp8Experts fp8_hub_experts(const std::string& prefix, int64_t e, int64_t inter, int64_t hidden,
                           const std::function<Tensor(int64_t j, int64_t which, int64_t n, int64_t k)>& scale) {
  Fp8Experts out;
  for (int64_t j = 0; j < e; ++j) {
    const std::string p = prefix + ".experts." + std::to_string(j) + ".";
    out.gate.push_back(exact_fp8({inter, hidden}, 0.125f * static_cast<float>(j)));
    out.up.push_back(exact_fp8({inter, hidden}, -0.125f * static_cast<float>(j)));
    out.down.push_back(exact_fp8({hidden, inter}, 0.25f + 0.125f * static_cast<float>(j)));
    out.gate_scale.push_back(scale(j, 0, inter, hidden));
    out.up_scale.push_back(scale(j, 1, inter, hidden));
    out.down_scale.push_back(scale(j, 2, hidden, inter));
    out.tensors[p + "gate_proj.weight"] = out.gate.back();
    out.tensors[p + "up_proj.weight"] = out.up.back();
    out.tensors[p + "down_proj.weight"] = out.down.back();
    out.tensors[p + "gate_proj.weight_scale_inv"] = out.gate_scale.back();
    out.tensors[p + "up_proj.weight_scale_inv"] = out.up_scale.back();
    out.tensors[p + "down_proj.weight_scale_inv"] = out.down_scale.back();
  }
  return out;
}

/// Rows of `parts` stacked, element by element: [E, sum of rows, K].
Tensor stacked_by_hand(const std::vector<std::vector<Tensor>>& parts_per_expert) {
  std::vector<float> values;
  int64_t rows = 0, cols = 0;
  for (const auto& parts : parts_per_expert) {
    rows = 0;
    for (const Tensor& part : parts) {
      for (float v : part.to(kFloat32).to_vector<float>()) values.push_back(v);
      rows += part.size(0);
      cols = part.size(-1);
    }
  }
  return tensor<float>(values, {static_cast<int64_t>(parts_per_expert.size()), rows, cols});
}

TEST_F(CheckpointTest, Fp8ExpertsTensorwiseScalesBecomeOnePerChannel) {
  const Fp8Experts x = fp8_hub_experts("m.mlp", kE, kI, kH, [](int64_t j, int64_t which, int64_t, int64_t) {
    return tensor<float>({std::ldexp(1.0f, static_cast<int>(which == 1 ? j : -j) + (which == 2 ? 3 : 0))}, {});
  });
  save("model.safetensors", x.tensors);
  Checkpoint ckpt(dir_.string());
  const MoeExperts kept = ckpt.load_experts("m.mlp", kE, Device::cpu(), kFloat8_e4m3fn);
  std::vector<std::vector<Tensor>> gate_up_parts, down_parts, gate_up_scales;
  for (int64_t j = 0; j < kE; ++j) {
    const auto u = static_cast<size_t>(j);
    gate_up_parts.push_back({x.gate[u], x.up[u]});
    down_parts.push_back({x.down[u]});
    gate_up_scales.push_back({x.gate_scale[u].expand({kI}).reshape({kI, 1}), x.up_scale[u].expand({kI}).reshape({kI, 1})});
  }
  EXPECT_EQ(kept.gate_up.dtype(), kFloat8_e4m3fn);
  EXPECT_TENSOR_EQ(kept.gate_up.to(kFloat32), stacked_by_hand(gate_up_parts));
  EXPECT_TENSOR_EQ(kept.down.to(kFloat32), stacked_by_hand(down_parts));
  EXPECT_TENSOR_EQ(kept.gate_up_scale, stacked_by_hand(gate_up_scales).reshape({kE, 2 * kI}));
  EXPECT_EQ(kept.down_scale.sizes(), std::vector<int64_t>{kE});
  EXPECT_EQ(kept.down_scale.to_vector<float>(), (std::vector<float>{8.f, 4.f, 2.f}));  // 2^(3 - j)

  const MoeExperts f32 = ckpt.load_experts("m.mlp", kE, Device::cpu(), kFloat32);
  std::vector<std::vector<Tensor>> dequant_gate_up, dequant_down;
  for (size_t j = 0; j < static_cast<size_t>(kE); ++j) {
    dequant_gate_up.push_back({dequantized_by_hand(x.gate[j], x.gate_scale[j].reshape({1})),
                               dequantized_by_hand(x.up[j], x.up_scale[j].reshape({1}))});
    dequant_down.push_back({dequantized_by_hand(x.down[j], x.down_scale[j].reshape({1}))});
  }
  EXPECT_TENSOR_EQ(f32.gate_up, stacked_by_hand(dequant_gate_up));
  EXPECT_TENSOR_EQ(f32.down, stacked_by_hand(dequant_down));
}

TEST_F(CheckpointTest, Fp8ExpertsBlockScalesStackWhenBlocksTileI) {
  constexpr int64_t e = 2, inter = 128, hidden = 130;
  const Fp8Experts x = fp8_hub_experts("m.mlp", e, inter, hidden, [](int64_t j, int64_t which, int64_t n, int64_t k) {
    std::vector<float> v;
    for (int64_t b = 0; b < ceil_div(n, 128) * ceil_div(k, 128); ++b) v.push_back(std::ldexp(1.0f, static_cast<int>(b + j - which)));
    return tensor<float>(v, {ceil_div(n, 128), ceil_div(k, 128)});
  });
  save("model.safetensors", x.tensors);
  Checkpoint ckpt(dir_.string());
  const MoeExperts kept = ckpt.load_experts("m.mlp", e, Device::cpu(), kFloat8_e4m3fn);
  std::vector<std::vector<Tensor>> gate_up, gate_up_scale, down, down_scale, dequant_gate_up, dequant_down;
  for (size_t j = 0; j < static_cast<size_t>(e); ++j) {
    gate_up.push_back({x.gate[j], x.up[j]});
    gate_up_scale.push_back({x.gate_scale[j], x.up_scale[j]});
    down.push_back({x.down[j]});
    down_scale.push_back({x.down_scale[j]});
    dequant_gate_up.push_back({dequantized_by_hand(x.gate[j], x.gate_scale[j]), dequantized_by_hand(x.up[j], x.up_scale[j])});
    dequant_down.push_back({dequantized_by_hand(x.down[j], x.down_scale[j])});
  }
  EXPECT_TENSOR_EQ(kept.gate_up.to(kFloat32), stacked_by_hand(gate_up));
  EXPECT_TENSOR_EQ(kept.gate_up_scale, stacked_by_hand(gate_up_scale));  // [E, 2, 2]
  EXPECT_TENSOR_EQ(kept.down.to(kFloat32), stacked_by_hand(down));
  EXPECT_TENSOR_EQ(kept.down_scale, stacked_by_hand(down_scale));  // [E, 2, 1]
  const MoeExperts f32 = ckpt.load_experts("m.mlp", e, Device::cpu(), kFloat32);
  EXPECT_TENSOR_EQ(f32.gate_up, stacked_by_hand(dequant_gate_up));
  EXPECT_TENSOR_EQ(f32.down, stacked_by_hand(dequant_down));
}

TEST_F(CheckpointTest, Fp8ExpertBlocksThatDoNotTileIKeepGateAndUpApart) {
  constexpr int64_t e = 2, inter = 130, hidden = 6;
  const Fp8Experts x = fp8_hub_experts("m.mlp", e, inter, hidden, [](int64_t j, int64_t which, int64_t n, int64_t k) {
    return full({ceil_div(n, 128), ceil_div(k, 128)}, std::ldexp(1.0, static_cast<int>(j + which)), kFloat32);
  });
  save("model.safetensors", x.tensors);
  const MoeExperts kept = Checkpoint(dir_.string()).load_experts("m.mlp", e, Device::cpu(), kFloat8_e4m3fn);
  EXPECT_FALSE(kept.gate_up.defined());
  std::vector<std::vector<Tensor>> gate, up, gate_scale, up_scale;
  for (size_t j = 0; j < static_cast<size_t>(e); ++j) {
    gate.push_back({x.gate[j]});
    up.push_back({x.up[j]});
    gate_scale.push_back({x.gate_scale[j]});
    up_scale.push_back({x.up_scale[j]});
  }
  EXPECT_TENSOR_EQ(kept.gate.to(kFloat32), stacked_by_hand(gate));
  EXPECT_TENSOR_EQ(kept.up.to(kFloat32), stacked_by_hand(up));
  EXPECT_TENSOR_EQ(kept.gate_scale, stacked_by_hand(gate_scale));  // [E, 2, 1]
  EXPECT_TENSOR_EQ(kept.up_scale, stacked_by_hand(up_scale));
}

TEST_F(CheckpointTest, Fp8FusedExpertsWithStackedScales) {
  // transformers 5's fused FP8 names: experts.gate_up_proj_scale_inv next to experts.gate_up_proj.
  const Tensor gate_up = exact_fp8({kE, 2 * kI, kH}, 0), down = exact_fp8({kE, kH, kI}, 0.5f);
  const Tensor gate_up_scale = tensor<float>({0.5f, 1.f, 2.f}), down_scale = tensor<float>({4.f, 0.25f, 1.f});
  save("model.safetensors", {{"m.mlp.experts.gate_up_proj", gate_up}, {"m.mlp.experts.gate_up_proj_scale_inv", gate_up_scale},
                             {"m.mlp.experts.down_proj", down}, {"m.mlp.experts.down_proj_scale_inv", down_scale}});
  Checkpoint ckpt(dir_.string());
  const MoeExperts kept = ckpt.load_experts("m.mlp", kE, Device::cpu(), kFloat8_e4m3fn);
  EXPECT_TENSOR_EQ(kept.gate_up, gate_up);
  EXPECT_TENSOR_EQ(kept.gate_up_scale, gate_up_scale);
  EXPECT_TENSOR_EQ(kept.down, down);
  EXPECT_TENSOR_EQ(kept.down_scale, down_scale);
  const MoeExperts f32 = ckpt.load_experts("m.mlp", kE, Device::cpu(), kFloat32);
  std::vector<std::vector<Tensor>> dequant;
  for (int64_t j = 0; j < kE; ++j) dequant.push_back({dequantized_by_hand(gate_up.select(0, j), gate_up_scale.narrow(0, j, 1))});
  EXPECT_TENSOR_EQ(f32.gate_up, stacked_by_hand(dequant));
}

TEST_F(CheckpointTest, FloatExpertsQuantizedAtLoad) {
  save("model.safetensors", hub_experts("m.mlp"));
  const MoeExperts q = Checkpoint(dir_.string()).load_experts("m.mlp", kE, Device::cpu(), kFloat8_e4m3fn);
  const auto [gate_up_ref, down_ref] = hand_stacked();
  ASSERT_EQ(q.gate_up.dtype(), kFloat8_e4m3fn);
  ASSERT_EQ(q.gate_up_scale.sizes(), (std::vector<int64_t>{kE, 1, 1}));  // one 128x128 block per matrix
  ASSERT_EQ(q.down_scale.sizes(), (std::vector<int64_t>{kE, 1, 1}));
  for (int64_t j = 0; j < kE; ++j) {
    const Tensor ref = gate_up_ref.select(0, j);
    const double amax = ember::amax(ember::abs(ref)).item<float>();
    EXPECT_NEAR(q.gate_up_scale.select(0, j).item<float>(), amax / 448, 1e-7 * amax);
    const Tensor deq = dequantized_by_hand(q.gate_up.select(0, j), q.gate_up_scale.select(0, j));
    const std::vector<float> a = deq.to_vector<float>(), b = ref.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(std::fabs(a[i] - b[i]), std::fabs(b[i]) / 16 + amax / 448 / 512) << i;
  }
}

// ---- memory plan ------------------------------------------------------------------------------------

TEST_F(CheckpointTest, MemoryPlanBytesForAKnownConfig) {
  save("model.safetensors", {{"model.embed_tokens.weight", zeros({128, 32})},
                             {"model.layers.0.self_attn.q_proj.weight", zeros({32, 32}, kBFloat16)},
                             {"model.layers.0.mlp.experts.gate_up_proj", zeros({4, 32, 32})},
                             {"ids", zeros({3}, kInt64)}});
  ModelConfig config;
  config.model_type = "qwen3_moe";
  config.vocab_size = 128;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 8;
  config.num_experts = 4;
  config.num_experts_per_tok = 2;
  config.moe_intermediate_size = 16;
  Checkpoint ckpt(dir_.string());

  const MemoryPlan bf16 = plan_memory(config, ckpt, Device::cpu(), kBFloat16, /*max_seq_len=*/100, /*batch=*/2);
  // Floating tensors at 2 bytes: 128*32*2 + 32*32*2 + 4*32*32*2; int64 ids as stored: 3*8.
  EXPECT_EQ(bf16.weight_bytes, 8192u + 2048 + 8192 + 24);
  // 2 (K and V) * 2 layers * 2 batch * 100 positions * 2 KV heads * 8 head_dim * 2 bytes.
  EXPECT_EQ(bf16.kv_cache_bytes, 25600u);
  // Logits and probabilities 2 * 2 * 128 * 4 = 2048; a chunk of 2 * 100 tokens of
  // (4*32 + (4 + 2*2)*8 + 2*2*16 (every layer MoE: 2 * top_k * moe_I)) = 256 values * 2 bytes = 102400;
  // scores 2 * 4 heads * 100 * 100 * 4 = 320000.
  EXPECT_EQ(bf16.workspace_bytes, 2048u + 102400 + 320000);
  EXPECT_EQ(bf16.total(), bf16.weight_bytes + bf16.kv_cache_bytes + bf16.workspace_bytes);
  EXPECT_GT(bf16.available_bytes, 0u);  // MemAvailable

  const MemoryPlan fp8 = plan_memory(config, ckpt, Device::cpu(), kFloat8_e4m3fn, 100, 2);
  // Embedding in bf16 8192; q_proj 1024 bytes + one fp32 block scale; the fused experts 4096 bytes
  // + 4 block scales; ids 24.
  EXPECT_EQ(fp8.weight_bytes, 8192u + 1024 + 4 + 4096 + 16 + 24);
  EXPECT_EQ(fp8.kv_cache_bytes, 25600u);  // bf16 activations
  EXPECT_EQ(fp8.workspace_bytes, bf16.workspace_bytes);

  // A dense layer (mlp_only_layers) widens the activations to 2 * intermediate_size = 128.
  config.mlp_only_layers = {1};
  const MemoryPlan mixed = plan_memory(config, ckpt, Device::cpu(), kFloat32, 100, 2);
  EXPECT_EQ(mixed.workspace_bytes, 2048u + 200u * (128 + 64 + 128) * 4 + 320000);
  // max_seq_len beyond the 512-token chunk: chunk 512, scores over the whole length.
  const MemoryPlan long_context = plan_memory(config, ckpt, Device::cpu(), kFloat32, 1000, 1);
  EXPECT_EQ(long_context.kv_cache_bytes, 2u * 2 * 1 * 1000 * 2 * 8 * 4);
  EXPECT_EQ(long_context.workspace_bytes, 1024u + 512u * (128 + 64 + 128) * 4 + 4u * 512 * 1000 * 4);
}

TEST(MemoryPlanTest, CheckFitsNamesBothNumbersAndTheRemedies) {
  MemoryPlan plan;
  plan.weight_bytes = 30'000'000'000;
  plan.kv_cache_bytes = 10'000'000'000;
  plan.workspace_bytes = 1'200'000'000;
  plan.available_bytes = 23'900'000'000;
  const std::string e = error_of([&] { check_fits(plan, Device::cuda(0)); });
  EXPECT_NE(e.find("needs 41.2 GB, 23.9 GB available on cuda:0: use --dtype fp8, a shorter --max-seq-len, or another device"),
            std::string::npos) << e;
  EXPECT_NE(e.find("weights 30.0 GB"), std::string::npos) << e;
  plan.available_bytes = plan.total();
  EXPECT_NO_THROW(check_fits(plan, Device::cuda(0)));
  const std::string table = plan.describe();
  EXPECT_NE(table.find("weights"), std::string::npos);
  EXPECT_NE(table.find("41.2 GB"), std::string::npos) << table;
}

TEST(MemoryPlanTest, PlainProgressLinesAtEachQuarter) {
  ::testing::internal::CaptureStderr();  // not a terminal: plain lines
  const ProgressCallback progress = terminal_progress();
  for (uint64_t done = 0; done <= 1000; done += 100) progress({"load", "model.safetensors", done, 1000});
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  EXPECT_NE(out.find(" 30%"), std::string::npos) << out;  // the first event past 25%
  EXPECT_NE(out.find("100%"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
}

// ---- a checkpoint written by transformers -----------------------------------------------------------

TEST(CheckpointFixtureTest, TransformersTinyQwen3MoeInBothLayouts) {
  const std::string fused_dir = ember::test::fixture_path("checkpoint/qwen3_moe_tiny");
  const std::string hub_dir = ember::test::fixture_path("checkpoint/qwen3_moe_tiny_hub");
  std::ifstream in(ember::test::fixture_path("checkpoint/expected.json"));
  const nlohmann::json expected = nlohmann::json::parse(in);

  for (const std::string& dir : {fused_dir, hub_dir}) {
    const ModelConfig c = load_model_config(dir);
    EXPECT_EQ(c.model_type, expected["model_type"].get<std::string>());
    EXPECT_EQ(c.vocab_size, expected["vocab_size"].get<int64_t>());
    EXPECT_EQ(c.hidden_size, expected["hidden_size"].get<int64_t>());
    EXPECT_EQ(c.intermediate_size, expected["intermediate_size"].get<int64_t>());
    EXPECT_EQ(c.num_hidden_layers, expected["num_hidden_layers"].get<int64_t>());
    EXPECT_EQ(c.num_attention_heads, expected["num_attention_heads"].get<int64_t>());
    EXPECT_EQ(c.num_key_value_heads, expected["num_key_value_heads"].get<int64_t>());
    EXPECT_EQ(c.head_dim, expected["head_dim"].get<int64_t>());
    EXPECT_EQ(c.max_position_embeddings, expected["max_position_embeddings"].get<int64_t>());
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, expected["rms_norm_eps"].get<double>());
    EXPECT_DOUBLE_EQ(c.rope_theta, expected["rope_theta"].get<double>());
    EXPECT_EQ(c.num_experts, expected["num_experts"].get<int64_t>());
    EXPECT_EQ(c.num_experts_per_tok, expected["num_experts_per_tok"].get<int64_t>());
    EXPECT_EQ(c.moe_intermediate_size, expected["moe_intermediate_size"].get<int64_t>());
    EXPECT_EQ(c.norm_topk_prob, expected["norm_topk_prob"].get<bool>());
    EXPECT_EQ(c.decoder_sparse_step, expected["decoder_sparse_step"].get<int64_t>());
    EXPECT_EQ(c.tie_word_embeddings, expected["tie_word_embeddings"].get<bool>());
    EXPECT_EQ(c.bos_token_id, expected["bos_token_id"].get<int64_t>());
    EXPECT_EQ(c.eos_token_ids, expected["eos_token_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(c.dtype, kFloat32);
  }

  const ModelConfig config = load_model_config(fused_dir);
  Checkpoint fused(fused_dir), hub(hub_dir);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string mlp = "model.layers." + std::to_string(layer) + ".mlp";
    const MoeExperts a = fused.load_experts(mlp, config.num_experts, Device::cpu(), kFloat32);
    const MoeExperts b = hub.load_experts(mlp, config.num_experts, Device::cpu(), kFloat32);
    EXPECT_TENSOR_EQ(a.gate_up, b.gate_up);
    EXPECT_TENSOR_EQ(a.down, b.down);
    if (layer != 1) continue;
    EXPECT_EQ(a.gate_up.sizes(), expected["layer1_gate_up_shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(a.down.sizes(), expected["layer1_down_shape"].get<std::vector<int64_t>>());
    for (const auto& [stacked, key] : {std::pair{a.gate_up, "layer1_gate_up"}, std::pair{a.down, "layer1_down"}}) {
      for (const auto& e : expected[std::string(key) + "_elements"]) {
        const float value = stacked.select(0, e[0].get<int64_t>()).select(0, e[1].get<int64_t>()).select(0, e[2].get<int64_t>()).item<float>();
        EXPECT_EQ(value, e[3].get<float>()) << key << " " << e.dump();
      }
      double sum = 0;
      for (float v : stacked.to_vector<float>()) sum += v;
      EXPECT_NEAR(sum, expected[std::string(key) + "_sum"].get<double>(), 1e-9) << key;
    }
  }
  // Every other tensor is the same in both directories.
  for (const std::string& name : fused.names()) {
    if (name.find(".experts.") != std::string::npos) continue;
    EXPECT_TENSOR_EQ(fused.load(name, Device::cpu(), kFloat32), hub.load(name, Device::cpu(), kFloat32)) << name;
  }
}

}  // namespace

// The weight bytes counted from a config alone (for random-weight models) equal the bytes of
// the float32 checkpoints transformers saved for the same configs (tied embeddings, attention
// biases, a dense layer in the MoE model, Llama without QK-norm).
TEST(MemoryPlanTest, ConfigWeightBytesEqualTransformersCheckpoints) {
  for (const char* name : {"qwen3_moe", "qwen3", "llama"}) {
    const std::string dir = test::fixture_path(std::string("models/") + name);
    const Checkpoint checkpoint(dir);
    uint64_t stored = 0;
    for (const std::string& tensor : checkpoint.names()) stored += checkpoint.info(tensor).end - checkpoint.info(tensor).begin;
    EXPECT_EQ(config_weight_bytes(load_model_config(dir), kFloat32), stored) << name;
  }
}
