// The `ember` command line on the fixture models: generate (ids, text, JSON), chat, eval with
// --logits-out, bench with random weights, and user errors ("error: ...", status 1). The binary
// is found next to this test's build directory (build/tools/ember); without it the tests skip.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compare.h"
#include "engine/tokenizer.h"

namespace ember::engine {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out, err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path cli_path() { return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "tools" / "ember"; }

std::string model_dir(const std::string& name) { return test::fixture_path("models/" + name); }

const std::string kPromptIds = "17,200,3,99,45,128,7,250,61,12,180,33";

class EngineCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << cli_path() << " is not built (ninja ember_cli)";
    dir_ = fs::path(::testing::TempDir()) / ("ember_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  /// Runs `ember args` with `input` on stdin.
  CliRun ember(const std::string& args, const std::string& input = "") {
    std::ofstream(dir_ / "stdin") << input;
    const std::string command = cli_path().string() + " " + args + " < " + (dir_ / "stdin").string() + " > " +
                                (dir_ / "stdout").string() + " 2> " + (dir_ / "stderr").string();
    const int raw = std::system(command.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir_ / "stdout"), read_file(dir_ / "stderr")};
  }
  std::vector<int64_t> expected_ids(const std::string& model, const std::string& key) {
    return load_safetensors(model_dir(model) + "/expected.safetensors").at(key).to_vector<int64_t>();
  }

  fs::path dir_;
};

TEST_F(EngineCli, GenerateJsonGivesTheGreedyContinuation) {
  const CliRun run = ember("generate --model " + model_dir("llama") + " --prompt-ids " + kPromptIds +
                        " --max-new-tokens 8 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["generated_ids"].get<std::vector<int64_t>>(), expected_ids("llama", "greedy_ids"));
  EXPECT_EQ(out["prompt_ids"].get<std::vector<int64_t>>(), expected_ids("llama", "prompt_ids"));
  EXPECT_GT(out["prefill_tokens_per_second"].get<double>(), 0);
  EXPECT_GT(out["decode_tokens_per_second"].get<double>(), 0);
  EXPECT_EQ(out["decode_steps"].get<int64_t>(), 7);
}

TEST_F(EngineCli, GenerateStreamsTheDecodedText) {
  // Without a tokenizer the ids are printed; with one (qwen3) the text, which must be the
  // decoding of the ids the JSON run reports.
  const CliRun ids = ember("generate --model " + model_dir("qwen3_moe") + " --prompt-ids " + kPromptIds + " --max-new-tokens 8");
  ASSERT_EQ(ids.status, 0) << ids.err;
  EXPECT_EQ(ids.out, "218 251 33 218 248 230 221 10 \n");
  EXPECT_NE(ids.err.find("decode: 7 tokens"), std::string::npos) << ids.err;

  const std::string args = "generate --model " + model_dir("qwen3") + " --prompt 'Hello world, this is' --max-new-tokens 6";
  const CliRun text = ember(args);
  const CliRun json = ember(args + " --json");
  ASSERT_EQ(text.status, 0) << text.err;
  ASSERT_EQ(json.status, 0) << json.err;
  const auto out = nlohmann::json::parse(json.out);
  const Tokenizer tokenizer = Tokenizer::from_file(model_dir("qwen3") + "/tokenizer.json");
  EXPECT_EQ(out["prompt_ids"].get<std::vector<int64_t>>(), tokenizer.encode("Hello world, this is"));
  const std::string decoded = tokenizer.decode(out["generated_ids"].get<std::vector<int64_t>>());
  EXPECT_EQ(out["text"].get<std::string>(), decoded);
  EXPECT_EQ(text.out, decoded + "\n");
}

TEST_F(EngineCli, EvalPrintsPerplexityAndWritesLogits) {
  const std::string logits_path = (dir_ / "logits.safetensors").string();
  const CliRun run = ember("eval --model " + model_dir("qwen3_moe") + " --prompt-ids " + kPromptIds + " --logits-out " +
                        logits_path + " --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["predicted_tokens"].get<int64_t>(), 11);
  EXPECT_NEAR(out["perplexity"].get<double>(), std::exp(out["mean_nll"].get<double>()), 1e-9);
  const Tensor logits = load_safetensors(logits_path).at("logits");
  const Tensor expected = load_safetensors(model_dir("qwen3_moe") + "/expected.safetensors").at("logits");
  EXPECT_ALLCLOSE(logits, expected, 0, 1e-3);

  const CliRun text = ember("eval --model " + model_dir("qwen3_moe") + " --prompt-ids " + kPromptIds);
  EXPECT_EQ(text.status, 0);
  EXPECT_EQ(text.out.rfind("perplexity ", 0), 0u) << text.out;
}

TEST_F(EngineCli, ChatKeepsTheConversation) {
  const CliRun run = ember("chat --model " + model_dir("qwen3") + " --max-new-tokens 5 --no-think", "hi there\nand again\n");
  ASSERT_EQ(run.status, 0) << run.err;
  // Two replies, the second prefilling only what follows the cached first turn.
  size_t replies = 0;
  for (size_t at = run.err.find("prefill: "); at != std::string::npos; at = run.err.find("prefill: ", at + 1)) ++replies;
  EXPECT_EQ(replies, 2u) << run.err;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 2) << run.out;
}

TEST_F(EngineCli, BenchRunsRandomWeightsFromAConfig) {
  std::ofstream(dir_ / "tiny.json") << R"({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 64,
    "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
    "max_position_embeddings": 256, "torch_dtype": "bfloat16"})";
  const CliRun run = ember("bench --random-weights " + (dir_ / "tiny.json").string() + " --prompt-len 20 --gen-len 5 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["prompt_tokens"].get<int64_t>(), 20);
  EXPECT_EQ(out["decode_steps"].get<int64_t>(), 4);
  EXPECT_EQ(out["dtype"].get<std::string>(), "bfloat16");  // auto: the config's dtype
  EXPECT_GT(out["decode_tokens_per_second"].get<double>(), 0);
}

TEST_F(EngineCli, UserErrorsExitWithStatusOne) {
  const std::string qwen3 = " --model " + model_dir("qwen3");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --model /nonexistent/model --prompt-ids 1", "does not exist"},
      {"generate" + qwen3, "expected --prompt TEXT or --prompt-ids"},
      {"generate" + qwen3 + " --prompt-ids 1,x", "--prompt-ids: expected comma-separated token ids"},
      {"generate" + qwen3 + " --prompt-ids 1,99999", "token id 99999"},
      {"generate" + qwen3 + " --prompt-ids 1,2 --max-seq-len 4 --max-new-tokens 8", "exceeds --max-seq-len 4"},
      {"generate" + qwen3 + " --prompt-ids 1,2 --top-p 2", "top_p"},
      {"generate" + qwen3 + " --prompt-ids 1,2 --dtype int4", "expected auto, f32, bf16, f16 or fp8"},
      {"generate" + qwen3 + " --prompt-ids 1,2 --device tpu", "device"},
      {"generate" + qwen3 + " --prompt-ids 1 --max-new-tokens many", "--max-new-tokens"},
      {"generate --model " + model_dir("llama") + " --prompt hello", "no tokenizer.json"},
      {"eval" + qwen3 + " --prompt-ids 7", "at least 2 tokens"},
      {"eval" + qwen3 + " --file /nonexistent/text.txt", "cannot open"},
      {"bench --prompt-len 8", "expected one of --model DIR or --random-weights"},
      {"bench --random-weights /nonexistent/config.json", "no such file"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun run = ember(args);
    EXPECT_EQ(run.status, 1) << args;
    EXPECT_EQ(run.err.rfind("error: ", 0), 0u) << args << ": " << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << args << ": " << run.err;
  }
}

}  // namespace
}  // namespace ember::engine
