// CPU scaled dot-product attention, the reference for the CUDA kernels. Tasks of up to
// kRowsPerTask query rows of one (batch, head) run over OpenMP threads; each converts its k and v
// head to the compute type once (f16/bf16/f32 compute in float, f64 in double), then per query
// row: scores = q . k_j * scale (+ mask), the row max, exp(s - max) with the sum in double, and
// out = sum_j p_j v_j / sum. A row whose scores are all -inf (masked) has max -inf and is written
// as zeros; a NaN score propagates to the row's outputs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {
namespace {

constexpr int64_t kRowsPerTask = 16;

struct Dims {
  int64_t B, H, L, E, Hk, Hv, S, Ev;
};

/// Element (b, h, i, j) of a 4-D tensor as a pointer, from its element strides.
template <class T> const T* at(const Tensor& x, int64_t b, int64_t h, int64_t i, int64_t j) {
  return static_cast<const T*>(x.raw_data()) + b * x.stride(0) + h * x.stride(1) + i * x.stride(2) + j * x.stride(3);
}

/// Rows [0, rows) of x[b, h] (each `cols` long) converted into dst, row-major.
template <class T, class C> void load_rows(const Tensor& x, int64_t b, int64_t h, int64_t rows, int64_t cols, C* dst) {
  const int64_t sr = x.stride(2), sc = x.stride(3);
  const T* base = at<T>(x, b, h, 0, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<C>(base[r * sr + c * sc]);
}

/// The additive mask value at (b, h, i, j) in C: 0 or -inf for bool masks.
template <class M, class C> C mask_value(const Tensor& mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  const M m = *at<M>(mask, b, h, i, j);
  if constexpr (std::is_same_v<M, bool>) return m ? C(0) : -std::numeric_limits<C>::infinity();
  else return static_cast<C>(m);
}

// M: the mask's element type (void: no mask).
template <class T, class M>
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale,
               const Tensor& out, const Dims& n) {
  using C = compute_t<T>;
  const int64_t row_tasks = (n.L + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t tasks = n.B * n.H * row_tasks;
  const C scale_c = static_cast<C>(scale);
  const int64_t work = tasks * kRowsPerTask * n.S * (n.E + n.Ev);
#pragma omp parallel for schedule(dynamic) if (work >= kParallelGrain && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t bh = task / row_tasks, b = bh / n.H, h = bh % n.H;
    const int64_t row_begin = (task % row_tasks) * kRowsPerTask, row_end = std::min(n.L, row_begin + kRowsPerTask);
    // Keys that any of these rows may attend (causal: up to the last row).
    const int64_t keys = causal ? std::min(n.S, row_end) : n.S;
    thread_local std::vector<C> kbuf, vbuf, qrow, scores, acc;
    kbuf.resize(static_cast<size_t>(keys * n.E));
    vbuf.resize(static_cast<size_t>(keys * n.Ev));
    qrow.resize(static_cast<size_t>(n.E));
    scores.resize(static_cast<size_t>(keys));
    acc.resize(static_cast<size_t>(n.Ev));
    load_rows<T>(k, b, h / (n.H / n.Hk), keys, n.E, kbuf.data());
    load_rows<T>(v, b, h / (n.H / n.Hv), keys, n.Ev, vbuf.data());
    for (int64_t i = row_begin; i < row_end; ++i) {
      const T* qi = at<T>(q, b, h, i, 0);
      for (int64_t d = 0; d < n.E; ++d) qrow[d] = static_cast<C>(qi[d * q.stride(3)]);
      const int64_t row_keys = causal ? std::min(n.S, i + 1) : n.S;
      C max = -std::numeric_limits<C>::infinity();
      for (int64_t j = 0; j < row_keys; ++j) {
        const C* kj = kbuf.data() + j * n.E;
        C dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < n.E; ++d) dot += qrow[d] * kj[d];
        C s = dot * scale_c;
        if constexpr (!std::is_void_v<M>) s += mask_value<M, C>(mask, b, h, i, j);
        scores[j] = s;
        if (!(s <= max) && max == max) max = s;  // a NaN score becomes (and stays) the max: the row is NaN
      }
      T* o = static_cast<T*>(out.raw_data()) + b * out.stride(0) + h * out.stride(1) + i * out.stride(2);
      const int64_t so = out.stride(3);
      if (max == -std::numeric_limits<C>::infinity()) {  // every key masked
        for (int64_t c = 0; c < n.Ev; ++c) o[c * so] = T(C(0));
        continue;
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t j = 0; j < row_keys; ++j) {
        const C p = std::exp(scores[j] - max);
        sum += static_cast<double>(p);
        const C* vj = vbuf.data() + j * n.Ev;
#pragma omp simd
        for (int64_t c = 0; c < n.Ev; ++c) acc[c] += p * vj[c];
      }
      const C inv = static_cast<C>(1.0 / sum);
      for (int64_t c = 0; c < n.Ev; ++c) o[c * so] = T(acc[c] * inv);
    }
  }
}

}  // namespace

void scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                                  double scale, const Tensor& out) {
  const Dims n{q.size(0), q.size(1), q.size(2), q.size(3), k.size(1), v.size(1), k.size(2), v.size(3)};
  dispatch(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || is_fp8_v<T>) {
      fail("scaled_dot_product_attention", "dtype: expected float16, bfloat16, float32 or float64, got {}", name(q.dtype()));
    } else {
      if (!mask.defined()) return attention<T, void>(q, k, v, mask, causal, scale, out, n);
      switch (mask.dtype()) {
        case kBool: return attention<T, bool>(q, k, v, mask, causal, scale, out, n);
        case kFloat32: return attention<T, float>(q, k, v, mask, causal, scale, out, n);
        default:
          EMBER_CHECK(mask.dtype() == q.dtype(), "scaled_dot_product_attention", "attn_mask dtype: expected bool, float32 or {}, got {}",
                      name(q.dtype()), name(mask.dtype()));
          return attention<T, T>(q, k, v, mask, causal, scale, out, n);
      }
    }
  });
}

}  // namespace ember::cpu
