// Text generation and evaluation over a Model: prefill the prompt (in chunks), then decode one
// token per forward with the KV cache, sampling each next token; perplexity of a sequence.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model.h"
#include "engine/sampler.h"

namespace ember::engine {

/// Tokens per prefill forward: bounds the activations and attention scores of long prompts.
inline constexpr int64_t kPrefillChunk = 512;

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  /// Generation ends after any of these ids (the id itself is returned, not streamed).
  std::vector<int64_t> stop_ids;
  /// Leading prompt tokens already in the model's KV cache from an earlier call (a chat keeps
  /// its history there); only the rest is prefilled. 0 starts afresh.
  int64_t cached_prefix = 0;
};

struct GenerateTimings {
  int64_t prompt_tokens = 0;     // tokens prefilled (the prompt past cached_prefix)
  int64_t generated_tokens = 0;  // tokens sampled, the stop id included
  double prefill_seconds = 0;    // prefill forwards + the first token's sampling
  double decode_seconds = 0;     // every later forward + sampling
  int64_t decode_steps = 0;      // one-token forwards
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tokens_per_second() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

struct GenerateResult {
  std::vector<int64_t> ids;  // the generated ids (a final stop id included)
  bool stopped = false;      // ended on a stop id (or the callback), not on max_new_tokens
  GenerateTimings timings;
};

/// Called with each generated id that is not a stop id; returning false ends generation.
using TokenCallback = std::function<bool(int64_t id)>;

/// Generates up to max_new_tokens after `prompt` (at least one token). Throws ember::Error when
/// prompt + max_new_tokens exceeds the model's max_seq_len (naming both), or for bad options.
/// The KV cache holds the prompt and the generated tokens afterwards (the last one excepted).
GenerateResult generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                        const TokenCallback& on_token = {});

struct PerplexityResult {
  double perplexity = 0;  // exp(mean_nll)
  double mean_nll = 0;    // mean over the T - 1 predicted tokens of -log p(ids[t] | ids[:t])
  int64_t predicted_tokens = 0;
  Tensor logits;  // [T, V] float32 on the CPU when requested
};

/// exp(mean negative log-likelihood of ids[1:] given their prefixes), from forwards over the
/// sequence (chunks of kPrefillChunk with the KV cache) and log_softmax. Needs 2 <= T <= max_seq_len.
PerplexityResult perplexity(Model& model, const std::vector<int64_t>& ids, bool keep_logits = false);

}  // namespace ember::engine
