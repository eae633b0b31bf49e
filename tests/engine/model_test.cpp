// The decoder models against HF transformers: tiny random Qwen3-MoE, Qwen3 and Llama checkpoints
// saved by scripts/fixtures/make_model_fixtures.py with transformers' float32 logits and greedy
// continuation. Each check runs on the CPU and, where one is available, on a GPU.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compare.h"
#include "engine/generate.h"
#include "engine/layers.h"
#include "engine/model.h"

namespace ember::engine {
namespace {

struct Expected {
  std::vector<int64_t> prompt, greedy;
  Tensor logits;       // [T, V] float32
  Tensor inv_freq;     // [D / 2]
  Tensor logits_bf16;  // [T, V] transformers in bfloat16
  Tensor logits_fp8;   // [T, V] transformers in float32 with fp8-rounded projection weights
};

std::string model_dir(const std::string& name) { return test::fixture_path("models/" + name); }

Expected load_expected(const std::string& name) {
  auto tensors = load_safetensors(model_dir(name) + "/expected.safetensors");
  return {tensors.at("prompt_ids").to_vector<int64_t>(), tensors.at("greedy_ids").to_vector<int64_t>(),
          tensors.at("logits"), tensors.at("inv_freq"), tensors.at("logits_bf16"), tensors.at("logits_fp8")};
}

Tensor ids_of(const std::vector<int64_t>& ids) { return tensor<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(Device::cpu(), kFloat64) - b.to(Device::cpu(), kFloat64))).item<double>();
}

SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0;
  return params;
}

struct ModelCase {
  std::string model;
  std::string device;
  friend void PrintTo(const ModelCase& c, std::ostream* out) { *out << c.model << " on " << c.device; }
};

class ModelTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    device_ = Device::parse(GetParam().device);
    if (device_.is_cuda() && !cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
    expected_ = load_expected(GetParam().model);
  }
  std::unique_ptr<Model> load(DType dtype = kFloat32) {
    return load_model(model_dir(GetParam().model), {.device = device_, .dtype = dtype, .max_seq_len = 64});
  }

  Device device_;
  Expected expected_;
};

TEST_P(ModelTest, LogitsMatchTransformers) {
  auto model = load();
  const Tensor logits = model->forward(ids_of(expected_.prompt), 0);  // [1, T, V]
  const int64_t vocab = model->config().vocab_size;
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{1, static_cast<int64_t>(expected_.prompt.size()), vocab}));
  EXPECT_EQ(logits.dtype(), kFloat32);
  EXPECT_EQ(logits.device(), device_);
  EXPECT_LT(max_abs_diff(logits.select(0, 0), expected_.logits), 1e-3);
}

TEST_P(ModelTest, LastOnlyLogitsAreTheLastRow) {
  auto model = load();
  const Tensor last = model->forward(ids_of(expected_.prompt), 0, /*last_only=*/true);  // [1, 1, V]
  ASSERT_EQ(last.sizes(), (std::vector<int64_t>{1, 1, model->config().vocab_size}));
  EXPECT_LT(max_abs_diff(last.select(0, 0).select(0, 0), expected_.logits.select(0, -1)), 1e-3);
}

TEST_P(ModelTest, BatchRowsAreIndependent) {
  // Two sequences in one forward: the prompt, and the prompt with its first half replaced; the
  // first row must still give transformers' logits, then both decode a token at once.
  auto model = load_model(model_dir(GetParam().model),
                          {.device = device_, .dtype = kFloat32, .max_seq_len = 64, .max_batch = 2});
  std::vector<int64_t> both = expected_.prompt, other = expected_.prompt;
  for (size_t i = 0; i < other.size() / 2; ++i) other[i] = (other[i] * 7 + 3) % 256;
  both.insert(both.end(), other.begin(), other.end());
  const auto t = static_cast<int64_t>(expected_.prompt.size());
  const Tensor logits = model->forward(tensor<int64_t>(both, {2, t}), 0);  // [2, T, V]
  EXPECT_LT(max_abs_diff(logits.select(0, 0), expected_.logits), 1e-3);
  EXPECT_GT(max_abs_diff(logits.select(0, 1), expected_.logits), 1e-2);
  const Tensor next = model->forward(tensor<int64_t>({expected_.greedy[0], expected_.greedy[0]}, {2, 1}), t);  // [2, 1, V]
  auto single = load();
  single->forward(ids_of(other), 0);
  EXPECT_LT(max_abs_diff(next.select(0, 1), single->forward(ids_of({expected_.greedy[0]}), t).select(0, 0)), 1e-4);
  EXPECT_NE(test::error_of([&] { model->forward(tensor<int64_t>(std::vector<int64_t>(3, 1), {3, 1}), 0); }).find("batch size"),
            std::string::npos);
}

TEST_P(ModelTest, KvCacheDecodeMatchesFullSequence) {
  // Prefill 5 tokens, a chunk of 4 at position 5 (the masked path with start_pos > 0), then one
  // token at a time: every row must equal transformers' full-sequence logits.
  auto model = load();
  const std::vector<int64_t>& p = expected_.prompt;
  std::vector<Tensor> rows = {model->forward(ids_of({p.begin(), p.begin() + 5}), 0).select(0, 0)};
  rows.push_back(model->forward(ids_of({p.begin() + 5, p.begin() + 9}), 5).select(0, 0));
  for (size_t i = 9; i < p.size(); ++i) rows.push_back(model->forward(ids_of({p[i]}), static_cast<int64_t>(i)).select(0, 0));
  EXPECT_EQ(model->cached_positions(), static_cast<int64_t>(p.size()));
  EXPECT_LT(max_abs_diff(cat(rows, 0), expected_.logits), 1e-3);
}

TEST_P(ModelTest, KvCacheRewindsToAPrefix) {
  // A forward at an earlier start_pos overwrites the cache from there (a chat editing history).
  auto model = load();
  const std::vector<int64_t>& p = expected_.prompt;
  model->forward(ids_of({3, 1, 4, 1, 5, 9, 2, 6}), 0);
  model->forward(ids_of({p.begin(), p.begin() + 3}), 0);
  const Tensor tail = model->forward(ids_of({p.begin() + 3, p.end()}), 3).select(0, 0);  // [T - 3, V]
  EXPECT_LT(max_abs_diff(tail, expected_.logits.narrow(0, 3, static_cast<int64_t>(p.size()) - 3)), 1e-3);
}

TEST_P(ModelTest, GreedyContinuationMatchesTransformers) {
  auto model = load();
  GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(expected_.greedy.size());
  options.sampling = greedy();
  std::vector<int64_t> streamed;
  const GenerateResult result = generate(*model, expected_.prompt, options, [&](int64_t id) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_EQ(result.ids, expected_.greedy);
  EXPECT_EQ(streamed, expected_.greedy);
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(result.timings.prompt_tokens, static_cast<int64_t>(expected_.prompt.size()));
  EXPECT_EQ(result.timings.generated_tokens, options.max_new_tokens);
  EXPECT_EQ(result.timings.decode_steps, options.max_new_tokens - 1);
  EXPECT_GT(result.timings.prefill_tokens_per_second(), 0);
  EXPECT_GT(result.timings.decode_tokens_per_second(), 0);
}

TEST_P(ModelTest, GenerationStopsOnAStopId) {
  auto model = load();
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.sampling = greedy();
  options.stop_ids = {999, expected_.greedy[2]};  // the third greedy token ends it
  std::vector<int64_t> streamed;
  const GenerateResult result = generate(*model, expected_.prompt, options, [&](int64_t id) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_TRUE(result.stopped);
  ASSERT_LE(result.ids.size(), 3u);
  EXPECT_EQ(result.ids.back(), expected_.greedy[2]);
  EXPECT_EQ(streamed.size() + 1, result.ids.size());  // the stop id is not streamed
}

TEST_P(ModelTest, ContinuesFromACachedPrefix) {
  // A chat turn: the first 7 prompt tokens are already cached, only the rest is prefilled.
  auto model = load();
  const std::vector<int64_t>& p = expected_.prompt;
  model->forward(ids_of({p.begin(), p.begin() + 7}), 0);
  GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(expected_.greedy.size());
  options.sampling = greedy();
  options.cached_prefix = 7;
  const GenerateResult result = generate(*model, p, options);
  EXPECT_EQ(result.ids, expected_.greedy);
  EXPECT_EQ(result.timings.prompt_tokens, static_cast<int64_t>(p.size()) - 7);
}

TEST_P(ModelTest, PerplexityIsExpOfMeanNll) {
  // The reference: mean NLL from transformers' logits, in double.
  const auto t = static_cast<int64_t>(expected_.prompt.size());
  const Tensor log_probs = log_softmax(expected_.logits.to(kFloat64), -1);  // [T, V]
  double nll = 0;
  for (int64_t i = 0; i + 1 < t; ++i) nll -= log_probs.select(0, i).select(0, expected_.prompt[i + 1]).item<double>();
  const double expected_ppl = std::exp(nll / static_cast<double>(t - 1));

  auto model = load();
  const PerplexityResult result = perplexity(*model, expected_.prompt, /*keep_logits=*/true);
  EXPECT_EQ(result.predicted_tokens, t - 1);
  EXPECT_NEAR(result.perplexity, expected_ppl, 1e-4 * expected_ppl);
  EXPECT_NEAR(result.mean_nll, std::log(expected_ppl), 1e-4);
  ASSERT_TRUE(result.logits.defined());
  EXPECT_TRUE(result.logits.device().is_cpu());
  EXPECT_LT(max_abs_diff(result.logits, expected_.logits), 1e-3);
}

TEST_P(ModelTest, Bfloat16LogitsFollowTransformersBfloat16) {
  auto model = load(kBFloat16);
  const Tensor logits = model->forward(ids_of(expected_.prompt), 0).select(0, 0);  // [T, V]
  EXPECT_EQ(logits.dtype(), kFloat32);
  // As close to transformers' bf16 run as that run is to float32 (different summation orders).
  const double theirs = max_abs_diff(expected_.logits_bf16, expected_.logits);
  EXPECT_LT(max_abs_diff(logits, expected_.logits_bf16), 1.25 * theirs);
}

TEST_P(ModelTest, Fp8WeightsFollowTransformersWithFp8RoundedWeights) {
  auto model = load(kFloat8_e4m3fn);
  const Tensor logits = model->forward(ids_of(expected_.prompt), 0).select(0, 0);  // [T, V]
  EXPECT_EQ(logits.dtype(), kFloat32);
  // The reference rounds the same weights through fp8 but keeps float32 activations, so the
  // engine may differ by its bf16 activations' error, far below what fp8 rounding itself moves
  // (a wrong scale layout or block grid would show at that size: 0.5 to 3 on these models).
  const double bf16_error = max_abs_diff(expected_.logits_bf16, expected_.logits);
  EXPECT_LT(max_abs_diff(logits, expected_.logits_fp8), 1.5 * bf16_error);
  EXPECT_GT(max_abs_diff(expected_.logits_fp8, expected_.logits), 2 * bf16_error);  // the check has teeth
}

TEST_P(ModelTest, RopeInverseFrequenciesMatchTransformers) {
  const ModelConfig config = load_model_config(model_dir(GetParam().model));
  const std::vector<float> inv_freq = rope_inv_freq(config);
  const std::vector<float> expected = expected_.inv_freq.to_vector<float>();
  ASSERT_EQ(inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(inv_freq[i], expected[i]) << "i = " << i;
}

TEST_P(ModelTest, RefusesBadInput) {
  auto model = load();
  const int64_t vocab = model->config().vocab_size;
  EXPECT_NE(test::error_of([&] { model->forward(ids_of({1, vocab}), 0); })
                .find(fmt::format("token id: expected 0 to {}, got {}", vocab - 1, vocab)),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { model->forward(ids_of({1, 2}), 3); }).find("start position"), std::string::npos);
  EXPECT_NE(test::error_of([&] { model->forward(ids_of(std::vector<int64_t>(65, 1)), 0); }).find("max_seq_len = 64"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { model->forward(tensor<float>({1, 2}, {1, 2}), 0); }).find("token ids"),
            std::string::npos);
  GenerateOptions options;
  options.max_new_tokens = 60;
  EXPECT_NE(test::error_of([&] { generate(*model, expected_.prompt, options); }).find("max_seq_len = 64"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { perplexity(*model, {5}); }).find("at least 2"), std::string::npos);
}

std::vector<ModelCase> cases() {
  std::vector<ModelCase> out;
  for (const char* device : {"cpu", "cuda"}) {
    for (const char* model : {"qwen3_moe", "qwen3", "llama"}) out.push_back({model, device});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ModelCase>& info) {
                           return info.param.model + "_" + info.param.device;
                         });

// ---- without fixtures ------------------------------------------------------------------------------

ModelConfig tiny_moe_config() {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = 96;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 32;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.mlp_only_layers = {0};
  return c;
}

TEST(ModelRandomWeights, BuildsFromAConfigAlone) {
  const ModelConfig config = tiny_moe_config();
  RandomWeights weights(7), same(7), other(8);
  auto model = build_model(config, weights, {.dtype = kFloat32});
  EXPECT_EQ(model->max_seq_len(), 32);  // min(max_position_embeddings, 4096)
  const Tensor a = model->forward(ids_of({1, 2, 3, 4}), 0);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{1, 4, 96}));
  EXPECT_TRUE(all(eq(a, a)).item<bool>());  // finite, no NaN
  EXPECT_GT(amax(abs(a)).item<double>(), 0);
  // The numbers depend only on the seed and the tensor names.
  EXPECT_TENSOR_EQ(build_model(config, same, {.dtype = kFloat32})->forward(ids_of({1, 2, 3, 4}), 0), a);
  EXPECT_GT(max_abs_diff(build_model(config, other, {.dtype = kFloat32})->forward(ids_of({1, 2, 3, 4}), 0), a), 0);
}

TEST(ModelRandomWeights, Fp8BuildsAndRuns) {
  ModelConfig config = tiny_moe_config();
  RandomWeights weights(1);
  auto model = build_model(config, weights, {.dtype = kFloat8_e4m3fn});
  const Tensor logits = model->forward(ids_of({5, 6, 7}), 0);
  EXPECT_EQ(logits.dtype(), kFloat32);
  EXPECT_TRUE(all(eq(logits, logits)).item<bool>());
}

TEST(ModelRandomWeights, UnknownArchitectureIsRefused) {
  ModelConfig config = tiny_moe_config();
  config.model_type = "mamba";
  RandomWeights weights;
  EXPECT_NE(test::error_of([&] { build_model(config, weights, {}); })
                .find("expected one of qwen3_moe, qwen3, llama, got 'mamba'"),
            std::string::npos);
}

TEST(ModelLoad, MissingDirectoryIsAnError) {
  EXPECT_NE(test::error_of([] { load_model("/nonexistent/model", {}); }), "no error");
}

TEST(ModelLoad, FusedAndHubExpertLayoutsGiveTheSameLogits) {
  // The loader's fixture holds one Qwen3-MoE in transformers 5's fused expert layout and in the
  // hub's per-expert layout (scripts/fixtures/make_checkpoint_fixtures.py).
  auto fused = load_model(test::fixture_path("checkpoint/qwen3_moe_tiny"), {});
  auto hub = load_model(test::fixture_path("checkpoint/qwen3_moe_tiny_hub"), {});
  const Tensor ids = ids_of({1, 5, 9, 100, 42, 7, 3});
  EXPECT_TENSOR_EQ(fused->forward(ids, 0), hub->forward(ids, 0));
}

TEST(ModelLoad, WrongShapeNamesTheTensor) {
  // A config that disagrees with the weights: the error names the tensor and both shapes.
  const std::string dir = ::testing::TempDir() + "/ember_model_wrong_shape";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(model_dir("llama") + "/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(model_dir("llama") + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "\"intermediate_size\": 96", to = "\"intermediate_size\": 80";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), to);
  std::ofstream(dir + "/config.json") << text;
  const std::string error = test::error_of([&] { load_model(dir, {}); });
  EXPECT_NE(error.find("model.layers.0.mlp.gate_proj.weight: expected [80, 64] from config.json, got [96, 64]"),
            std::string::npos)
      << error;
}

TEST(ModelOptionsTest, ResolvesDtypeNames) {
  ModelConfig config;
  config.dtype = kBFloat16;
  EXPECT_EQ(resolve_dtype("auto", config), kBFloat16);
  EXPECT_EQ(resolve_dtype("f32", config), kFloat32);
  EXPECT_EQ(resolve_dtype("f16", config), kFloat16);
  EXPECT_EQ(resolve_dtype("fp8", config), kFloat8_e4m3fn);
  config.fp8 = true;
  EXPECT_EQ(resolve_dtype("auto", config), kFloat8_e4m3fn);
  EXPECT_NE(test::error_of([&] { resolve_dtype("int4", config); }).find("expected auto, f32, bf16, f16 or fp8, got 'int4'"),
            std::string::npos);
  EXPECT_EQ(activation_dtype(kFloat8_e4m3fn), kBFloat16);
}

}  // namespace
}  // namespace ember::engine
