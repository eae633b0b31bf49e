// CPU mixture-of-experts: the reference every CUDA kernel is compared with. Grouped products run
// one BLAS product per group (offsets are host memory here); routing, permutation and un-permute
// are plain loops; the fused layer reads like a model block, built from ember's own ops.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend.h"
#include "cpu/loops.h"
#include "ember/ops.h"

namespace ember::cpu {
namespace {

// Group boundaries from cumulative end offsets: offsets clamp to [previous end, extent], so a
// bad offset gives an empty or shortened group, never an out-of-bounds read.
std::vector<int64_t> group_bounds(const Tensor& offs, int64_t extent) {
  const std::vector<int32_t> raw = offs.contiguous().to_vector<int32_t>();
  std::vector<int64_t> bounds(raw.size() + 1, 0);
  for (size_t g = 0; g < raw.size(); ++g) bounds[g + 1] = std::clamp<int64_t>(raw[g], bounds[g], extent);
  return bounds;
}

// A float8 weight [G, N, K] (as any view) decoded with its scale [G, R, C] (tensorwise, per
// channel, or 128x128 blocks) to float32 [G, N, K].
Tensor dequantized_weight(const Tensor& w_nk, const Tensor& scale) {
  const Tensor w = w_nk.to(kFloat32).contiguous();
  const Tensor s = scale.contiguous();
  const int64_t g = w.size(0), n = w.size(1), k = w.size(2), r = s.size(1), c = s.size(2);
  const bool rowwise = r == n && c == 1 && !(r == 1 && c == 1);
  float* p = w.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
#pragma omp parallel for collapse(2) if (g * n * k > kParallelGrain)
  for (int64_t e = 0; e < g; ++e) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t ri = r == 1 ? 0 : rowwise ? i : i / 128;
      for (int64_t j = 0; j < k; ++j) p[(e * n + i) * k + j] *= sp[(e * r + ri) * c + (c == 1 ? 0 : j / 128)];
    }
  }
  return w;
}

// silu(g) * u in float32, rounded to `dtype` (the activation the down projection reads).
Tensor silu_mul(const Tensor& g, const Tensor& u, DType dtype) { return mul(silu(g), u).to(dtype).to(kFloat32); }

}  // namespace

void grouped_mm(const Tensor& a, const Tensor& b, const Tensor& offs, const Tensor& out) {
  if (!offs.defined()) {  // 3D x 3D
    bmm(a, b, out);
    return;
  }
  if (a.dim() == 2 && b.dim() == 3) {  // rows of a jagged
    const auto bounds = group_bounds(offs, a.size(0));
    for (size_t g = 0; g + 1 < bounds.size(); ++g) {
      const int64_t s = bounds[g], n = bounds[g + 1] - s;
      if (n > 0) bmm(a.narrow(0, s, n).unsqueeze(0), b.select(0, static_cast<int64_t>(g)).unsqueeze(0), out.narrow(0, s, n).unsqueeze(0));
    }
  } else if (a.dim() == 3) {  // columns of b jagged
    const auto bounds = group_bounds(offs, b.size(1));
    for (size_t g = 0; g + 1 < bounds.size(); ++g) {
      const int64_t s = bounds[g], n = bounds[g + 1] - s;
      if (n > 0) bmm(a.select(0, static_cast<int64_t>(g)).unsqueeze(0), b.narrow(1, s, n).unsqueeze(0), out.narrow(1, s, n).unsqueeze(0));
    }
  } else {  // the contraction jagged: one output matrix per group
    const auto bounds = group_bounds(offs, a.size(1));
    for (size_t g = 0; g + 1 < bounds.size(); ++g) {
      const int64_t s = bounds[g], n = bounds[g + 1] - s;
      const Tensor o = out.select(0, static_cast<int64_t>(g));
      if (n > 0) bmm(a.narrow(1, s, n).unsqueeze(0), b.narrow(0, s, n).unsqueeze(0), o.unsqueeze(0));
      else fill(o, Scalar(0));
    }
  }
}

void scaled_grouped_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& offs,
                       const Tensor& out) {
  Tensor af = a.to(kFloat32);  // [T, K]
  if (scale_a.defined()) af = mul(af, scale_a.numel() == 1 ? scale_a.reshape({1, 1}) : scale_a.reshape({-1, 1}));
  const Tensor w = dequantized_weight(b.transpose(1, 2), scale_b);  // [G, N, K]
  const auto bounds = group_bounds(offs, a.size(0));
  for (size_t g = 0; g + 1 < bounds.size(); ++g) {
    const int64_t s = bounds[g], n = bounds[g + 1] - s;
    if (n > 0) copy(mm(af.narrow(0, s, n), w.select(0, static_cast<int64_t>(g)).t()), out.narrow(0, s, n));
  }
}

void moe_route(const Tensor& logits, const Tensor& expert_bias, const MoeRouteOptions& options, const Tensor& weights,
               const Tensor& ids) {
  const Tensor l = logits.to(kFloat32).contiguous();
  const int64_t t = l.size(0), e = l.size(1), k = options.top_k;
  std::vector<float> bias(static_cast<size_t>(e), 0.f);
  if (expert_bias.defined()) bias = expert_bias.to(kFloat32).contiguous().to_vector<float>();
  const float* lp = l.data_ptr<float>();
  Tensor w = empty({t, k}, kFloat32), id = empty({t, k}, kInt32);
  float* wp = w.data_ptr<float>();
  int32_t* ip = id.data_ptr<int32_t>();
#pragma omp parallel for if (t * e > kParallelGrain)
  for (int64_t i = 0; i < t; ++i) {
    const float* row = lp + i * e;
    std::vector<float> score(static_cast<size_t>(e)), key(static_cast<size_t>(e));
    if (options.scoring == MoeScoring::Softmax) {
      const float mx = *std::max_element(row, row + e);
      float sum = 0.f;
      for (int64_t j = 0; j < e; ++j) sum += score[j] = std::exp(row[j] - mx);
      for (int64_t j = 0; j < e; ++j) score[j] /= sum;
    } else {
      for (int64_t j = 0; j < e; ++j) score[j] = 1.f / (1.f + std::exp(-row[j]));
    }
    for (int64_t j = 0; j < e; ++j) key[j] = score[j] + bias[j];
    std::vector<int32_t> idx(static_cast<size_t>(e));
    std::iota(idx.begin(), idx.end(), 0);
    // Descending key, ties to the lower expert id; NaN keys sort last.
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t x, int32_t y) {
      const float kx = key[x], ky = key[y];
      const bool nx = std::isnan(kx), ny = std::isnan(ky);
      if (nx != ny) return ny;
      if (nx) return x < y;
      return kx > ky || (kx == ky && x < y);
    });
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) sum += score[idx[j]];
    const float norm = options.norm_topk ? 1.f / (sum + static_cast<float>(options.norm_eps)) : 1.f;
    for (int64_t j = 0; j < k; ++j) {
      wp[i * k + j] = score[idx[j]] * norm * static_cast<float>(options.routed_scaling);
      ip[i * k + j] = idx[j];
    }
  }
  copy(w, weights);
  copy(id, ids);
}

void moe_permute(const Tensor& expert_ids, const Tensor& order, const Tensor& inverse, const Tensor& tokens, const Tensor& counts,
                 const Tensor& offsets) {
  const Tensor ids = expert_ids.to(kInt64).contiguous();
  const int64_t m = ids.numel(), k = expert_ids.size(1), e = counts.size(0);
  const int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<int32_t> cnt(static_cast<size_t>(e), 0), ord(static_cast<size_t>(m)), inv(static_cast<size_t>(m)),
      tok(static_cast<size_t>(m)), ends(static_cast<size_t>(e));
  for (int64_t p = 0; p < m; ++p)
    if (ip[p] >= 0 && ip[p] < e) ++cnt[ip[p]];
  std::vector<int32_t> next(static_cast<size_t>(e));
  int32_t run = 0;
  for (int64_t g = 0; g < e; ++g) {
    next[g] = run;
    run += cnt[g];
    ends[g] = run;
  }
  int32_t tail = run;  // pairs with an id outside [0, E) go after every group, in pair order
  for (int64_t p = 0; p < m; ++p) {
    const int32_t pos = ip[p] >= 0 && ip[p] < e ? next[ip[p]]++ : tail++;
    ord[pos] = static_cast<int32_t>(p);
    inv[p] = pos;
    tok[pos] = static_cast<int32_t>(p / k);
  }
  copy(tensor(ord), order);
  copy(tensor(inv), inverse);
  copy(tensor(tok), tokens);
  copy(tensor(cnt), counts);
  copy(tensor(ends), offsets);
}

void moe_unpermute(const Tensor& y, const Tensor& inverse, const Tensor& weights, const Tensor& out) {
  const Tensor yf = y.to(kFloat32).contiguous(), wf = weights.to(kFloat32).contiguous();
  const std::vector<int32_t> inv = inverse.contiguous().to_vector<int32_t>();
  const int64_t t = wf.size(0), k = wf.size(1), h = yf.size(1), m = yf.size(0);
  Tensor acc = zeros({t, h}, kFloat32);
  const float *yp = yf.data_ptr<float>(), *wp = wf.data_ptr<float>();
  float* ap = acc.data_ptr<float>();
#pragma omp parallel for if (t * k * h > kParallelGrain)
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pos = inv[i * k + j];
      EMBER_CHECK(pos >= 0 && pos < m, "moe_unpermute", "inverse[{}]: expected a row in [0, {}), got {}", i * k + j, m, pos);
      for (int64_t c = 0; c < h; ++c) ap[i * h + c] += wp[i * k + j] * yp[pos * h + c];
    }
  }
  copy(acc, out);
}

// The reference MoE block. Products accumulate in f32; the expert activation is rounded to x's
// dtype (what the down projection reads); everything after stays f32 until the one final rounding.
void moe_layer(const Tensor& x, const Tensor& router_weight, const MoeExperts& experts, const MoeLayerOptions& options,
               const Tensor& out) {
  const bool fp8 = experts.gate.dtype() == kFloat8_e4m3fn;
  const auto weight = [&](const Tensor& w, const Tensor& s) { return fp8 ? dequantized_weight(w, s) : w.to(kFloat32); };
  const int64_t t = x.size(0), k = options.route.top_k;
  const Tensor xf = x.to(kFloat32);                                              // [T, H]
  const Tensor logits = linear(xf, router_weight.to(kFloat32));                  // [T, E]
  const auto [topk_weights, topk_ids] = ember::moe_route(logits, options.route); // [T, k] f32, [T, k] int32
  const Tensor expert = topk_ids.reshape({-1});                                  // [T*k] expert of pair t*k+j
  const Tensor token = ember::arange(0, static_cast<double>(t)).unsqueeze(1).expand({t, k}).reshape({-1});  // [T*k] its token
  const Tensor xs = ember::index_select(xf, 0, token).unsqueeze(-1);             // [T*k, H, 1]
  const Tensor w_gate = ember::index_select(weight(experts.gate, experts.gate_scale), 0, expert);  // [T*k, I, H]
  const Tensor w_up = ember::index_select(weight(experts.up, experts.up_scale), 0, expert);        // [T*k, I, H]
  const Tensor w_down = ember::index_select(weight(experts.down, experts.down_scale), 0, expert);  // [T*k, H, I]
  const Tensor h = silu_mul(ember::bmm(w_gate, xs), ember::bmm(w_up, xs), x.dtype());  // [T*k, I, 1]
  const Tensor y = ember::bmm(w_down, h).squeeze(-1);                            // [T*k, H]
  const Tensor weighted = mul(y, topk_weights.reshape({-1, 1}));                 // [T*k, H]
  Tensor combined = sum(weighted.view({t, k, -1}), {1});                         // [T, H]
  if (options.shared) {
    const MoeSharedExpert& s = *options.shared;
    const int64_t is = s.down.size(1);
    const Tensor gu = linear(xf, s.gate_up.to(kFloat32));                        // [T, 2Is]
    const Tensor hs = silu_mul(gu.narrow(1, 0, is), gu.narrow(1, is, is), x.dtype());  // [T, Is]
    Tensor ys = linear(hs, s.down.to(kFloat32));                                 // [T, H]
    if (s.gate.defined()) ys = mul(ys, sigmoid(linear(xf, s.gate.to(kFloat32))));  // [T, H] * [T, 1]
    combined = add(combined, ys);                                                // [T, H]
  }
  copy(combined, out);
}

}  // namespace ember::cpu
