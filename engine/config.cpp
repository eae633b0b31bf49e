#include "engine/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ember/error.h"

namespace ember::engine {

bool ModelConfig::is_moe_layer(int64_t layer) const {
  const bool listed_dense = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return num_experts > 0 && !listed_dense && decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const char* kSupportedModelTypes = "qwen3_moe, qwen3, llama";

/// A value as the message shows it: its JSON type and text (shortened).
std::string describe(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

/// Parses `path`; the error names the file and the position of bad JSON.
Json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "config", "{}: cannot open: expected a readable file, got an error opening it", path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    fail("config", "{}: invalid JSON: {}", path.string(), e.what());
  }
}

/// Typed access to one JSON object, every error naming the file and the key ("a.b" when nested).
class Keys {
 public:
  Keys(const Json& object, std::string file, std::string prefix = "")
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {
    EMBER_CHECK(object_.is_object(), "config", "{}: {}: expected a JSON object, got {}", file_,
                prefix_.empty() ? "top level" : "\"" + prefix_ + "\"", describe(object_));
  }

  /// The value of `key`, or nullptr when absent or JSON null.
  const Json* find(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  std::string name(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

  [[noreturn]] void wrong(const std::string& key, const char* expected, const Json& value) const {
    fail("config", "{}: \"{}\": expected {}, got {}", file_, name(key), expected, describe(value));
  }
  [[noreturn]] void missing(const std::string& key, const char* expected) const {
    fail("config", "{}: \"{}\" is missing: expected {}", file_, name(key), expected);
  }

  static bool is_integral(const Json& v) {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()));
  }
  int64_t as_int(const std::string& key, const Json& v) const {
    if (!is_integral(v)) wrong(key, "an integer", v);
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }

  int64_t integer(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) missing(key, "an integer");
    return as_int(key, *v);
  }
  std::optional<int64_t> opt_integer(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::nullopt;
    return as_int(key, *v);
  }
  int64_t positive(const std::string& key) const {
    const int64_t value = integer(key);
    if (value <= 0) wrong(key, "a positive integer", *find(key));
    return value;
  }
  std::optional<double> opt_number(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) wrong(key, "a number", *v);
    return v->get<double>();
  }
  double number(const std::string& key, double fallback) const { return opt_number(key).value_or(fallback); }
  std::optional<bool> opt_boolean(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  bool boolean(const std::string& key, bool fallback) const { return opt_boolean(key).value_or(fallback); }
  std::optional<std::string> opt_string(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) wrong(key, "a string", *v);
    return v->get<std::string>();
  }
  /// An integer list; a single integer counts as a list of one (eos_token_id).
  std::vector<int64_t> int_list(const std::string& key, bool allow_single) const {
    const Json* v = find(key);
    if (v == nullptr) return {};
    if (allow_single && is_integral(*v)) return {as_int(key, *v)};
    if (!v->is_array()) wrong(key, allow_single ? "an integer or a list of integers" : "a list of integers", *v);
    std::vector<int64_t> out;
    for (const Json& item : *v) {
      if (!is_integral(item)) wrong(key, "a list of integers", *v);
      out.push_back(as_int(key, item));
    }
    return out;
  }
  std::optional<Keys> object(const std::string& key) const {
    const Json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_object()) wrong(key, "a JSON object", *v);
    return Keys(*v, file_, name(key));
  }
  const std::string& file() const { return file_; }

 private:
  const Json& object_;
  std::string file_, prefix_;
};

DType parse_dtype(const Keys& keys, const std::string& key) {
  const std::optional<std::string> text = keys.opt_string(key);
  if (!text) return kFloat32;
  if (*text == "float32" || *text == "float") return kFloat32;
  if (*text == "bfloat16") return kBFloat16;
  if (*text == "float16" || *text == "half") return kFloat16;
  fail("config", "{}: \"{}\": expected \"float32\", \"bfloat16\" or \"float16\", got \"{}\"", keys.file(),
       keys.name(key), *text);
}

/// rope_parameters (transformers 5) or rope_scaling: rope_theta and the llama3 frequency scaling.
void parse_rope(const Keys& keys, ModelConfig& config) {
  config.rope_theta = keys.number("rope_theta", config.rope_theta);
  for (const char* section : {"rope_parameters", "rope_scaling"}) {
    const std::optional<Keys> rope = keys.object(section);
    if (!rope) continue;
    config.rope_theta = rope->number("rope_theta", config.rope_theta);
    std::optional<std::string> type = rope->opt_string("rope_type");
    if (!type) type = rope->opt_string("type");
    if (!type || *type == "default") return;
    if (*type != "llama3") {
      fail("config", "{}: \"{}\": unsupported RoPE type: expected \"default\" or \"llama3\", got \"{}\"", keys.file(),
           rope->name(rope->has("rope_type") ? "rope_type" : "type"), *type);
    }
    RopeLlama3Scaling scaling;
    auto required_number = [&](const char* key) {
      const std::optional<double> v = rope->opt_number(key);
      if (!v) rope->missing(key, "a number (required by rope_type \"llama3\")");
      return *v;
    };
    scaling.factor = required_number("factor");
    scaling.low_freq_factor = required_number("low_freq_factor");
    scaling.high_freq_factor = required_number("high_freq_factor");
    scaling.original_max_position_embeddings = rope->integer("original_max_position_embeddings");
    config.rope_llama3 = scaling;
    return;
  }
}

void parse_quantization(const Keys& keys, ModelConfig& config) {
  const std::optional<Keys> quant = keys.object("quantization_config");
  if (!quant) return;
  const std::optional<std::string> method = quant->opt_string("quant_method");
  if (!method) quant->missing("quant_method", "\"fp8\"");
  if (*method != "fp8") {
    fail("config", "{}: \"{}\": unsupported quantization: expected \"fp8\" (float8_e4m3fn weights with "
         "weight_scale_inv, per tensor or in 128x128 blocks), got \"{}\"", keys.file(), quant->name("quant_method"), *method);
  }
  if (const std::optional<std::string> fmt = quant->opt_string("fmt"); fmt && *fmt != "e4m3") {
    fail("config", "{}: \"{}\": unsupported FP8 format: expected \"e4m3\", got \"{}\"", keys.file(), quant->name("fmt"), *fmt);
  }
  config.fp8 = true;
  config.fp8_block_size = quant->int_list("weight_block_size", false);
  if (!config.fp8_block_size.empty() && config.fp8_block_size != std::vector<int64_t>{128, 128}) {
    fail("config", "{}: \"{}\": unsupported FP8 block size: expected [128, 128] or none, got {}", keys.file(),
         quant->name("weight_block_size"), describe(*quant->find("weight_block_size")));
  }
}

}  // namespace

ModelConfig load_model_config(const std::string& dir) {
  EMBER_CHECK(fs::is_directory(dir), "config", "{}: expected a model directory, got {}", dir,
              fs::exists(dir) ? "a file that is not a directory" : "a path that does not exist");
  const fs::path path = fs::path(dir) / "config.json";
  EMBER_CHECK(fs::exists(path), "config", "{}: expected config.json in the model directory, got no such file",
              path.string());
  const Json json = read_json(path);
  const Keys keys(json, path.string());

  ModelConfig config;
  const std::optional<std::string> model_type = keys.opt_string("model_type");
  if (!model_type) keys.missing("model_type", fmt::format("one of {}", kSupportedModelTypes).c_str());
  config.model_type = *model_type;
  if (config.model_type != "qwen3_moe" && config.model_type != "qwen3" && config.model_type != "llama") {
    fail("config", "{}: \"model_type\": unsupported model: expected one of {}, got \"{}\"", path.string(),
         kSupportedModelTypes, config.model_type);
  }

  config.vocab_size = keys.positive("vocab_size");
  config.hidden_size = keys.positive("hidden_size");
  config.intermediate_size = keys.positive("intermediate_size");
  config.num_hidden_layers = keys.positive("num_hidden_layers");
  config.num_attention_heads = keys.positive("num_attention_heads");
  config.num_key_value_heads = keys.has("num_key_value_heads") ? keys.positive("num_key_value_heads")
                                                               : config.num_attention_heads;
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    fail("config", "{}: \"num_key_value_heads\": expected a divisor of num_attention_heads ({}), got {}", path.string(),
         config.num_attention_heads, config.num_key_value_heads);
  }
  if (keys.has("head_dim")) {
    config.head_dim = keys.positive("head_dim");
  } else {
    if (config.hidden_size % config.num_attention_heads != 0) {
      fail("config", "{}: \"head_dim\" is missing and hidden_size ({}) is not a multiple of num_attention_heads ({}): "
           "expected head_dim", path.string(), config.hidden_size, config.num_attention_heads);
    }
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  // transformers' defaults: 32768 for Qwen3 and Qwen3-MoE, 2048 for Llama.
  config.max_position_embeddings = keys.opt_integer("max_position_embeddings").value_or(config.model_type == "llama" ? 2048 : 32768);
  config.rms_norm_eps = keys.number("rms_norm_eps", 1e-6);
  parse_rope(keys, config);
  config.attention_bias = keys.boolean("attention_bias", false);
  config.tie_word_embeddings = keys.boolean("tie_word_embeddings", false);
  config.dtype = parse_dtype(keys, keys.has("dtype") ? "dtype" : "torch_dtype");

  if (config.model_type == "qwen3_moe") {
    const char* experts_key = keys.has("num_experts") ? "num_experts" : "num_local_experts";
    if (!keys.has(experts_key)) keys.missing("num_experts", "an integer (or \"num_local_experts\")");
    config.num_experts = keys.positive(experts_key);
    config.num_experts_per_tok = keys.positive("num_experts_per_tok");
    if (config.num_experts_per_tok > config.num_experts) {
      fail("config", "{}: \"num_experts_per_tok\": expected at most {} (the number of experts), got {}", path.string(),
           config.num_experts, config.num_experts_per_tok);
    }
    config.moe_intermediate_size = keys.positive("moe_intermediate_size");
    config.norm_topk_prob = keys.boolean("norm_topk_prob", false);  // Qwen3MoeConfig's default
    config.decoder_sparse_step = keys.opt_integer("decoder_sparse_step").value_or(1);
    if (config.decoder_sparse_step <= 0) {
      keys.wrong("decoder_sparse_step", "a positive integer", *keys.find("decoder_sparse_step"));
    }
    config.mlp_only_layers = keys.int_list("mlp_only_layers", false);
  }

  config.bos_token_id = keys.opt_integer("bos_token_id");
  config.eos_token_ids = keys.int_list("eos_token_id", true);
  if (config.eos_token_ids.empty()) config.eos_token_ids = load_generation_defaults(dir).eos_token_ids;
  parse_quantization(keys, config);
  return config;
}

GenerationDefaults load_generation_defaults(const std::string& dir) {
  GenerationDefaults defaults;
  const fs::path path = fs::path(dir) / "generation_config.json";
  if (!fs::exists(path)) return defaults;
  const Json json = read_json(path);
  const Keys keys(json, path.string());
  defaults.do_sample = keys.opt_boolean("do_sample");
  defaults.temperature = keys.opt_number("temperature");
  defaults.top_p = keys.opt_number("top_p");
  defaults.min_p = keys.opt_number("min_p");
  defaults.repetition_penalty = keys.opt_number("repetition_penalty");
  defaults.top_k = keys.opt_integer("top_k");
  defaults.eos_token_ids = keys.int_list("eos_token_id", true);
  return defaults;
}

}  // namespace ember::engine
