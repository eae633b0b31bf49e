// The `ember` command line:
//   ember info                    devices, build, CUDA availability and why not
//   ember demo                    a short tour of the tensor ops
//   ember generate --model DIR    complete a prompt, text streamed to stdout (or one JSON object)
//   ember chat --model DIR        a conversation over stdin with the ChatML template
//   ember eval --model DIR        perplexity of a text or of token ids (and the logits to a file)
//   ember bench --model DIR | --random-weights CONFIG   prefill and decode tokens/s, peak memory
// User errors print "error: ..." and exit with status 1.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <ember/ember.h>

#include "engine/chat_template.h"
#include "engine/checkpoint.h"
#include "engine/config.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

namespace {

using namespace ember;
using namespace ember::engine;
namespace fs = std::filesystem;

int run_info() {
  fmt::print("ember {}\n", EMBER_VERSION);
  const auto cuda_available = cuda::availability();
  fmt::print("CUDA runtime built against: {}\n",
             cuda::runtime_version()
                 ? fmt::format("{}.{}", cuda::runtime_version() / 1000, cuda::runtime_version() % 1000 / 10)
                 : std::string("none"));
  fmt::print("CUDA available: {}{}\n", cuda_available.available ? "yes" : "no",
             cuda_available.available ? "" : " (" + cuda_available.reason + ")");
  fmt::print("devices: cpu");
  for (int i = 0; i < cuda::device_count(); ++i) fmt::print(", {}", Device::cuda(i).str());
  fmt::print("\n");
  return 0;
}

void show(const char* label, const Tensor& t) {
  const Tensor f = t.to(Device::cpu()).to(kFloat64);
  fmt::print("{:<34} {} {:<9} {}\n", label, fmt::format("[{}]", fmt::join(t.sizes(), ",")), name(t.dtype()),
             fmt::join(f.to_vector<double>(), " "));
}

int run_demo(const std::string& device_name) {
  const Device device = Device::parse(device_name);
  const Tensor x = tensor<float>({1, -2, 3, 0.5f, 448, 465}, {2, 3}).to(device);
  show("x", x);
  show("x.to(float8_e4m3fn) (465 -> 448)", x.to(kFloat8_e4m3fn));
  show("saturate_cast(x * 1e5, float8_e5m2)", saturate_cast(x * 1e5, kFloat8_e5m2));
  show("x.t()", x.t().contiguous());
  show("softmax(x, -1)", softmax(x, -1));
  show("sum(x, {0})", sum(x, {0}));
  show("x @ x.t()", matmul(x, x.t()));
  show("x + arange(3) (broadcast)", x + arange(0, 3, 1, kInt64, device));
  const auto [mantissa, exponent] = frexp(x);
  show("frexp(x) mantissa", mantissa);
  show("frexp(x) exponent", exponent);
  show("logspace(0, 3, 4)", logspace(0, 3, 4, 10, kFloat32, device));
  show("take(x, [-1, 0])", take(x, tensor<int64_t>({-1, 0}).to(device)));
  return 0;
}

// ---- shared by the model commands ----------------------------------------------------------------

/// A user error of the command line (not of a library call): printed as "error: ..." too.
[[noreturn]] void usage_error(const std::string& message) { throw Error(message); }

struct ModelFlags {
  std::string dir;
  std::string device = "cpu";
  std::string dtype = "auto";
  int64_t max_seq_len = 0;
};

void add_model_flags(CLI::App* command, ModelFlags& flags, bool required = true) {
  auto* model = command->add_option("--model", flags.dir, "model directory (config.json, *.safetensors, tokenizer.json)");
  if (required) model->required();
  command->add_option("--device", flags.device, "cpu or cuda[:N]")->capture_default_str();
  command->add_option("--dtype", flags.dtype, "auto, f32, bf16, f16 or fp8 (fp8 weights, bf16 activations)")
      ->capture_default_str();
  command->add_option("--max-seq-len", flags.max_seq_len,
                      "positions the KV cache holds (default: min(max_position_embeddings, 4096))");
}

struct SamplingFlags {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
};

void add_sampling_flags(CLI::App* command, SamplingFlags& flags) {
  command->add_option("--temperature", flags.temperature, "0 = greedy");
  command->add_option("--top-k", flags.top_k, "keep the k most likely tokens (0 = all)");
  command->add_option("--top-p", flags.top_p, "keep the smallest set with probability >= p");
  command->add_option("--min-p", flags.min_p, "drop tokens below min_p times the top probability");
  command->add_option("--repetition-penalty", flags.repetition_penalty, "1 = none");
  command->add_option("--seed", flags.seed, "random seed of the sampler");
}

/// Command line > generation_config.json > built-in defaults. Like transformers, the file's
/// sampling values apply only when it sets do_sample (greedy otherwise).
SamplingParams resolve_sampling(const SamplingFlags& flags, const GenerationDefaults& defaults) {
  SamplingParams params;
  if (defaults.do_sample.value_or(false)) {
    if (defaults.temperature) params.temperature = *defaults.temperature;
    if (defaults.top_k) params.top_k = *defaults.top_k;
    if (defaults.top_p) params.top_p = *defaults.top_p;
    if (defaults.min_p) params.min_p = *defaults.min_p;
  } else {
    params.temperature = 0;
  }
  if (defaults.repetition_penalty) params.repetition_penalty = *defaults.repetition_penalty;
  if (flags.temperature) params.temperature = *flags.temperature;
  if (flags.top_k) params.top_k = *flags.top_k;
  if (flags.top_p) params.top_p = *flags.top_p;
  if (flags.min_p) params.min_p = *flags.min_p;
  if (flags.repetition_penalty) params.repetition_penalty = *flags.repetition_penalty;
  if (flags.seed) params.seed = *flags.seed;
  Sampler{params};  // refuses values out of range before any weight is loaded
  return params;
}

/// "1, 2,3" -> {1, 2, 3}.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || id < 0) {
      usage_error(fmt::format("--prompt-ids: expected comma-separated token ids like 1,2,3, got '{}' in '{}'", item, text));
    }
    ids.push_back(id);
  }
  if (ids.empty()) usage_error("--prompt-ids: expected at least one token id, got none");
  return ids;
}

Device parse_device(const std::string& text) {
  const Device device = Device::parse(text);
  if (device.is_cuda()) {
    const auto availability = cuda::availability();
    if (!availability.available) usage_error(fmt::format("--device {}: CUDA is not available: {}", text, availability.reason));
    if (device.index >= cuda::device_count()) {
      usage_error(fmt::format("--device {}: expected a device index below {}, got {}", text, cuda::device_count(), device.index));
    }
  }
  return device;
}

std::optional<Tokenizer> open_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(path)) return std::nullopt;
  return Tokenizer::from_file(path.string());
}

const Tokenizer& require_tokenizer(const std::optional<Tokenizer>& tokenizer, const std::string& dir, const char* why) {
  if (!tokenizer) usage_error(fmt::format("{}: no tokenizer.json in {}: {}", dir, dir, why));
  return *tokenizer;
}

void check_ids(const std::vector<int64_t>& ids, const ModelConfig& config) {
  for (int64_t id : ids) {
    if (id >= config.vocab_size) {
      usage_error(fmt::format("token id {}: expected ids below the vocabulary size {}", id, config.vocab_size));
    }
  }
}

/// Options from the flags, checked against the config before any weight is read.
ModelOptions model_options(const ModelFlags& flags, const ModelConfig& config) {
  ModelOptions options;
  options.device = parse_device(flags.device);
  options.dtype = resolve_dtype(flags.dtype, config);
  if (flags.max_seq_len < 0) usage_error(fmt::format("--max-seq-len: expected a positive length, got {}", flags.max_seq_len));
  options.max_seq_len = resolve_max_seq_len(config, flags.max_seq_len);
  return options;
}

std::unique_ptr<Model> open_model(const ModelFlags& flags, const ModelOptions& options) {
  return load_model(flags.dir, options, terminal_progress(), [&](const MemoryPlan& plan) {
    fmt::print(stderr, "{} on {} as {}, max_seq_len {}\n{}", flags.dir, options.device.str(), name(options.dtype),
               options.max_seq_len, plan.describe());
  });
}

void check_fits_in_cache(int64_t prompt_tokens, int64_t new_tokens, int64_t max_seq_len) {
  if (prompt_tokens + new_tokens > max_seq_len) {
    usage_error(fmt::format("the prompt ({} tokens) + --max-new-tokens ({}) = {} exceeds --max-seq-len {}: use a larger "
                            "--max-seq-len or a shorter prompt",
                            prompt_tokens, new_tokens, prompt_tokens + new_tokens, max_seq_len));
  }
}

/// Every id that ends generation: generation_config.json's eos ids, else config.json's.
std::vector<int64_t> stop_ids(const ModelConfig& config, const GenerationDefaults& defaults) {
  return defaults.eos_token_ids.empty() ? config.eos_token_ids : defaults.eos_token_ids;
}

void print_timings(const GenerateTimings& t) {
  fmt::print(stderr, "prefill: {} tokens, {:.1f} tokens/s; decode: {} tokens, {:.1f} tokens/s\n", t.prompt_tokens,
             t.prefill_tokens_per_second(), t.decode_steps, t.decode_tokens_per_second());
}

// ---- generate ------------------------------------------------------------------------------------

struct GenerateFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string prompt, prompt_ids;
  int64_t max_new_tokens = 128;
  bool json = false;
};

int run_generate(const GenerateFlags& flags) {
  const ModelConfig config = load_model_config(flags.model.dir);
  const GenerationDefaults defaults = load_generation_defaults(flags.model.dir);
  const SamplingParams sampling = resolve_sampling(flags.sampling, defaults);
  if (flags.max_new_tokens < 0) usage_error(fmt::format("--max-new-tokens: expected 0 or more, got {}", flags.max_new_tokens));
  const std::optional<Tokenizer> tokenizer = open_tokenizer(flags.model.dir);
  const std::vector<int64_t> prompt =
      flags.prompt_ids.empty()
          ? require_tokenizer(tokenizer, flags.model.dir, "use --prompt-ids").encode(flags.prompt)
          : parse_ids(flags.prompt_ids);
  if (prompt.empty()) usage_error("--prompt: expected some text, got an empty prompt");
  check_ids(prompt, config);
  ModelFlags model_flags = flags.model;  // by default the cache holds exactly prompt + new tokens
  if (model_flags.max_seq_len == 0) model_flags.max_seq_len = static_cast<int64_t>(prompt.size()) + flags.max_new_tokens;
  const ModelOptions options = model_options(model_flags, config);
  check_fits_in_cache(static_cast<int64_t>(prompt.size()), flags.max_new_tokens, options.max_seq_len);
  auto model = open_model(model_flags, options);

  GenerateOptions generate_options;
  generate_options.max_new_tokens = flags.max_new_tokens;
  generate_options.sampling = sampling;
  generate_options.stop_ids = stop_ids(config, defaults);
  std::optional<StreamDecoder> stream;
  if (tokenizer && !flags.json) stream.emplace(*tokenizer);
  const GenerateResult result = generate(*model, prompt, generate_options, [&](int64_t id) {
    if (flags.json) return true;
    if (stream) fmt::print("{}", stream->push(id));
    else fmt::print("{} ", id);
    std::fflush(stdout);
    return true;
  });
  if (stream) fmt::print("{}", stream->flush());
  if (!flags.json) {
    fmt::print("\n");
    std::fflush(stdout);
    print_timings(result.timings);
    return 0;
  }
  std::vector<int64_t> text_ids = result.ids;
  if (result.stopped && !text_ids.empty()) text_ids.pop_back();  // the stop id is not text
  nlohmann::json out = {{"prompt_ids", prompt},
                        {"generated_ids", result.ids},
                        {"text", tokenizer ? tokenizer->decode(text_ids) : std::string()},
                        {"stopped", result.stopped},
                        {"prompt_tokens", result.timings.prompt_tokens},
                        {"decode_steps", result.timings.decode_steps},
                        {"prefill_tokens_per_second", result.timings.prefill_tokens_per_second()},
                        {"decode_tokens_per_second", result.timings.decode_tokens_per_second()}};
  fmt::print("{}\n", out.dump());
  return 0;
}

// ---- chat ----------------------------------------------------------------------------------------

struct ChatFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string system;
  int64_t max_new_tokens = 1024;
  bool no_think = false;
};

int run_chat(const ChatFlags& flags) {
  const ModelConfig config = load_model_config(flags.model.dir);
  const GenerationDefaults defaults = load_generation_defaults(flags.model.dir);
  const SamplingParams sampling = resolve_sampling(flags.sampling, defaults);
  const std::optional<Tokenizer> tokenizer_file = open_tokenizer(flags.model.dir);
  const Tokenizer& tokenizer = require_tokenizer(tokenizer_file, flags.model.dir, "chat needs the tokenizer");
  const ModelOptions options = model_options(flags.model, config);
  auto model = open_model(flags.model, options);

  GenerateOptions generate_options;
  generate_options.sampling = sampling;
  generate_options.stop_ids = stop_ids(config, defaults);
  if (const auto im_end = tokenizer.token_id("<|im_end|>")) generate_options.stop_ids.push_back(*im_end);

  std::vector<ChatMessage> messages;
  if (!flags.system.empty()) messages.push_back({"system", flags.system});
  std::vector<int64_t> cached;  // the tokens whose keys and values are in the model's cache
  fmt::print(stderr, "chat with {} (an empty line or end of input quits)\n> ", flags.model.dir);
  std::string line;
  while (std::getline(std::cin, line) && !line.empty()) {
    messages.push_back({"user", line});
    const std::vector<int64_t> prompt = tokenizer.encode(apply_chatml(messages, true, !flags.no_think));
    const auto room = options.max_seq_len - static_cast<int64_t>(prompt.size());
    if (room < 1) {
      usage_error(fmt::format("the conversation ({} tokens) no longer fits --max-seq-len {}", prompt.size(),
                              options.max_seq_len));
    }
    // The cache is reused up to the first token where the new prompt differs from it.
    const auto common = std::mismatch(cached.begin(), cached.end(), prompt.begin(), prompt.end()).first - cached.begin();
    generate_options.cached_prefix = common;
    generate_options.max_new_tokens = std::min(flags.max_new_tokens, room);
    StreamDecoder stream(tokenizer, /*skip_special=*/true);
    const GenerateResult result = generate(*model, prompt, generate_options, [&](int64_t id) {
      fmt::print("{}", stream.push(id));
      std::fflush(stdout);
      return true;
    });
    fmt::print("{}\n", stream.flush());
    std::fflush(stdout);
    print_timings(result.timings);
    std::vector<int64_t> reply = result.ids;
    if (result.stopped && !reply.empty()) reply.pop_back();
    messages.push_back({"assistant", tokenizer.decode(reply, /*skip_special=*/true)});
    cached = prompt;  // and every generated token but the last, which was never run
    cached.insert(cached.end(), result.ids.begin(), result.ids.end() - (result.ids.empty() ? 0 : 1));
    fmt::print(stderr, "> ");
  }
  return 0;
}

// ---- eval ----------------------------------------------------------------------------------------

struct EvalFlags {
  ModelFlags model;
  std::string prompt, prompt_ids, file, logits_out;
  bool json = false;
};

int run_eval(const EvalFlags& flags) {
  const ModelConfig config = load_model_config(flags.model.dir);
  const std::optional<Tokenizer> tokenizer = open_tokenizer(flags.model.dir);
  std::vector<int64_t> ids;
  if (!flags.prompt_ids.empty()) {
    ids = parse_ids(flags.prompt_ids);
  } else {
    std::string text = flags.prompt;
    if (!flags.file.empty()) {
      std::ifstream in(flags.file, std::ios::binary);
      if (!in) usage_error(fmt::format("--file {}: cannot open it", flags.file));
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ids = require_tokenizer(tokenizer, flags.model.dir, "use --prompt-ids").encode(text);
  }
  if (ids.size() < 2) usage_error(fmt::format("eval: expected at least 2 tokens, got {}", ids.size()));
  check_ids(ids, config);
  ModelFlags model_flags = flags.model;
  if (model_flags.max_seq_len == 0) model_flags.max_seq_len = static_cast<int64_t>(ids.size());
  const ModelOptions options = model_options(model_flags, config);
  check_fits_in_cache(static_cast<int64_t>(ids.size()), 0, options.max_seq_len);
  auto model = open_model(model_flags, options);
  const PerplexityResult result = perplexity(*model, ids, !flags.logits_out.empty());
  if (!flags.logits_out.empty()) save_safetensors(flags.logits_out, {{"logits", result.logits}});
  if (flags.json) {
    fmt::print("{}\n", nlohmann::json{{"tokens", ids.size()},
                                      {"predicted_tokens", result.predicted_tokens},
                                      {"mean_nll", result.mean_nll},
                                      {"perplexity", result.perplexity}}
                           .dump());
  } else {
    fmt::print("perplexity {:.6f} (mean NLL {:.6f} over {} predicted tokens)\n", result.perplexity, result.mean_nll,
               result.predicted_tokens);
  }
  return 0;
}

// ---- bench ---------------------------------------------------------------------------------------

struct BenchFlags {
  ModelFlags model;
  std::string random_weights;
  int64_t prompt_len = 512, gen_len = 128;
  uint64_t seed = 0;
  bool json = false;
};

/// A config.json given by path or by its directory, read with the loader's aliases.
ModelConfig config_from_path(const std::string& path) {
  if (fs::is_directory(path)) return load_model_config(path);
  if (!fs::exists(path)) usage_error(fmt::format("--random-weights {}: no such file", path));
  if (fs::path(path).filename() == "config.json") return load_model_config(fs::path(path).parent_path().string());
  // load_model_config reads DIR/config.json: give it a directory holding a copy.
  const fs::path dir = fs::temp_directory_path() / fmt::format("ember-bench-config-{}", ::getpid());
  fs::create_directories(dir);
  fs::copy_file(path, dir / "config.json", fs::copy_options::overwrite_existing);
  ModelConfig config;
  try {
    config = load_model_config(dir.string());
  } catch (...) {
    fs::remove_all(dir);
    throw;
  }
  fs::remove_all(dir);
  return config;
}

int run_bench(const BenchFlags& flags) {
  if (flags.model.dir.empty() == flags.random_weights.empty()) {
    usage_error("bench: expected one of --model DIR or --random-weights CONFIG_JSON");
  }
  if (flags.prompt_len < 1) usage_error(fmt::format("--prompt-len: expected at least 1, got {}", flags.prompt_len));
  if (flags.gen_len < 1) usage_error(fmt::format("--gen-len: expected at least 1, got {}", flags.gen_len));
  const ModelConfig config =
      flags.random_weights.empty() ? load_model_config(flags.model.dir) : config_from_path(flags.random_weights);
  ModelFlags model_flags = flags.model;
  if (model_flags.max_seq_len == 0) model_flags.max_seq_len = flags.prompt_len + flags.gen_len;
  const ModelOptions options = model_options(model_flags, config);
  check_fits_in_cache(flags.prompt_len, flags.gen_len, options.max_seq_len);

  std::unique_ptr<Model> model;
  if (flags.random_weights.empty()) {
    model = open_model(model_flags, options);
  } else {
    fmt::print(stderr, "{} ({}) with random weights on {} as {}\n", flags.random_weights, config.model_type,
               options.device.str(), name(options.dtype));
    model = random_model(config, options, flags.seed, [](const MemoryPlan& plan) { fmt::print(stderr, "{}", plan.describe()); });
  }
  const std::vector<int64_t> prompt =
      randint(0, config.vocab_size, {flags.prompt_len}, kInt64, Device::cpu(), flags.seed).to_vector<int64_t>();
  GenerateOptions generate_options;
  generate_options.sampling.temperature = 0;  // greedy, no stop ids: exactly gen_len tokens

  // Warm-up (library handles, kernel caches), then the measured run from an empty cache.
  generate_options.max_new_tokens = std::min<int64_t>(4, flags.gen_len);
  generate(*model, std::vector<int64_t>(prompt.begin(), prompt.begin() + std::min<int64_t>(flags.prompt_len, 16)),
           generate_options);
  model->reset();
  if (options.device.is_cuda()) cuda::reset_peak_memory_stats(options.device.index);
  generate_options.max_new_tokens = flags.gen_len;
  const GenerateResult result = generate(*model, prompt, generate_options);

  nlohmann::json out = {{"model", flags.random_weights.empty() ? flags.model.dir : flags.random_weights},
                        {"model_type", config.model_type},
                        {"device", options.device.str()},
                        {"dtype", std::string(name(options.dtype))},
                        {"prompt_tokens", result.timings.prompt_tokens},
                        {"decode_steps", result.timings.decode_steps},
                        {"prefill_tokens_per_second", result.timings.prefill_tokens_per_second()},
                        {"decode_tokens_per_second", result.timings.decode_tokens_per_second()},
                        {"prefill_seconds", result.timings.prefill_seconds},
                        {"decode_seconds", result.timings.decode_seconds}};
  if (options.device.is_cuda()) {
    const cuda::MemoryStats stats = cuda::memory_stats(options.device.index);
    out["peak_allocated_bytes"] = stats.peak_allocated;
    out["peak_reserved_bytes"] = stats.peak_reserved;
  } else {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    out["peak_rss_bytes"] = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  }
  if (flags.json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("prefill: {} tokens in {:.3f} s, {:.1f} tokens/s\n", result.timings.prompt_tokens,
             result.timings.prefill_seconds, result.timings.prefill_tokens_per_second());
  fmt::print("decode:  {} tokens in {:.3f} s, {:.1f} tokens/s\n", result.timings.decode_steps,
             result.timings.decode_seconds, result.timings.decode_tokens_per_second());
  if (options.device.is_cuda()) {
    fmt::print("peak memory: {:.2f} GB allocated, {:.2f} GB reserved\n", out["peak_allocated_bytes"].get<double>() / 1e9,
               out["peak_reserved_bytes"].get<double>() / 1e9);
  } else {
    fmt::print("peak memory: {:.2f} GB resident\n", out["peak_rss_bytes"].get<double>() / 1e9);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember: a C++ tensor library with CUDA kernels and a mixture-of-experts inference engine"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "devices, build configuration and CUDA availability");
  std::string demo_device = "cpu";
  auto* demo = app.add_subcommand("demo", "a short tour of the tensor ops");
  demo->add_option("--device", demo_device, "cpu or cuda[:N]");

  GenerateFlags generate_flags;
  auto* generate_command = app.add_subcommand("generate", "complete a prompt (text streamed to stdout)");
  add_model_flags(generate_command, generate_flags.model);
  auto* prompt = generate_command->add_option("--prompt", generate_flags.prompt, "prompt text (needs tokenizer.json)");
  auto* prompt_ids = generate_command->add_option("--prompt-ids", generate_flags.prompt_ids, "prompt token ids: 1,2,3");
  prompt->excludes(prompt_ids);
  generate_command->add_option("--max-new-tokens", generate_flags.max_new_tokens)->capture_default_str();
  add_sampling_flags(generate_command, generate_flags.sampling);
  generate_command->add_flag("--json", generate_flags.json, "print one JSON object: ids, text, tokens/s");

  ChatFlags chat_flags;
  auto* chat_command = app.add_subcommand("chat", "a conversation: one user message per line of stdin");
  add_model_flags(chat_command, chat_flags.model);
  chat_command->add_option("--system", chat_flags.system, "a system message");
  chat_command->add_option("--max-new-tokens", chat_flags.max_new_tokens, "per reply")->capture_default_str();
  chat_command->add_flag("--no-think", chat_flags.no_think, "ask Qwen3 models to answer without thinking");
  add_sampling_flags(chat_command, chat_flags.sampling);

  EvalFlags eval_flags;
  auto* eval_command = app.add_subcommand("eval", "perplexity of a text or token ids");
  add_model_flags(eval_command, eval_flags.model);
  auto* eval_prompt = eval_command->add_option("--prompt", eval_flags.prompt, "text (needs tokenizer.json)");
  auto* eval_ids = eval_command->add_option("--prompt-ids", eval_flags.prompt_ids, "token ids: 1,2,3");
  auto* eval_file = eval_command->add_option("--file", eval_flags.file, "a text file (needs tokenizer.json)");
  eval_prompt->excludes(eval_ids)->excludes(eval_file);
  eval_ids->excludes(eval_file);
  eval_command->add_option("--logits-out", eval_flags.logits_out, "write float32 \"logits\" [T, vocab] (safetensors)");
  eval_command->add_flag("--json", eval_flags.json, "print one JSON object");

  BenchFlags bench_flags;
  auto* bench_command = app.add_subcommand("bench", "prefill and decode tokens/s, peak memory");
  add_model_flags(bench_command, bench_flags.model, /*required=*/false);
  auto* random_weights = bench_command->add_option("--random-weights", bench_flags.random_weights,
                                                   "a config.json: random weights, no checkpoint needed");
  random_weights->excludes(bench_command->get_option("--model"));
  bench_command->add_option("--prompt-len", bench_flags.prompt_len)->capture_default_str();
  bench_command->add_option("--gen-len", bench_flags.gen_len)->capture_default_str();
  bench_command->add_option("--seed", bench_flags.seed, "seed of the random prompt and weights")->capture_default_str();
  bench_command->add_flag("--json", bench_flags.json, "print one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  try {
    if (*info) return run_info();
    if (*demo) return run_demo(demo_device);
    if (*generate_command) {
      if (generate_flags.prompt.empty() && generate_flags.prompt_ids.empty()) {
        usage_error("generate: expected --prompt TEXT or --prompt-ids 1,2,3");
      }
      return run_generate(generate_flags);
    }
    if (*chat_command) return run_chat(chat_flags);
    if (*eval_command) {
      if (eval_flags.prompt.empty() && eval_flags.prompt_ids.empty() && eval_flags.file.empty()) {
        usage_error("eval: expected --prompt TEXT, --prompt-ids 1,2,3 or --file TEXTFILE");
      }
      return run_eval(eval_flags);
    }
    if (*bench_command) return run_bench(bench_flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
