// Sampler against transformers' logits processors (fixture from
// scripts/fixtures/make_tokenizer_fixtures.py), float64 references written here, and the
// distribution actually drawn (chi-square over many draws).
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "ember/error.h"

namespace ember::engine {
namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

const json& fixture() {
  static const json value = [] {
    std::ifstream file(std::string(EMBER_FIXTURES_DIR) + "/tokenizer/expected.json", std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    return json::parse(text.str())["sampler"];
  }();
  return value;
}

std::vector<double> fixture_logits() { return fixture()["logits"].get<std::vector<double>>(); }
std::vector<int64_t> fixture_previous() { return fixture()["previous_ids"].get<std::vector<int64_t>>(); }

std::vector<int64_t> kept_ids(const std::vector<double>& logits) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != -kInf) ids.push_back(static_cast<int64_t>(i));
  return ids;
}

std::vector<double> softmax_reference(const std::vector<double>& logits) {
  double max = -kInf;
  for (const double v : logits) max = std::max(max, v);
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(logits[i] - max);
  for (double& v : p) v /= total;
  return p;
}

Tensor to_tensor(const std::vector<double>& values, DType dtype = kFloat32) {
  return tensor<double>(values, {static_cast<int64_t>(values.size())}).to(dtype);
}

TEST(Sampler, RepetitionPenaltyMatchesTransformers) {
  for (const json& c : fixture()["repetition_penalty"]) {
    std::vector<double> logits = fixture_logits();
    apply_repetition_penalty(logits, fixture_previous(), c["penalty"].get<double>());
    const auto want = c["logits"].get<std::vector<double>>();
    ASSERT_EQ(logits.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(logits[i], want[i]) << "id " << i;
  }
  // Ids 5 and 6 hold -0.0 and +0.0: neither sign changes (0 * p and 0 / p).
  std::vector<double> logits = fixture_logits();
  apply_repetition_penalty(logits, {5, 6}, 2.0);
  EXPECT_EQ(logits[5], 0.0);
  EXPECT_EQ(logits[6], 0.0);
}

TEST(Sampler, TopKTopPMinPKeepTheSetsTransformersKeeps) {
  for (const json& c : fixture()["top_k"]) {
    std::vector<double> logits = fixture_logits();
    apply_top_k(logits, c["k"].get<int64_t>());
    EXPECT_EQ(kept_ids(logits), c["kept"].get<std::vector<int64_t>>()) << "k = " << c["k"];
  }
  for (const json& c : fixture()["top_p"]) {
    std::vector<double> logits = fixture_logits();
    apply_top_p(logits, c["p"].get<double>());
    EXPECT_EQ(kept_ids(logits), c["kept"].get<std::vector<int64_t>>()) << "top_p = " << c["p"];
  }
  for (const json& c : fixture()["min_p"]) {
    std::vector<double> logits = fixture_logits();
    apply_min_p(logits, c["min_p"].get<double>());
    EXPECT_EQ(kept_ids(logits), c["kept"].get<std::vector<int64_t>>()) << "min_p = " << c["min_p"];
  }
}

TEST(Sampler, ProcessorPipelineMatchesTransformers) {
  for (const json& c : fixture()["pipelines"]) {
    SamplingParams params;
    params.temperature = c["temperature"];
    params.top_k = c["top_k"];
    params.top_p = c["top_p"];
    params.min_p = c["min_p"];
    params.repetition_penalty = c["repetition_penalty"];
    const Sampler sampler(params);
    const std::vector<double> processed = sampler.process(to_tensor(fixture_logits(), kFloat64), fixture_previous());
    EXPECT_EQ(kept_ids(processed), c["kept"].get<std::vector<int64_t>>()) << c.dump();
    const std::vector<double> probs = softmax_reference(processed);
    const auto want = c["probs"].get<std::vector<double>>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(probs[i], want[i], 1e-12) << "id " << i;
  }
}

/// Float64 references by definition (descending order), on random logits without ties.
TEST(Sampler, FiltersMatchDefinitions) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0, 2);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t vocab = 2 + rng() % 60;
    std::vector<double> logits(vocab);
    for (double& v : logits) v = normal(rng);
    std::vector<int64_t> by_prob(vocab);
    std::iota(by_prob.begin(), by_prob.end(), 0);
    std::sort(by_prob.begin(), by_prob.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    const std::vector<double> probs = softmax_reference(logits);

    const auto k = static_cast<int64_t>(1 + rng() % (vocab + 2));
    std::vector<int64_t> want(by_prob.begin(), by_prob.begin() + std::min<int64_t>(k, vocab));
    std::sort(want.begin(), want.end());
    std::vector<double> top_k = logits;
    apply_top_k(top_k, k);
    EXPECT_EQ(kept_ids(top_k), want) << "k = " << k;

    // Top-p: the shortest most-probable prefix whose mass reaches p (away from the boundary).
    const double p = std::uniform_real_distribution<double>(0.01, 0.99)(rng);
    want.clear();
    double mass = 0;
    for (const int64_t id : by_prob) {
      want.push_back(id);
      mass += probs[id];
      if (mass >= p) break;
    }
    if (std::abs(mass - p) < 1e-9) continue;
    std::sort(want.begin(), want.end());
    std::vector<double> top_p = logits;
    apply_top_p(top_p, p);
    EXPECT_EQ(kept_ids(top_p), want) << "top_p = " << p;

    const double m = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const double max_prob = probs[by_prob[0]];
    want.clear();
    for (size_t i = 0; i < vocab; ++i)
      if (probs[i] >= m * max_prob) want.push_back(static_cast<int64_t>(i));
    std::vector<double> min_p = logits;
    apply_min_p(min_p, m);
    EXPECT_EQ(kept_ids(min_p), want) << "min_p = " << m;
  }
}

TEST(Sampler, TopKKeepsTiesAtTheBoundaryAndTopPKeepsOne) {
  std::vector<double> logits = {1, 3, 2, 3, 2, 0};
  apply_top_k(logits, 3);  // the third largest is 2, held by ids 2 and 4
  EXPECT_EQ(kept_ids(logits), (std::vector<int64_t>{1, 2, 3, 4}));
  std::vector<double> one = {0.5, 4, 1};
  apply_top_p(one, 0.0);
  EXPECT_EQ(kept_ids(one), (std::vector<int64_t>{1}));
  std::vector<double> all = {0.5, 4, 1};
  apply_min_p(all, 1.0);
  EXPECT_EQ(kept_ids(all), (std::vector<int64_t>{1}));
}

/// Draws `n` ids and checks the frequencies against the expected probabilities (chi-square, with
/// a threshold far beyond the 99.99% quantile for the degrees of freedom used here) and that no
/// removed id is ever drawn.
void expect_distribution(Sampler& sampler, const std::vector<double>& logits, const std::vector<int64_t>& previous,
                         const std::vector<double>& want, int n) {
  const Tensor t = to_tensor(logits, kFloat64);
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(t, previous)];
  double chi2 = 0;
  int dof = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "removed id " << i << " was drawn";
      continue;
    }
    const double e = want[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++dof;
  }
  ASSERT_GE(dof, 1);
  EXPECT_LT(chi2, 20.0 + 4.0 * dof) << "dof " << dof;
}

TEST(Sampler, DrawsFromTheFilteredDistribution) {
  const std::vector<double> logits = {1.0, 2.5, 0.3, -1.0, 2.0, 0.9, -3.0, 1.7};
  const std::vector<int64_t> previous = {4, 4, 2};
  SamplingParams params;
  params.temperature = 0.8;
  params.top_k = 6;
  params.top_p = 0.9;
  params.repetition_penalty = 1.2;
  params.seed = 11;
  Sampler sampler(params);
  // Expected: by hand in float64, in HF's order.
  std::vector<double> x = logits;
  x[4] /= 1.2;
  x[2] /= 1.2;
  for (double& v : x) v /= 0.8;
  std::vector<int64_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
  for (size_t r = 6; r < order.size(); ++r) x[order[r]] = -kInf;
  std::vector<double> p = softmax_reference(x);
  double mass = 0;
  for (const int64_t id : order) {
    if (mass >= 0.9) x[id] = -kInf;
    mass += p[id];
  }
  const std::vector<double> want = softmax_reference(x);
  // transformers keeps ids 0, 1, 4, 7 here (top-k drops 3 and 6, top-p then 2 and 5).
  EXPECT_EQ(std::count(want.begin(), want.end(), 0.0), 4);
  expect_distribution(sampler, logits, previous, want, 200000);

  SamplingParams plain;
  plain.seed = 5;
  Sampler unfiltered(plain);
  expect_distribution(unfiltered, logits, {}, softmax_reference(logits), 200000);

  SamplingParams with_min_p;
  with_min_p.min_p = 0.3;
  with_min_p.seed = 9;
  Sampler min_p_sampler(with_min_p);
  std::vector<double> m = logits;
  apply_min_p(m, 0.3);
  expect_distribution(min_p_sampler, logits, {}, softmax_reference(m), 200000);
}

TEST(Sampler, SameSeedSameIds) {
  const std::vector<double> logits = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  const Tensor t = to_tensor(logits);
  const auto draw = [&](uint64_t seed) {
    SamplingParams params;
    params.seed = seed;
    params.temperature = 1.3;
    Sampler sampler(params);
    std::vector<int64_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(sampler.sample(t, ids));
    return ids;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, GreedyIsArgmaxAfterTheRepetitionPenalty) {
  SamplingParams params;
  params.temperature = 0;
  params.top_k = 1;  // ignored by greedy decoding, as in transformers
  Sampler greedy(params);
  EXPECT_EQ(greedy.sample(to_tensor({1, 5, 5, -2}), {}), 1);  // ties: the lowest id
  params.repetition_penalty = 2.0;
  Sampler penalized(params);
  EXPECT_EQ(penalized.sample(to_tensor({1, 5, 3, -2}), {1}), 2);  // 5 / 2 < 3
  EXPECT_EQ(penalized.sample(to_tensor({-1, -0.5, -0.8}), {1}), 2);  // -0.5 * 2 < -0.8
  EXPECT_EQ(penalized.sample(to_tensor({-kInf, -kInf, 0}), {}), 2);
}

TEST(Sampler, AcceptsEveryFloatingDtype) {
  // Values exact in every dtype (fp8 e4m3fn included), distinct enough for one winner.
  const std::vector<double> logits = {0.5, -1, 2, 1.5, -0.25, 0.75};
  for (const DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kFloat8_e4m3fn, kFloat8_e5m2}) {
    SamplingParams params;
    params.seed = 1;
    params.top_k = 3;
    Sampler sampler(params);
    SamplingParams same = params;
    Sampler reference(same);
    const Tensor t = to_tensor(logits, dtype);
    EXPECT_EQ(sampler.process(t, {}), reference.process(to_tensor(logits, kFloat64), {})) << name(dtype);
    std::vector<int64_t> a, b;
    for (int i = 0; i < 20; ++i) {
      a.push_back(sampler.sample(t, {}));
      b.push_back(reference.sample(to_tensor(logits, kFloat64), {}));
    }
    EXPECT_EQ(a, b) << name(dtype);
    // A strided view of the logits is read in logical order.
    const Tensor strided = to_tensor({0.5, 9, -1, 9, 2, 9, 1.5, 9, -0.25, 9, 0.75, 9}, dtype).slice(0, 0, 12, 2);
    EXPECT_EQ(Sampler(params).process(strided, {}), Sampler(params).process(t, {})) << name(dtype);
  }
}

TEST(Sampler, Errors) {
  const auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([] { Sampler(SamplingParams{.temperature = -1}); }),
            "[sampler] temperature: expected a finite value >= 0, got -1");
  EXPECT_EQ(message([] { Sampler(SamplingParams{.top_k = -2}); }), "[sampler] top_k: expected >= 0 (0 = off), got -2");
  EXPECT_EQ(message([] { Sampler(SamplingParams{.top_p = 1.5}); }), "[sampler] top_p: expected a value in [0, 1], got 1.5");
  EXPECT_EQ(message([] { Sampler(SamplingParams{.min_p = -0.1}); }), "[sampler] min_p: expected a value in [0, 1], got -0.1");
  EXPECT_EQ(message([] { Sampler(SamplingParams{.repetition_penalty = 0}); }),
            "[sampler] repetition_penalty: expected a finite value > 0, got 0");
  Sampler sampler(SamplingParams{});
  EXPECT_EQ(message([&] { sampler.sample(to_tensor({1, std::nan(""), 2}), {}); }),
            "[sampler] logits: expected finite values or -inf, got nan at id 1");
  EXPECT_EQ(message([&] { sampler.sample(to_tensor({1, kInf}), {}); }),
            "[sampler] logits: expected finite values or -inf, got inf at id 1");
  EXPECT_EQ(message([&] { sampler.sample(to_tensor({-kInf, -kInf}), {}); }),
            "[sampler] logits: expected at least one finite value, got 2 times -inf");
  EXPECT_EQ(message([&] { sampler.sample(to_tensor({1, 2, 3, 4}).reshape({2, 2}), {}); }),
            "[sampler] logits: expected a non-empty 1-D tensor [vocab], got 2 dims");
  EXPECT_EQ(message([&] { sampler.sample(to_tensor({1, 2}, kInt64), {}); }),
            "[sampler] logits dtype: expected a floating dtype, got int64");
  Sampler penalized(SamplingParams{.repetition_penalty = 1.1});
  EXPECT_EQ(message([&] { penalized.sample(to_tensor({1, 2}), {0, 2}); }),
            "[sampler] previous_ids: expected ids in [0, 2), got 2");
}

}  // namespace
}  // namespace ember::engine
