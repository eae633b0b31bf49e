// Next-token sampling in the order of transformers' logits processors: repetition penalty,
// temperature, top-k, top-p, min-p, then a draw from the softmax with a seeded generator.
// The math runs on the host in float64 over the vocabulary-sized logits.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "ember/tensor.h"

namespace ember::engine {

struct SamplingParams {
  double temperature = 1;          // 0: greedy (argmax after the repetition penalty)
  int64_t top_k = 0;               // 0: off
  double top_p = 1;                // 1: off
  double min_p = 0;                // 0: off
  double repetition_penalty = 1;   // 1: off
  uint64_t seed = 0;
};

// The processors on float64 logits; removed ids become -inf. Each follows the transformers class
// of the same name (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper, MinPLogitsWarper with min_tokens_to_keep = 1).

/// Over the set of previous ids: positive logits divided by `penalty`, negative ones multiplied.
/// An id outside [0, vocab) is an ember::Error.
void apply_repetition_penalty(std::vector<double>& logits, const std::vector<int64_t>& previous_ids, double penalty);
/// Keeps every id whose logit is at least the k-th largest (ties at the boundary stay).
void apply_top_k(std::vector<double>& logits, int64_t k);
/// Keeps the smallest set of most probable ids whose probability reaches top_p (at least one).
void apply_top_p(std::vector<double>& logits, double top_p);
/// Keeps the ids whose probability is at least min_p times the largest probability.
void apply_min_p(std::vector<double>& logits, double min_p);

class Sampler {
 public:
  /// Throws ember::Error for parameters outside their range (temperature < 0, top_k < 0,
  /// top_p or min_p outside [0, 1], repetition_penalty <= 0, or any of them not finite).
  explicit Sampler(SamplingParams params);

  /// The next id from `logits` ([vocab], any floating dtype, any device). Throws ember::Error on
  /// another shape or dtype, NaN or +inf logits, or when every id is -inf.
  int64_t sample(const Tensor& logits, const std::vector<int64_t>& previous_ids);

  /// The logits after every processor (-inf for removed ids): what `sample` draws from by softmax.
  /// Greedy sampling applies only the repetition penalty.
  std::vector<double> process(const Tensor& logits, const std::vector<int64_t>& previous_ids) const;

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace ember::engine
