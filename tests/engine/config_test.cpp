// config.json / generation_config.json: every alias seen on the hub, transformers' defaults, and
// one specific error per kind of bad file (each naming the file and the key).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "compare.h"
#include "engine/config.h"

using namespace ember;
using namespace ember::engine;
using ember::test::error_of;

namespace {

namespace fs = std::filesystem;

/// A fresh directory for this test, removed at the end.
class ConfigDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ember_config_" + std::to_string(::getpid()) + "_" + test->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& file, const std::string& text) { std::ofstream(dir_ / file) << text; }
  /// config.json = the minimal Qwen3-MoE keys + `extra` (a JSON fragment starting with a comma, or empty).
  void write_moe(const std::string& extra) {
    write("config.json", R"({"model_type": "qwen3_moe", "vocab_size": 128, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 16)" + extra + "}");
  }
  ModelConfig load() { return load_model_config(dir_.string()); }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

  fs::path dir_;
};

using ConfigTest = ConfigDir;

TEST_F(ConfigTest, TransformersFiveQwen3MoeConfig) {
  // What transformers 5.24 save_pretrained writes (rope_parameters, dtype, num_local_experts).
  write("config.json", R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "decoder_sparse_step": 1, "dtype": "bfloat16", "eos_token_id": null,
    "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 16, "norm_topk_prob": false,
    "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "num_local_experts": 4, "output_router_logits": false,
    "pad_token_id": null, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "transformers_version": "5.24.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 128})");
  const ModelConfig c = load();
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.vocab_size, 128);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.rope_llama3.has_value());
  EXPECT_EQ(c.dtype, kBFloat16);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 16);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.fp8);
}

TEST_F(ConfigTest, HubQwen3MoeConfigAliases) {
  // The Qwen3-30B-A3B hub style: num_experts, torch_dtype, top-level rope_theta, rope_scaling null.
  write_moe(R"(, "num_experts": 8, "torch_dtype": "float16", "rope_theta": 10000000, "rope_scaling": null,
    "num_key_value_heads": 1, "head_dim": 16, "norm_topk_prob": true, "eos_token_id": 151645,
    "bos_token_id": 151643, "tie_word_embeddings": true, "attention_bias": true)");
  const ModelConfig c = load();
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.dtype, kFloat16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_FALSE(c.rope_llama3.has_value());
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
}

TEST_F(ConfigTest, DefaultsWhenKeysAreAbsentOrNull) {
  write_moe(R"(, "num_local_experts": 4, "head_dim": null, "num_key_value_heads": null)");
  const ModelConfig c = load();
  EXPECT_EQ(c.head_dim, 8);               // hidden / heads
  EXPECT_EQ(c.num_key_value_heads, 4);    // = heads
  EXPECT_EQ(c.dtype, kFloat32);           // no dtype: float32
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000);  // transformers' default
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.norm_topk_prob);  // Qwen3MoeConfig's default
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
}

TEST_F(ConfigTest, SparseStepAndMlpOnlyLayersDecideMoeLayers) {
  write_moe(R"(, "num_experts": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3])");
  const ModelConfig c = load();
  EXPECT_EQ(c.decoder_sparse_step, 2);
  EXPECT_EQ(c.mlp_only_layers, std::vector<int64_t>{3});
  // (layer + 1) % 2 == 0 and not listed: only layer 1.
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_FALSE(c.is_moe_layer(3));
}

TEST_F(ConfigTest, EosTokenIdList) {
  write_moe(R"(, "num_experts": 4, "eos_token_id": [1, 2, 7])");
  EXPECT_EQ(load().eos_token_ids, (std::vector<int64_t>{1, 2, 7}));
}

TEST_F(ConfigTest, EosTokenIdFromGenerationConfigWhenTheConfigLacksIt) {
  write_moe(R"(, "num_experts": 4)");
  write("generation_config.json", R"({"eos_token_id": [5, 9], "bos_token_id": 1})");
  EXPECT_EQ(load().eos_token_ids, (std::vector<int64_t>{5, 9}));
  write_moe(R"(, "num_experts": 4, "eos_token_id": 3)");
  EXPECT_EQ(load().eos_token_ids, std::vector<int64_t>{3});  // the config's own wins
}

TEST_F(ConfigTest, Llama3RopeScalingInRopeScalingWithTypeKey) {
  write("config.json", R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "rope_theta": 500000.0,
    "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "torch_dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009]})");
  const ModelConfig c = load();
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000);
  ASSERT_TRUE(c.rope_llama3.has_value());
  EXPECT_DOUBLE_EQ(c.rope_llama3->factor, 32);
  EXPECT_DOUBLE_EQ(c.rope_llama3->low_freq_factor, 1);
  EXPECT_DOUBLE_EQ(c.rope_llama3->high_freq_factor, 4);
  EXPECT_EQ(c.rope_llama3->original_max_position_embeddings, 8192);
  EXPECT_EQ(c.max_position_embeddings, 2048);  // LlamaConfig's default
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_EQ(c.head_dim, 8);
}

TEST_F(ConfigTest, Llama3RopeInRopeParametersWithRopeType) {
  // transformers 5: rope_theta moves inside rope_parameters next to the scaling.
  write("config.json", R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 8, "dtype": "float32",
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 2.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 4096}})");
  const ModelConfig c = load();
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000);
  ASSERT_TRUE(c.rope_llama3.has_value());
  EXPECT_DOUBLE_EQ(c.rope_llama3->factor, 8);
  EXPECT_DOUBLE_EQ(c.rope_llama3->low_freq_factor, 2);
  EXPECT_EQ(c.rope_llama3->original_max_position_embeddings, 4096);
  EXPECT_EQ(c.num_key_value_heads, 8);
}

TEST_F(ConfigTest, DenseQwen3) {
  write("config.json", R"({"model_type": "qwen3", "vocab_size": 100, "hidden_size": 16, "intermediate_size": 40,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 12,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "rope_theta": 1000000})");
  const ModelConfig c = load();
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_experts, 0);
}

TEST_F(ConfigTest, Fp8QuantizationConfig) {
  write_moe(R"(, "num_experts": 4, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
    "activation_scheme": "dynamic", "weight_block_size": [128, 128]})");
  ModelConfig c = load();
  EXPECT_TRUE(c.fp8);
  EXPECT_EQ(c.fp8_block_size, (std::vector<int64_t>{128, 128}));
  write_moe(R"(, "num_experts": 4, "quantization_config": {"quant_method": "fp8"})");
  c = load();
  EXPECT_TRUE(c.fp8);
  EXPECT_TRUE(c.fp8_block_size.empty());
}

TEST_F(ConfigTest, UnsupportedQuantizationNamesWhatIsSupported) {
  write_moe(R"(, "num_experts": 4, "quantization_config": {"quant_method": "gptq", "bits": 4})");
  const std::string e = error_of([&] { load(); });
  EXPECT_NE(e.find(path("config.json")), std::string::npos) << e;
  EXPECT_NE(e.find("quantization_config.quant_method"), std::string::npos) << e;
  EXPECT_NE(e.find("\"fp8\""), std::string::npos) << e;
  EXPECT_NE(e.find("gptq"), std::string::npos) << e;
  write_moe(R"(, "num_experts": 4, "quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]})");
  EXPECT_NE(error_of([&] { load(); }).find("expected [128, 128] or none"), std::string::npos);
}

TEST_F(ConfigTest, UnsupportedRopeTypeIsAnError) {
  write_moe(R"(, "num_experts": 4, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})");
  const std::string e = error_of([&] { load(); });
  EXPECT_NE(e.find("rope_scaling.rope_type"), std::string::npos) << e;
  EXPECT_NE(e.find("yarn"), std::string::npos) << e;
  EXPECT_NE(e.find("\"llama3\""), std::string::npos) << e;
}

TEST_F(ConfigTest, Llama3RopeMissingAFactorNamesIt) {
  write_moe(R"(, "num_experts": 4, "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192})");
  const std::string e = error_of([&] { load(); });
  EXPECT_NE(e.find("\"rope_parameters.high_freq_factor\" is missing"), std::string::npos) << e;
}

TEST_F(ConfigTest, UnknownModelTypeListsTheSupportedOnes) {
  write("config.json", R"({"model_type": "mixtral", "vocab_size": 8})");
  const std::string e = error_of([&] { load(); });
  EXPECT_NE(e.find("qwen3_moe, qwen3, llama"), std::string::npos) << e;
  EXPECT_NE(e.find("\"mixtral\""), std::string::npos) << e;
  EXPECT_NE(e.find(path("config.json")), std::string::npos) << e;
}

TEST_F(ConfigTest, MissingFileInvalidJsonWrongTypeMissingKey) {
  std::string e = error_of([&] { load(); });
  EXPECT_NE(e.find(path("config.json")), std::string::npos) << e;
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;

  write("config.json", R"({"model_type": "qwen3", )");
  e = error_of([&] { load(); });
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find(path("config.json")), std::string::npos) << e;

  write_moe(R"(, "num_experts": "4")");
  e = error_of([&] { load(); });
  EXPECT_NE(e.find("\"num_experts\": expected an integer, got string \"4\""), std::string::npos) << e;
  EXPECT_NE(e.find(path("config.json")), std::string::npos) << e;

  write_moe(R"(, "num_experts": 4, "norm_topk_prob": "yes")");
  EXPECT_NE(error_of([&] { load(); }).find("\"norm_topk_prob\": expected true or false"), std::string::npos);

  write_moe(R"(, "num_experts": 4, "torch_dtype": "float64")");
  EXPECT_NE(error_of([&] { load(); }).find("\"torch_dtype\": expected \"float32\", \"bfloat16\" or \"float16\", got \"float64\""),
            std::string::npos);

  write_moe("");  // neither num_experts nor num_local_experts
  e = error_of([&] { load(); });
  EXPECT_NE(e.find("\"num_experts\" is missing"), std::string::npos) << e;

  write_moe(R"(, "num_experts": 4, "eos_token_id": [1, "x"])");
  EXPECT_NE(error_of([&] { load(); }).find("\"eos_token_id\": expected a list of integers"), std::string::npos);

  EXPECT_NE(error_of([&] { load_model_config(path("nowhere")); }).find("does not exist"), std::string::npos);
}

TEST_F(ConfigTest, GenerationDefaults) {
  EXPECT_FALSE(load_generation_defaults(dir_.string()).temperature.has_value());  // no file: all unset
  write("generation_config.json", R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
    "min_p": 0.0, "repetition_penalty": 1.05, "eos_token_id": [151645, 151643], "pad_token_id": 151643})");
  const GenerationDefaults g = load_generation_defaults(dir_.string());
  EXPECT_EQ(g.do_sample, true);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.95);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_DOUBLE_EQ(*g.min_p, 0.0);
  EXPECT_DOUBLE_EQ(*g.repetition_penalty, 1.05);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  write("generation_config.json", R"({"temperature": "hot"})");
  const std::string e = error_of([&] { load_generation_defaults(dir_.string()); });
  EXPECT_NE(e.find(path("generation_config.json")), std::string::npos) << e;
  EXPECT_NE(e.find("\"temperature\": expected a number"), std::string::npos) << e;
}

}  // namespace
