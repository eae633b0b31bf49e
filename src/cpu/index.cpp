// CPU index_select, gather, index_add and take. Every index is checked before anything is
// read through it; a bad one throws ember::Error naming the index and the valid range.
#include <atomic>
#include <cstring>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {
namespace {

std::vector<int64_t> index_values(const Tensor& index) {
  if (index.dtype() == kInt32) {
    const auto v = index.to_vector<int32_t>();
    return {v.begin(), v.end()};
  }
  return index.to_vector<int64_t>();
}

void check_indices(const char* op, const std::vector<int64_t>& idx, int64_t dim, int64_t size) {
  for (int64_t v : idx) {
    EMBER_CHECK(v >= 0 && v < size, op, "index {} for dim {} of size {}: expected one in [0, {}), got {}", v, dim, size,
                size, v);
  }
}

/// Byte offsets of the elements [i0, i1) (row-major over sizes) for each set of byte strides.
template <size_t N>
void offsets(int64_t i0, int64_t i1, const Shape& sizes, const std::array<Shape, N>& strides,
             std::array<std::vector<int64_t>, N>& out) {
  for (size_t k = 0; k < N; ++k) {
    out[k].resize(static_cast<size_t>(i1 - i0));
    for (int64_t i = i0; i < i1; ++i) out[k][static_cast<size_t>(i - i0)] = offset_of(i, sizes, strides[k]);
  }
}

/// Copies one element of `size` bytes; the fixed sizes become single loads and stores.
inline void copy_element(char* dst, const char* src, size_t size) {
  switch (size) {
    case 1: std::memcpy(dst, src, 1); break;
    case 2: std::memcpy(dst, src, 2); break;
    case 4: std::memcpy(dst, src, 4); break;
    case 8: std::memcpy(dst, src, 8); break;
    default: std::memcpy(dst, src, 16); break;
  }
}

/// A tensor's sizes and byte strides split around dim: (outer, inner) parts.
struct Split {
  Shape outer_sizes, outer_strides, inner_sizes, inner_strides;
  int64_t dim_stride;
};
Split split_at(const Tensor& t, int64_t dim) {
  Split s;
  const Shape bs = byte_strides(t);
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) { s.outer_sizes.push_back(t.sizes()[d]); s.outer_strides.push_back(bs[d]); }
    if (d > dim) { s.inner_sizes.push_back(t.sizes()[d]); s.inner_strides.push_back(bs[d]); }
  }
  s.dim_stride = bs[dim];
  return s;
}

constexpr int64_t kTile = 1024;

}  // namespace

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const auto idx = index_values(index);
  check_indices("index_select", idx, dim, x.sizes()[dim]);
  const Split xs = split_at(x, dim), os = split_at(out, dim);
  const int64_t n_outer = shape_numel(xs.outer_sizes), n_inner = shape_numel(xs.inner_sizes), m = static_cast<int64_t>(idx.size());
  const int64_t n_tiles = (n_inner + kTile - 1) / kTile, work = n_outer * m * n_tiles;
  const size_t item = x.itemsize();
  const char* xb = static_cast<const char*>(x.raw_data());
  char* ob = static_cast<char*>(out.raw_data());
  const bool contiguous_rows = n_inner == 1 || (x.is_contiguous() && out.is_contiguous());
#pragma omp parallel for schedule(static) if (work * std::min(n_inner, kTile) >= kParallelGrain)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t t = w % n_tiles, j = (w / n_tiles) % m, o = w / (n_tiles * m);
    const int64_t i0 = t * kTile, i1 = std::min(n_inner, i0 + kTile);
    const char* src = xb + offset_of(o, xs.outer_sizes, xs.outer_strides) + idx[j] * xs.dim_stride;
    char* dst = ob + offset_of(o, os.outer_sizes, os.outer_strides) + j * os.dim_stride;
    if (contiguous_rows) {
      std::memcpy(dst + i0 * item, src + i0 * item, static_cast<size_t>(i1 - i0) * item);
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        copy_element(dst + offset_of(i, os.inner_sizes, os.inner_strides), src + offset_of(i, xs.inner_sizes, xs.inner_strides), item);
      }
    }
  }
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const Tensor idx = index.dtype() == kInt64 ? index : index.to(kInt64);
  const int64_t size = x.sizes()[dim], x_dim_stride = x.strides()[dim] * static_cast<int64_t>(x.itemsize());
  const size_t item = x.itemsize();
  std::atomic<bool> bad{false};
  int64_t bad_value = 0;
  // x is walked with index's sizes: index.size(d) <= x.size(d) for every d != dim.
  for_each_line(idx, dim, [&](const char* p, int64_t s, int64_t n, std::array<char*, 2> o) {
    const int64_t so = out.strides()[dim] * static_cast<int64_t>(item);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = *reinterpret_cast<const int64_t*>(p + i * s);
      if (v < 0 || v >= size) {
        if (!bad.exchange(true)) bad_value = v;
        return;
      }
      copy_element(o[0] + i * so, o[1] + v * x_dim_stride, item);
    }
  }, out, x);
  EMBER_CHECK(!bad, "gather", "index {} for dim {} of size {}: expected one in [0, {}), got {}", bad_value, dim, size, size,
              bad_value);
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  const auto idx = index_values(index);
  check_indices("index_add", idx, dim, out.sizes()[dim]);
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_fp8_v<T>) {
      fail("index_add", "dtype: expected a non-float8 type, got {}", name(out.dtype()));
    } else {
      using C = compute_t<T>;
      const C a = alpha.to<C>();
      const Split os = split_at(out, dim), ss = split_at(src, dim);
      const int64_t n_outer = shape_numel(os.outer_sizes), n_inner = shape_numel(os.inner_sizes), m = static_cast<int64_t>(idx.size());
      const int64_t n_tiles = (n_inner + kTile - 1) / kTile, work = n_outer * n_tiles;
      char* ob = static_cast<char*>(out.raw_data());
      const char* sb = static_cast<const char*>(src.raw_data());
      // Each task owns a block of output positions and adds the slices in index order, so
      // repeated indices accumulate in the order torch's CPU kernel uses.
#pragma omp parallel for schedule(static) if (work * m * std::min(n_inner, kTile) >= kParallelGrain)
      for (int64_t w = 0; w < work; ++w) {
        const int64_t o = w / n_tiles, i0 = (w % n_tiles) * kTile, i1 = std::min(n_inner, i0 + kTile);
        std::array<std::vector<int64_t>, 2> off;
        offsets<2>(i0, i1, os.inner_sizes, {os.inner_strides, ss.inner_strides}, off);
        char* obase = ob + offset_of(o, os.outer_sizes, os.outer_strides);
        const char* sbase = sb + offset_of(o, ss.outer_sizes, ss.outer_strides);
        for (int64_t j = 0; j < m; ++j) {
          char* orow = obase + idx[j] * os.dim_stride;
          const char* srow = sbase + j * ss.dim_stride;
          for (int64_t i = 0; i < i1 - i0; ++i) {
            T* po = reinterpret_cast<T*>(orow + off[0][i]);
            const T vs = *reinterpret_cast<const T*>(srow + off[1][i]);
            *po = convert<T>(static_cast<C>(*po) + a * static_cast<C>(vs));
          }
        }
      }
    }
  });
}

void take(const Tensor& x, const Tensor& index, const Tensor& out) {
  const int64_t n = x.numel();
  const size_t item = x.itemsize();
  const Shape xs = byte_strides(x);
  const bool contiguous = x.is_contiguous();
  const char* xb = static_cast<const char*>(x.raw_data());
  std::atomic<bool> bad{false};
  int64_t bad_value = 0;
  for_each_run<2>(index.sizes(), {static_cast<char*>(out.raw_data()), static_cast<char*>(index.raw_data())},
                  {byte_strides(out), byte_strides(index)}, [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t len) {
    for (int64_t i = 0; i < len; ++i) {
      int64_t v = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
      if (v < -n || v >= n) {
        if (!bad.exchange(true)) bad_value = v;
        return;
      }
      if (v < 0) v += n;
      const int64_t off = contiguous ? v * static_cast<int64_t>(item) : offset_of(v, x.sizes(), xs);
      copy_element(p[0] + i * s[0], xb + off, item);
    }
  });
  EMBER_CHECK(!bad, "take", "index {} into {} elements: expected one in [{}, {}), got {}", bad_value, n, -n, n, bad_value);
}

}  // namespace ember::cpu
