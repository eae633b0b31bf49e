// CPU random numbers: the Philox streams defined in core/philox.h, one OpenMP iteration per
// Philox group, so element i depends only on (seed, i) whatever the thread count.
#include <algorithm>
#include <type_traits>

#include "backend.h"
#include "core/philox.h"
#include "core/shape.h"
#include "cpu/loops.h"

namespace ember::cpu {
namespace {

inline constexpr int64_t kGroupsPerThreadMin = 1 << 12;

/// Calls fill(group, first_element, count) for every group of `per_group` elements of n.
template <class Fill> void for_each_group(int64_t n, int64_t per_group, Fill&& fill) {
  const int64_t groups = (n + per_group - 1) / per_group;
#pragma omp parallel for schedule(static) if (groups >= kGroupsPerThreadMin)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * per_group;
    fill(static_cast<uint64_t>(g), first, std::min(per_group, n - first));
  }
}

/// Significand digits of the 16/8-bit float formats.
template <class T> constexpr int format_digits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  else if constexpr (std::is_same_v<T, BFloat16>) return 8;
  else if constexpr (std::is_same_v<T, Float8_e4m3fn>) return 4;
  else return 3;
}

/// The 32-bit stream: n elements of type T (float or a 16/8-bit float) at p.
template <class T> void fill_32bit(RandomKind kind, uint64_t seed, T* p, int64_t n) {
  for_each_group(n, 4, [&](uint64_t g, int64_t first, int64_t count) {
    const philox::Words w = philox::group_words(seed, g);
    T* out = p + first;
    if (kind == RandomKind::Uniform) {
      for (int64_t k = 0; k < count; ++k) {
        if constexpr (std::is_same_v<T, float>) out[k] = philox::uniform_f32(w.w[k]);
        else out[k] = T(philox::uniform_digits(w.w[k], format_digits<T>()));
      }
    } else {
      for (int64_t k = 0; k < count; k += 2) {
        double z0, z1;
        philox::box_muller(philox::uniform_f32(w.w[k]), philox::uniform_f32(w.w[k + 1]), z0, z1);
        out[k] = T(static_cast<float>(z0));
        if (k + 1 < count) out[k + 1] = T(static_cast<float>(z1));
      }
    }
  });
}

/// The 64-bit stream: n doubles at p.
void fill_64bit(RandomKind kind, uint64_t seed, double* p, int64_t n) {
  for_each_group(n, 2, [&](uint64_t g, int64_t first, int64_t count) {
    const philox::Words w = philox::group_words(seed, g);
    const double u0 = philox::uniform_f64(philox::word64(w, 0));
    const double u1 = philox::uniform_f64(philox::word64(w, 1));
    double* out = p + first;
    if (kind == RandomKind::Uniform) {
      out[0] = u0;
      if (count > 1) out[1] = u1;
    } else {
      double z0, z1;
      philox::box_muller(u0, u1, z0, z1);
      out[0] = z0;
      if (count > 1) out[1] = z1;
    }
  });
}

/// Runs body(contiguous) on out itself when contiguous, else on a contiguous buffer copied back.
template <class Body> void with_contiguous(const Tensor& out, Body&& body) {
  if (out.is_contiguous()) {
    body(out);
    return;
  }
  const Tensor tmp = empty(out.sizes(), out.dtype(), Device::cpu());
  body(tmp);
  copy(tmp, out);
}

}  // namespace

void random(RandomKind kind, uint64_t seed, const Tensor& out) {
  with_contiguous(out, [&](const Tensor& c) {
    const int64_t n = c.numel();
    dispatch(c.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, double>) {
        fill_64bit(kind, seed, static_cast<double*>(c.raw_data()), n);
      } else if constexpr (std::is_same_v<T, std::complex<double>>) {
        fill_64bit(kind, seed, static_cast<double*>(c.raw_data()), 2 * n);
      } else if constexpr (std::is_same_v<T, std::complex<float>>) {
        fill_32bit(kind, seed, static_cast<float*>(c.raw_data()), 2 * n);
      } else if constexpr (is_float_v<T>) {
        fill_32bit(kind, seed, static_cast<T*>(c.raw_data()), n);
      } else {
        fail("random", "dtype: expected a floating or complex type, got {}", name(c.dtype()));
      }
    });
  });
}

void randint(int64_t low, int64_t high, uint64_t seed, const Tensor& out) {
  EMBER_CHECK(low < high, "randint", "range [low, high): expected low < high, got [{}, {})", low, high);
  with_contiguous(out, [&](const Tensor& c) {
    dispatch(c.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_complex_v<T>) {
        fail("randint", "dtype: expected a real type, got {}", name(c.dtype()));
      } else {
        T* p = static_cast<T*>(c.raw_data());
        for_each_group(c.numel(), 2, [&](uint64_t g, int64_t first, int64_t count) {
          const philox::Words w = philox::group_words(seed, g);
          for (int64_t k = 0; k < count; ++k) {
            p[first + k] = convert<T>(philox::randint_value(philox::word64(w, static_cast<int>(k)), low, high));
          }
        });
      }
    });
  });
}

}  // namespace ember::cpu
