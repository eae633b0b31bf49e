// Strided loops for the CPU backend.
//
// for_each_run walks every element of a shape over N operands given by base pointers and byte
// strides. It drops size-1 dims, merges dims that are contiguous for every operand, and hands
// the innermost dim to `run` as one run (pointers, inner byte strides, length), so the body is
// a plain loop the compiler vectorises when the strides equal the element size. Large shapes
// are split over OpenMP threads by outer index.
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "cpu/dispatch.h"
#include "ember/tensor.h"

namespace ember::cpu {

inline constexpr int64_t kParallelGrain = 1 << 15;  // elements per thread before OpenMP helps

template <size_t N, class Run>
void for_each_run(const Shape& sizes, const std::array<char*, N>& bases, const std::array<Shape, N>& byte_strides,
                  Run&& run) {
  // Collapse: keep dims of size != 1, merge d into d-1 when contiguous for all operands.
  Shape sz;
  std::array<Shape, N> st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (sizes[d] == 0) return;
    bool merge = !sz.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = st[k].back() == byte_strides[k][d] * sizes[d];
    if (merge) {
      sz.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) st[k].back() = byte_strides[k][d];
    } else {
      sz.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(byte_strides[k][d]);
    }
  }
  std::array<int64_t, N> inner{};
  if (sz.empty()) {  // one element
    run(bases, inner, int64_t{1});
    return;
  }
  const int64_t nd = static_cast<int64_t>(sz.size());
  const int64_t n_inner = sz.back();
  for (size_t k = 0; k < N; ++k) inner[k] = st[k].back();
  int64_t n_outer = 1;
  for (int64_t d = 0; d + 1 < nd; ++d) n_outer *= sz[d];

  auto outer_ptrs = [&](int64_t o) {
    std::array<char*, N> p = bases;
    for (int64_t d = nd - 2; d >= 0; --d) {
      const int64_t i = o % sz[d];
      o /= sz[d];
      for (size_t k = 0; k < N; ++k) p[k] += i * st[k][d];
    }
    return p;
  };
  if (n_outer * n_inner >= kParallelGrain && n_outer > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < n_outer; ++o) run(outer_ptrs(o), inner, n_inner);
  } else {
    for (int64_t o = 0; o < n_outer; ++o) run(outer_ptrs(o), inner, n_inner);
  }
}

inline Shape byte_strides(const Tensor& t) {
  Shape s = t.strides();
  for (auto& v : s) v *= static_cast<int64_t>(t.itemsize());
  return s;
}

/// out[i] = f(in[0][i], in[1][i], ...) over out's sizes; the inputs have out's sizes (broadcast
/// views allowed) and element types In..., out has element type Out.
template <class Out, class... In, class F>
void map(const Tensor& out, F&& f, const std::array<Tensor, sizeof...(In)>& in) {
  constexpr size_t N = sizeof...(In) + 1;
  std::array<char*, N> bases{static_cast<char*>(out.raw_data())};
  std::array<Shape, N> strides{byte_strides(out)};
  for (size_t k = 1; k < N; ++k) {
    bases[k] = static_cast<char*>(in[k - 1].raw_data());
    strides[k] = byte_strides(in[k - 1]);
  }
  for_each_run<N>(out.sizes(), bases, strides, [&](std::array<char*, N> p, std::array<int64_t, N> s, int64_t n) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      const bool contiguous = s[0] == sizeof(Out) && ((s[I + 1] == sizeof(In)) && ...);
      if (contiguous) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = f(reinterpret_cast<const In*>(p[I + 1])[i]...);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[I + 1] + i * s[I + 1])...);
        }
      }
    }(std::index_sequence_for<In...>{});
  });
}

}  // namespace ember::cpu
