// Index arithmetic shared by the CPU reduction, sort, index and softmax kernels.
#pragma once
#include <algorithm>
#include <array>
#include <cstdlib>

#include "cpu/loops.h"

namespace ember::cpu {

template <class T> inline constexpr bool is_fp8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

/// Byte offset of the i-th element (row-major over sizes) given byte strides.
inline int64_t offset_of(int64_t i, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

/// x's dims split into kept dims (with x and out byte strides) and reduced dims (x byte
/// strides, ordered by decreasing stride so the last is the innermost), size-1 dims dropped
/// and neighbours that are contiguous with each other merged. Never empty on the reduced side:
/// a reduction over size-1 dims only becomes one dim of size 1.
struct ReduceGeometry {
  Shape kept_sizes, kept_x, kept_out;
  Shape red_sizes, red_x;
};

inline ReduceGeometry reduce_geometry(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  ReduceGeometry g;
  const Shape xs = byte_strides(x), os = byte_strides(out);
  std::vector<std::pair<int64_t, int64_t>> red;  // (byte stride, size)
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.sizes()[d];
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) {
      if (n != 1) red.emplace_back(xs[d], n);
      continue;
    }
    if (n == 1) continue;
    if (!g.kept_sizes.empty() && g.kept_x.back() == xs[d] * n && g.kept_out.back() == os[d] * n) {
      g.kept_sizes.back() *= n;
      g.kept_x.back() = xs[d];
      g.kept_out.back() = os[d];
    } else {
      g.kept_sizes.push_back(n);
      g.kept_x.push_back(xs[d]);
      g.kept_out.push_back(os[d]);
    }
  }
  std::stable_sort(red.begin(), red.end(), [](auto a, auto b) { return std::abs(a.first) > std::abs(b.first); });
  for (const auto& [stride, n] : red) {
    if (!g.red_sizes.empty() && g.red_x.back() == stride * n) {
      g.red_sizes.back() *= n;
      g.red_x.back() = stride;
    } else {
      g.red_sizes.push_back(n);
      g.red_x.push_back(stride);
    }
  }
  if (g.red_sizes.empty()) { g.red_sizes.push_back(1); g.red_x.push_back(0); }
  return g;
}

/// Calls f(p, stride, n, others) for every line of x along dim, in parallel when the work is
/// large: p is the line's first element, stride its byte stride, n = x.size(dim), and others
/// the matching positions in tensors with x's sizes on every dim but dim.
template <class F, class... Ts>
void for_each_line(const Tensor& x, int64_t dim, F&& f, const Ts&... others) {
  constexpr size_t N = sizeof...(Ts);
  Shape sizes, x_strides;
  std::array<Shape, N> o_strides;
  std::array<char*, N> o_bases{static_cast<char*>(others.raw_data())...};
  const std::array<const Tensor*, N> o_tensors{&others...};
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    sizes.push_back(x.sizes()[d]);
    x_strides.push_back(x.strides()[d] * static_cast<int64_t>(x.itemsize()));
    for (size_t k = 0; k < N; ++k) o_strides[k].push_back(o_tensors[k]->strides()[d] * static_cast<int64_t>(o_tensors[k]->itemsize()));
  }
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[dim];
  const int64_t s = x.dim() == 0 ? 0 : x.strides()[dim] * static_cast<int64_t>(x.itemsize());
  const int64_t n_lines = shape_numel(sizes);
  const char* xb = static_cast<const char*>(x.raw_data());
#pragma omp parallel for schedule(static) if (n_lines * n >= kParallelGrain && n_lines > 1)
  for (int64_t l = 0; l < n_lines; ++l) {
    std::array<char*, N> o;
    for (size_t k = 0; k < N; ++k) o[k] = o_bases[k] + offset_of(l, sizes, o_strides[k]);
    f(xb + offset_of(l, sizes, x_strides), s, n, o);
  }
}

}  // namespace ember::cpu
