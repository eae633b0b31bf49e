// The bundled model (models/kjv-moe) against transformers, from the fixture that
// scripts/bundled_model_fixtures.py wrote next to it: the tokenizer's ids for the held-out
// excerpt, the perplexity there (the issue asks for 0.5%; float32 on both sides agrees far
// closer), and the greedy continuation of a prompt. On the CPU, and on CUDA when present.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ember/cuda.h"
#include "engine/config.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

using namespace ember;
using namespace ember::engine;

namespace {

const std::string kModelDir = std::string(EMBER_SOURCE_DIR) + "/models/kjv-moe";

nlohmann::json expected_fixture() {
  std::ifstream in(kModelDir + "/expected_perplexity.json");
  return nlohmann::json::parse(in);
}

std::string heldout_text() {
  std::ifstream in(kModelDir + "/heldout.txt", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class BundledModel : public ::testing::TestWithParam<const char*> {
 protected:
  Device device() const { return Device::parse(GetParam()); }
  void SetUp() override {
    if (device().is_cuda() && !cuda::is_available()) GTEST_SKIP() << cuda::availability().reason;
  }
};

TEST(BundledModelTokenizer, HeldOutIdsEqualHuggingFaceTokenizers) {
  const Tokenizer tokenizer = Tokenizer::from_file(kModelDir + "/tokenizer.json");
  EXPECT_EQ(tokenizer.encode(heldout_text()), expected_fixture()["tokens"].get<std::vector<int64_t>>());
}

TEST_P(BundledModel, PerplexityMatchesTransformersWithinHalfAPercent) {
  const nlohmann::json expected = expected_fixture();
  const auto ids = expected["tokens"].get<std::vector<int64_t>>();
  auto model = load_model(kModelDir, {.device = device(), .dtype = kFloat32, .max_seq_len = static_cast<int64_t>(ids.size())});
  const PerplexityResult result = perplexity(*model, ids);
  const double want = expected["perplexity"].get<double>();
  EXPECT_NEAR(result.perplexity, want, 0.005 * want);
  EXPECT_NEAR(result.mean_nll, expected["mean_nll"].get<double>(), 1e-4);  // what float32 on both sides gives
}

TEST_P(BundledModel, GreedyContinuationEqualsTransformers) {
  const nlohmann::json greedy = expected_fixture()["greedy"];
  const auto prompt = greedy["prompt_tokens"].get<std::vector<int64_t>>();
  const auto want = greedy["new_tokens"].get<std::vector<int64_t>>();
  auto model = load_model(kModelDir, {.device = device(), .dtype = kFloat32,
                                      .max_seq_len = static_cast<int64_t>(prompt.size() + want.size())});
  GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(want.size());
  options.sampling.temperature = 0;
  options.stop_ids = load_model_config(kModelDir).eos_token_ids;  // transformers stops there too
  EXPECT_EQ(generate(*model, prompt, options, {}).ids, want);
}

INSTANTIATE_TEST_SUITE_P(Devices, BundledModel, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
