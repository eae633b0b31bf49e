// CPU reductions: sum/mean/prod/amax/amin/any/all, argmax/argmin, cumsum and histc.
//
// Sums accumulate in a wide type (double for every float type, int64/uint64 for integers) so
// the result is at least as accurate as torch's cascade summation; eight independent lanes
// in the contiguous inner loop let the compiler vectorise without reassociating a float chain.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend.h"
#include "cpu/loops.h"
#include "cpu/reduce_util.h"

namespace ember::cpu {
namespace {

// ---- accumulation types and the per-op step -----------------------------------------------------

template <class T> struct sum_acc { using type = double; };  // every float type
template <> struct sum_acc<bool> { using type = int64_t; };
template <> struct sum_acc<uint8_t> { using type = int64_t; };
template <> struct sum_acc<int8_t> { using type = int64_t; };
template <> struct sum_acc<uint16_t> { using type = int64_t; };
template <> struct sum_acc<int16_t> { using type = int64_t; };
template <> struct sum_acc<uint32_t> { using type = int64_t; };
template <> struct sum_acc<int32_t> { using type = int64_t; };
template <> struct sum_acc<int64_t> { using type = int64_t; };
template <> struct sum_acc<uint64_t> { using type = uint64_t; };
template <> struct sum_acc<std::complex<float>> { using type = std::complex<double>; };
template <> struct sum_acc<std::complex<double>> { using type = std::complex<double>; };
template <class T> using sum_acc_t = typename sum_acc<T>::type;

template <class T> bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

template <class T> constexpr T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T> constexpr T highest() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

// Each op: A (the accumulator), init(), step(acc, value-as-A) (also merges two accumulators),
// to_acc(element) and finish(acc, count) -> output element.
template <class T, class O> struct SumOp {
  using A = sum_acc_t<T>;
  static A init() { return A(0); }
  static A step(A a, A v) { return a + v; }
  static A to_acc(T v) { return convert<A>(v); }
  static O finish(A a, int64_t) { return convert<O>(a); }
};
template <class T, class O> struct MeanOp : SumOp<T, O> {
  using A = sum_acc_t<T>;
  static O finish(A a, int64_t n) { return convert<O>(a / static_cast<A>(static_cast<double>(n))); }
};
template <class T, class O> struct ProdOp {
  using A = sum_acc_t<T>;
  static A init() { return A(1); }
  static A step(A a, A v) { return a * v; }
  static A to_acc(T v) { return convert<A>(v); }
  static O finish(A a, int64_t) { return convert<O>(a); }
};
template <class T, class O> struct MaxOp {  // NaN wins: once the accumulator is NaN it stays NaN
  using A = compute_t<T>;
  static A init() { return lowest<A>(); }
  static A step(A a, A v) { return (v > a || is_nan(v)) ? v : a; }
  static A to_acc(T v) { return static_cast<A>(v); }
  static O finish(A a, int64_t) { return convert<O>(a); }
};
template <class T, class O> struct MinOp {
  using A = compute_t<T>;
  static A init() { return highest<A>(); }
  static A step(A a, A v) { return (v < a || is_nan(v)) ? v : a; }
  static A to_acc(T v) { return static_cast<A>(v); }
  static O finish(A a, int64_t) { return convert<O>(a); }
};
template <class T> bool nonzero(T v) {
  if constexpr (is_complex_v<T>) return v != T(0);
  else return convert<bool>(v);
}
template <class T, class O> struct AnyOp {
  using A = bool;
  static A init() { return false; }
  static A step(A a, A v) { return a || v; }
  static A to_acc(T v) { return nonzero(v); }
  static O finish(A a, int64_t) { return a; }
};
template <class T, class O> struct AllOp {
  using A = bool;
  static A init() { return true; }
  static A step(A a, A v) { return a && v; }
  static A to_acc(T v) { return nonzero(v); }
  static O finish(A a, int64_t) { return a; }
};

// Reduces n elements starting at p (byte stride s) into acc.
template <class Op, class T> typename Op::A reduce_run(typename Op::A acc, const char* p, int64_t s, int64_t n) {
  using A = typename Op::A;
  if (s == static_cast<int64_t>(sizeof(T))) {
    const T* q = reinterpret_cast<const T*>(p);
    constexpr int kLanes = 8;
    A lanes[kLanes];
    for (auto& l : lanes) l = Op::init();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] = Op::step(lanes[j], Op::to_acc(q[i + j]));
    }
    for (; i < n; ++i) lanes[0] = Op::step(lanes[0], Op::to_acc(q[i]));
    for (const auto& l : lanes) acc = Op::step(acc, l);
    return acc;
  }
  for (int64_t i = 0; i < n; ++i) acc = Op::step(acc, Op::to_acc(*reinterpret_cast<const T*>(p + i * s)));
  return acc;
}

template <class Op, class T, class O>
void reduce_kernel(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  using A = typename Op::A;
  const ReduceGeometry g = reduce_geometry(x, dims, out);
  const char* xb = static_cast<const char*>(x.raw_data());
  char* ob = static_cast<char*>(out.raw_data());
  const int64_t n_out = shape_numel(g.kept_sizes), R = shape_numel(g.red_sizes);
  if (n_out == 0) return;
  auto store = [&](int64_t o, A acc) {
    *reinterpret_cast<O*>(ob + offset_of(o, g.kept_sizes, g.kept_out)) = Op::finish(acc, R);
  };
  if (R == 0) {
    for (int64_t o = 0; o < n_out; ++o) store(o, Op::init());
    return;
  }
  const int64_t L = g.red_sizes.back(), s_inner = g.red_x.back();
  const Shape outer_sizes(g.red_sizes.begin(), g.red_sizes.end() - 1), outer_x(g.red_x.begin(), g.red_x.end() - 1);

  // The contiguous dim is kept (e.g. a column sum): accumulate a tile of outputs at once,
  // walking the reduced elements in order, so every load is a unit-stride vector load.
  if (!g.kept_sizes.empty() && std::abs(g.kept_x.back()) < std::abs(s_inner)) {
    const int64_t K = g.kept_sizes.back(), sk = g.kept_x.back(), so = g.kept_out.back();
    const Shape ko_sizes(g.kept_sizes.begin(), g.kept_sizes.end() - 1), ko_x(g.kept_x.begin(), g.kept_x.end() - 1),
        ko_out(g.kept_out.begin(), g.kept_out.end() - 1);
    constexpr int64_t kTile = 256;
    const int64_t n_tiles = (K + kTile - 1) / kTile, work = (n_out / K) * n_tiles;
#pragma omp parallel for schedule(static) if (n_out * R >= kParallelGrain && work > 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t o = w / n_tiles, j0 = (w % n_tiles) * kTile, jn = std::min(kTile, K - j0);
      const char* base = xb + offset_of(o, ko_sizes, ko_x) + j0 * sk;
      A acc[kTile];
      for (int64_t j = 0; j < jn; ++j) acc[j] = Op::init();
      for (int64_t r = 0; r < R; ++r) {
        const char* p = base + offset_of(r / L, outer_sizes, outer_x) + (r % L) * s_inner;
        if (sk == static_cast<int64_t>(sizeof(T))) {
          const T* q = reinterpret_cast<const T*>(p);
          for (int64_t j = 0; j < jn; ++j) acc[j] = Op::step(acc[j], Op::to_acc(q[j]));
        } else {
          for (int64_t j = 0; j < jn; ++j) acc[j] = Op::step(acc[j], Op::to_acc(*reinterpret_cast<const T*>(p + j * sk)));
        }
      }
      char* op = ob + offset_of(o, ko_sizes, ko_out) + j0 * so;
      for (int64_t j = 0; j < jn; ++j) *reinterpret_cast<O*>(op + j * so) = Op::finish(acc[j], R);
    }
    return;
  }

  // The reduced elements [f0, f1) of one output, in runs of the innermost reduced dim.
  auto reduce_range = [&](const char* base, int64_t f0, int64_t f1) {
    A acc = Op::init();
    while (f0 < f1) {
      const int64_t run = f0 / L, j = f0 % L, n = std::min(L - j, f1 - f0);
      acc = reduce_run<Op, T>(acc, base + offset_of(run, outer_sizes, outer_x) + j * s_inner, s_inner, n);
      f0 += n;
    }
    return acc;
  };
  if (n_out >= omp_get_max_threads() || n_out * R < kParallelGrain) {
#pragma omp parallel for schedule(static) if (n_out * R >= kParallelGrain)
    for (int64_t o = 0; o < n_out; ++o) store(o, reduce_range(xb + offset_of(o, g.kept_sizes, g.kept_x), 0, R));
    return;
  }
  // Few outputs, long reductions: split each reduction into fixed chunks (the result does not
  // depend on the thread count) and merge the partial results in order.
  const int64_t chunk = kParallelGrain, n_chunks = (R + chunk - 1) / chunk;
  std::vector<A> partial(static_cast<size_t>(n_chunks));
  for (int64_t o = 0; o < n_out; ++o) {
    const char* base = xb + offset_of(o, g.kept_sizes, g.kept_x);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < n_chunks; ++c) partial[c] = reduce_range(base, c * chunk, std::min(R, (c + 1) * chunk));
    A acc = Op::init();
    for (const A& p : partial) acc = Op::step(acc, p);
    store(o, acc);
  }
}

template <template <class, class> class Op>
void reduce_typed(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_fp8_v<T>) {
      fail("reduce", "dtype: expected a non-float8 type, got {}", name(x.dtype()));
    } else if constexpr (std::is_same_v<Op<T, T>, AnyOp<T, T>> || std::is_same_v<Op<T, T>, AllOp<T, T>>) {
      reduce_kernel<Op<T, bool>, T, bool>(x, dims, out);
    } else if constexpr (is_complex_v<T> && (std::is_same_v<Op<T, T>, MaxOp<T, T>> || std::is_same_v<Op<T, T>, MinOp<T, T>>)) {
      fail("reduce", "dtype: expected a real type for amax/amin, got {}", name(x.dtype()));
    } else {
      reduce_kernel<Op<T, T>, T, T>(x, dims, out);
    }
  });
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) {
  switch (op) {
    case ReduceOp::Sum: return reduce_typed<SumOp>(x, dims, out);
    case ReduceOp::Mean: return reduce_typed<MeanOp>(x, dims, out);
    case ReduceOp::Prod: return reduce_typed<ProdOp>(x, dims, out);
    case ReduceOp::Amax: return reduce_typed<MaxOp>(x, dims, out);
    case ReduceOp::Amin: return reduce_typed<MinOp>(x, dims, out);
    case ReduceOp::Any: return reduce_typed<AnyOp>(x, dims, out);
    case ReduceOp::All: return reduce_typed<AllOp>(x, dims, out);
  }
}

void arg_reduce(ArgReduceOp op, const Tensor& x, int64_t dim, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_complex_v<T> || is_fp8_v<T>) {
      fail("arg_reduce", "dtype: expected a real non-float8 type, got {}", name(x.dtype()));
    } else {
      using V = compute_t<T>;
      const bool is_max = op == ArgReduceOp::Argmax;
      // NaN counts as both the maximum and the minimum; ties keep the first index.
      auto better = [is_max](V v, V best) {
        return (is_nan(v) && !is_nan(best)) || (is_max ? v > best : v < best);
      };
      for_each_line(x, dim, [&](const char* p, int64_t s, int64_t n, std::array<char*, 1> o) {
        V best = static_cast<V>(*reinterpret_cast<const T*>(p));
        int64_t best_i = 0;
        for (int64_t i = 1; i < n; ++i) {
          const V v = static_cast<V>(*reinterpret_cast<const T*>(p + i * s));
          if (better(v, best)) { best = v; best_i = i; }
        }
        *reinterpret_cast<int64_t*>(o[0]) = best_i;
      }, out);
    }
  });
}

void cumsum(const Tensor& x, int64_t dim, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_fp8_v<T>) {
      fail("cumsum", "dtype: expected a non-float8 type, got {}", name(x.dtype()));
    } else {
      using A = sum_acc_t<T>;
      const int64_t so = out.stride(dim) * static_cast<int64_t>(sizeof(T));
      for_each_line(x, dim, [&](const char* p, int64_t s, int64_t n, std::array<char*, 1> o) {
        A acc = A(0);
        for (int64_t i = 0; i < n; ++i) {
          acc += convert<A>(*reinterpret_cast<const T*>(p + i * s));
          *reinterpret_cast<T*>(o[0] + i * so) = convert<T>(acc);
        }
      }, out);
    }
  });
}

void histc(const Tensor& x, int64_t bins, double min, double max, const Tensor& out) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T> || is_fp8_v<T>) {
      fail("histc", "dtype: expected a floating type, got {}", name(x.dtype()));
    } else {
      using V = compute_t<T>;
      const Tensor xc = x.contiguous();
      const T* data = xc.data_ptr<T>();
      const int64_t n = xc.numel();
      if (min == max && n > 0) {  // the data's range, like torch; NaN makes it non-finite
        V lo = std::numeric_limits<V>::infinity(), hi = -lo;
        bool nan = false;
        for (int64_t i = 0; i < n; ++i) {
          const V v = static_cast<V>(data[i]);
          nan |= std::isnan(v);
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        min = nan ? std::numeric_limits<double>::quiet_NaN() : lo;
        max = nan ? std::numeric_limits<double>::quiet_NaN() : hi;
      }
      if (min == max) { min -= 1; max += 1; }
      EMBER_CHECK(std::isfinite(min) && std::isfinite(max), "histc", "range [{}, {}]: expected finite bounds, got a non-finite one",
                  min, max);
      // torch's arithmetic: edges rounded to the input type, then (x - lo) * bins / (hi - lo)
      // with every intermediate rounded to the input type.
      auto rnd = [](V v) { return static_cast<V>(T(v)); };
      const V lo = rnd(static_cast<V>(min)), hi = rnd(static_cast<V>(max)), width = rnd(hi - lo);
      const V nbins = rnd(static_cast<V>(bins));
      const int n_threads = n >= kParallelGrain ? omp_get_max_threads() : 1;
      std::vector<std::vector<int64_t>> counts(static_cast<size_t>(n_threads), std::vector<int64_t>(static_cast<size_t>(bins), 0));
#pragma omp parallel num_threads(n_threads)
      {
        auto& local = counts[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; ++i) {
          const V v = static_cast<V>(data[i]);
          if (!(v >= lo && v <= hi)) continue;  // outside the range, or NaN
          const auto pos = static_cast<int64_t>(rnd(rnd(rnd(v - lo) * nbins) / width));
          ++local[static_cast<size_t>(std::clamp<int64_t>(pos, 0, bins - 1))];
        }
      }
      const int64_t so = out.stride(0);
      T* o = static_cast<T*>(out.raw_data());
      for (int64_t b = 0; b < bins; ++b) {
        int64_t c = 0;
        for (const auto& local : counts) c += local[static_cast<size_t>(b)];
        o[b * so] = convert<T>(static_cast<double>(c));
      }
    }
  });
}

}  // namespace ember::cpu
