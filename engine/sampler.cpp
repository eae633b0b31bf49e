#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "ember/error.h"

namespace ember::engine {
namespace {

constexpr const char* kOp = "sampler";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// softmax(logits) in float64 (-inf -> 0).
std::vector<double> softmax(const std::vector<double>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += probs[i] = std::exp(logits[i] - max);
  for (double& p : probs) p /= total;
  return probs;
}

/// The first id of the largest logit.
int64_t argmax(const std::vector<double>& logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

}  // namespace

void apply_repetition_penalty(std::vector<double>& logits, const std::vector<int64_t>& previous_ids, double penalty) {
  const auto vocab = static_cast<int64_t>(logits.size());
  std::vector<bool> seen(logits.size(), false);
  for (const int64_t id : previous_ids) {
    EMBER_CHECK(id >= 0 && id < vocab, kOp, "previous_ids: expected ids in [0, {}), got {}", vocab, id);
    if (seen[id]) continue;  // a repeated id is penalized once (HF gathers, then scatters)
    seen[id] = true;
    logits[id] = logits[id] < 0 ? logits[id] * penalty : logits[id] / penalty;
  }
}

void apply_top_k(std::vector<double>& logits, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(logits.size())) return;
  std::vector<double> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[k - 1];
  for (double& v : logits)
    if (v < kth) v = kNegInf;
}

void apply_top_p(std::vector<double>& logits, double top_p) {
  if (top_p >= 1) return;
  // HF sorts ascending and removes ids while the cumulative probability stays <= 1 - top_p;
  // the most probable id is always kept.
  const std::vector<double> probs = softmax(logits);
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] < logits[b]; });
  double cumulative = 0;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    cumulative += probs[order[i]];
    if (cumulative > 1 - top_p) break;
    logits[order[i]] = kNegInf;
  }
}

void apply_min_p(std::vector<double>& logits, double min_p) {
  if (min_p <= 0) return;
  const std::vector<double> probs = softmax(logits);
  const int64_t top = argmax(probs);
  const double threshold = min_p * probs[top];
  for (size_t i = 0; i < logits.size(); ++i)
    if (probs[i] < threshold && static_cast<int64_t>(i) != top) logits[i] = kNegInf;
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) {
  EMBER_CHECK(std::isfinite(params.temperature) && params.temperature >= 0, kOp,
              "temperature: expected a finite value >= 0, got {}", params.temperature);
  EMBER_CHECK(params.top_k >= 0, kOp, "top_k: expected >= 0 (0 = off), got {}", params.top_k);
  EMBER_CHECK(params.top_p >= 0 && params.top_p <= 1, kOp, "top_p: expected a value in [0, 1], got {}", params.top_p);
  EMBER_CHECK(params.min_p >= 0 && params.min_p <= 1, kOp, "min_p: expected a value in [0, 1], got {}", params.min_p);
  EMBER_CHECK(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0, kOp,
              "repetition_penalty: expected a finite value > 0, got {}", params.repetition_penalty);
}

std::vector<double> Sampler::process(const Tensor& logits, const std::vector<int64_t>& previous_ids) const {
  EMBER_CHECK(logits.defined(), kOp, "logits: expected a tensor, got an undefined one");
  EMBER_CHECK(logits.dim() == 1 && logits.numel() > 0, kOp, "logits: expected a non-empty 1-D tensor [vocab], got {} dims",
              logits.dim());
  EMBER_CHECK(is_floating_point(logits.dtype()), kOp, "logits dtype: expected a floating dtype, got {}",
              name(logits.dtype()));
  std::vector<double> values = logits.to(Device::cpu(), kFloat64).to_vector<double>();
  bool any_finite = false;
  for (size_t i = 0; i < values.size(); ++i) {
    EMBER_CHECK(!std::isnan(values[i]) && values[i] != std::numeric_limits<double>::infinity(), kOp,
                "logits: expected finite values or -inf, got {} at id {}", values[i], i);
    any_finite = any_finite || std::isfinite(values[i]);
  }
  EMBER_CHECK(any_finite, kOp, "logits: expected at least one finite value, got {} times -inf", values.size());

  if (params_.repetition_penalty != 1) apply_repetition_penalty(values, previous_ids, params_.repetition_penalty);
  if (params_.temperature == 0) return values;
  if (params_.temperature != 1)
    for (double& v : values) v /= params_.temperature;
  apply_top_k(values, params_.top_k);
  apply_top_p(values, params_.top_p);
  apply_min_p(values, params_.min_p);
  return values;
}

int64_t Sampler::sample(const Tensor& logits, const std::vector<int64_t>& previous_ids) {
  const std::vector<double> values = process(logits, previous_ids);
  if (params_.temperature == 0) return argmax(values);
  const std::vector<double> probs = softmax(values);
  // A uniform double in [0, 1) from the top 53 bits: the same sequence on every platform.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cumulative = 0;
  int64_t last_kept = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) continue;
    last_kept = static_cast<int64_t>(i);
    cumulative += probs[i];
    if (u < cumulative) return last_kept;
  }
  return last_kept;  // u beyond a total that rounding left just below 1
}

}  // namespace ember::engine
