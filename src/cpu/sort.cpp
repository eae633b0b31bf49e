// CPU sort and topk: one line along dim per task, (value, index) pairs ordered with NaN as
// the largest value, ties broken by index so results never depend on the algorithm.
#include <algorithm>
#include <cmath>
#include <utility>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {
namespace {

template <class V> bool nan_v(V v) {
  if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
  else return false;
}

/// a before b in ascending order (NaN last) or descending order (NaN first); equal values,
/// NaN included, keep index order.
template <class V> struct LineOrder {
  bool descending;
  bool operator()(const std::pair<V, int64_t>& a, const std::pair<V, int64_t>& b) const {
    const bool an = nan_v(a.first), bn = nan_v(b.first);
    if (an || bn) {
      if (an && bn) return a.second < b.second;
      return descending ? an : bn;
    }
    if (a.first != b.first) return descending ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

template <class F> void sortable_dispatch(const char* op, DType d, F&& f) {
  dispatch(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_v<T> || is_fp8_v<T>) fail(op, "dtype: expected a real non-float8 type, got {}", name(d));
    else f(tag);
  });
}

// The first `k` elements (k < 0: all) of every line along dim in LineOrder (value, then index, so
// ties keep their order), as values and indices.
void ordered_lines(const char* op, const Tensor& x, int64_t k, int64_t dim, bool descending, const Tensor& values,
                   const Tensor& indices) {
  sortable_dispatch(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using V = compute_t<T>;
    const int64_t sv = values.stride(dim) * static_cast<int64_t>(sizeof(T)), si = indices.stride(dim) * 8;
    for_each_line(x, dim, [&](const char* p, int64_t s, int64_t n, std::array<char*, 2> o) {
      std::vector<std::pair<V, int64_t>> line(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) line[i] = {static_cast<V>(*reinterpret_cast<const T*>(p + i * s)), i};
      const int64_t count = k < 0 ? n : k;
      if (count == n) std::sort(line.begin(), line.end(), LineOrder<V>{descending});
      else std::partial_sort(line.begin(), line.begin() + count, line.end(), LineOrder<V>{descending});
      for (int64_t i = 0; i < count; ++i) {
        *reinterpret_cast<T*>(o[0] + i * sv) = *reinterpret_cast<const T*>(p + line[i].second * s);
        *reinterpret_cast<int64_t*>(o[1] + i * si) = line[i].second;
      }
    }, values, indices);
  });
}

}  // namespace

void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  ordered_lines("sort", x, -1, dim, descending, values, indices);
}

void topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values, const Tensor& indices) {
  ordered_lines("topk", x, k, dim, largest, values, indices);
}

}  // namespace ember::cpu
