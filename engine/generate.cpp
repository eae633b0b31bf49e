#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ember/cuda.h"
#include "ember/ops.h"

namespace ember::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Waits for the device so that a time measured on the host covers its work.
void synchronize(const Model& model) {
  if (model.device().is_cuda()) cuda::synchronize(model.device().index);
}

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  return tensor<int64_t>(std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                                              ids.begin() + static_cast<std::ptrdiff_t>(end)),
                         {1, static_cast<int64_t>(end - begin)});
}

/// Runs ids[begin, end) through the model in chunks at positions begin..; returns the last
/// position's logits [V] float32.
Tensor prefill(Model& model, const std::vector<int64_t>& ids, size_t begin, size_t end) {
  Tensor logits;
  for (size_t start = begin; start < end; start += kPrefillChunk) {
    const size_t stop = std::min(end, start + static_cast<size_t>(kPrefillChunk));
    logits = model.forward(ids_tensor(ids, start, stop), static_cast<int64_t>(start), /*last_only=*/true);  // [1, 1, V]
  }
  return logits.reshape({-1});  // [V]
}

}  // namespace

GenerateResult generate(Model& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                        const TokenCallback& on_token) {
  const char* op = "generate";
  const auto prompt_length = static_cast<int64_t>(prompt.size());
  EMBER_CHECK(prompt_length >= 1, op, "prompt: expected at least one token, got {}", prompt_length);
  EMBER_CHECK(options.max_new_tokens >= 0, op, "max_new_tokens: expected at least 0, got {}", options.max_new_tokens);
  EMBER_CHECK(prompt_length + options.max_new_tokens <= model.max_seq_len(), op,
              "prompt + max_new_tokens: expected at most max_seq_len = {} tokens, got {} + {} = {}; use a larger "
              "--max-seq-len or fewer new tokens",
              model.max_seq_len(), prompt_length, options.max_new_tokens, prompt_length + options.max_new_tokens);
  EMBER_CHECK(options.cached_prefix >= 0 && options.cached_prefix <= model.cached_positions(), op,
              "cached_prefix: expected 0 to {} (the positions in the KV cache), got {}", model.cached_positions(),
              options.cached_prefix);
  GenerateResult result;
  if (options.max_new_tokens == 0) return result;

  // At least the last prompt token is run, to get the logits of the first new token.
  const int64_t begin = std::min(options.cached_prefix, prompt_length - 1);
  Sampler sampler(options.sampling);
  std::vector<int64_t> history = prompt;  // the repetition penalty looks at the prompt too
  const auto is_stop = [&](int64_t id) {
    return std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end();
  };

  synchronize(model);
  auto start = Clock::now();
  Tensor logits = prefill(model, prompt, static_cast<size_t>(begin), prompt.size());  // [V]
  int64_t next = sampler.sample(logits, history);
  synchronize(model);
  result.timings.prompt_tokens = prompt_length - begin;
  result.timings.prefill_seconds = seconds_since(start);

  start = Clock::now();
  int64_t position = prompt_length;
  while (true) {
    result.ids.push_back(next);
    history.push_back(next);
    if (is_stop(next) || (on_token && !on_token(next))) {
      result.stopped = true;
      break;
    }
    if (static_cast<int64_t>(result.ids.size()) == options.max_new_tokens) break;
    logits = model.forward(tensor<int64_t>({next}, {1, 1}), position++, /*last_only=*/true).reshape({-1});  // [V]
    next = sampler.sample(logits, history);
    ++result.timings.decode_steps;
  }
  synchronize(model);
  result.timings.decode_seconds = seconds_since(start);
  result.timings.generated_tokens = static_cast<int64_t>(result.ids.size());
  return result;
}

PerplexityResult perplexity(Model& model, const std::vector<int64_t>& ids, bool keep_logits) {
  const char* op = "perplexity";
  const auto length = static_cast<int64_t>(ids.size());
  EMBER_CHECK(length >= 2, op, "tokens: expected at least 2 (the first is only context), got {}", length);
  EMBER_CHECK(length <= model.max_seq_len(), op, "tokens: expected at most max_seq_len = {}, got {}; use a larger "
              "--max-seq-len", model.max_seq_len(), length);
  PerplexityResult result;
  std::vector<Tensor> chunks;
  double nll_sum = 0;
  for (int64_t start = 0; start < length; start += kPrefillChunk) {
    const int64_t stop = std::min(length, start + kPrefillChunk), chunk = stop - start;
    const Tensor logits = model.forward(ids_tensor(ids, start, stop), start).select(0, 0);             // [L, V]
    if (keep_logits) chunks.push_back(logits.to(Device::cpu()));
    const int64_t predicted = std::min(chunk, length - 1 - start);  // the last position predicts nothing
    if (predicted == 0) continue;
    const Tensor targets =
        ids_tensor(ids, start + 1, start + 1 + predicted).view({predicted, 1}).to(model.device());  // [P, 1]
    const Tensor log_probs = log_softmax(logits.narrow(0, 0, predicted), -1);                 // [P, V]
    nll_sum -= sum(gather(log_probs, 1, targets), {}, false, kFloat64).item<double>();        // scalar
  }
  result.predicted_tokens = length - 1;
  result.mean_nll = nll_sum / static_cast<double>(result.predicted_tokens);
  result.perplexity = std::exp(result.mean_nll);
  if (keep_logits) result.logits = cat(chunks, 0);  // [T, V]
  return result;
}

}  // namespace ember::engine
