// Checkpoint directories written in the test (ember::save_safetensors + JSON text): single file
// and sharded, the experts' two layouts, FP8 weights and scales, every kind of broken directory,
// the memory plan; and a tiny Qwen3-MoE saved by transformers (scripts/fixtures/make_checkpoint_fixtures.py).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compare.h"
#include "engine/checkpoint.h"
#include "engine/config.h"

using namespace ember;
using namespace ember::engine;
using ember::test::error_of;

namespace {

namespace fs = std::filesystem;

/// Values (k % 19 - 9) * 0.125 + offset for flat index k: distinct per tensor through `offset`.
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

}  // namespace
