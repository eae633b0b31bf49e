// The elementwise engine of the CUDA backend.
//
// Every elementwise kernel walks a shape over N operands given by base pointers and byte
// strides. The host collapses the shape like cpu::for_each_run (size-1 dims dropped, dims that
// are contiguous for every operand merged) into a Geometry, then picks one of two kernels:
//   - contiguous: every operand dense -> a grid-stride loop with 16-byte vector loads/stores
//     (typed map only; falls back to scalar accesses for misaligned pointers and the tail);
//   - strided: an OffsetCalc (sizes as magic-number dividers, byte strides, all by value)
//     turns a linear index into N byte offsets; 32-bit arithmetic when numel and every offset
//     fit, 64-bit otherwise.
// for_each_offset hands the body raw element pointers (index ops build on it); map<Out, In...>
// applies a functor to typed elements (casts, unary, binary, where, ...).
#pragma once
#include <cuda/std/tuple>

#include <array>
#include <cstdlib>
#include <utility>

#include "core/shape.h"
#include "cuda/dispatch.cuh"
#include "ember/tensor.h"

namespace ember::cuda {

inline constexpr int kMaxDims = 16;
inline constexpr int kBlock = 256;

/// A collapsed iteration space: dims innermost first, byte strides per operand.
template <int N> struct Geometry {
  int ndim = 0;
  int64_t numel = 1;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  /// Whether every offset fits in int32 (and so does numel).
  bool fits_32bit() const {
    if (numel > INT32_MAX) return false;
    for (int k = 0; k < N; ++k) {
      int64_t extent = 0;
      for (int d = 0; d < ndim; ++d) extent += (sizes[d] - 1) * std::llabs(strides[d][k]);
      if (extent > INT32_MAX) return false;
    }
    return true;
  }
};

/// Collapses `sizes` with per-operand byte strides (outermost first, like Tensor::strides()).
template <int N>
Geometry<N> collapse(const Shape& sizes, const std::array<Shape, N>& byte_strides, const char* op) {
  Geometry<N> g;
  int64_t out_sizes[64];
  int64_t out_strides[64][N];
  int count = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) { g.numel = 0; g.ndim = 0; return g; }
    if (sizes[d] == 1) continue;
    bool merge = count > 0;
    for (int k = 0; k < N && merge; ++k) merge = out_strides[count - 1][k] == byte_strides[k][d] * sizes[d];
    if (merge) {
      out_sizes[count - 1] *= sizes[d];
      for (int k = 0; k < N; ++k) out_strides[count - 1][k] = byte_strides[k][d];
    } else {
      EMBER_CHECK(count < kMaxDims, op, "dims after merging contiguous ones: expected at most {}, got more for sizes {}",
                  kMaxDims, shape_str(sizes));
      out_sizes[count] = sizes[d];
      for (int k = 0; k < N; ++k) out_strides[count][k] = byte_strides[k][d];
      ++count;
    }
  }
  g.ndim = count;
  for (int d = 0; d < count; ++d) {  // reverse: innermost first
    g.sizes[d] = out_sizes[count - 1 - d];
    for (int k = 0; k < N; ++k) g.strides[d][k] = out_strides[count - 1 - d][k];
    g.numel *= g.sizes[d];
  }
  return g;
}

inline Shape byte_strides(const Tensor& t) {
  Shape s = t.strides();
  for (auto& v : s) v *= static_cast<int64_t>(t.itemsize());
  return s;
}

/// Unsigned division by a fixed divisor. 32-bit: the multiply-high trick (valid for dividends
/// below 2^31, which the 32-bit path guarantees); 64-bit: plain division.
template <class Index> struct DivMod;
template <> struct DivMod<uint32_t> {
  uint32_t divisor = 1, magic = 0, shift = 0;
  DivMod() = default;
  explicit DivMod(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};
template <> struct DivMod<uint64_t> {
  uint64_t divisor = 1;
  DivMod() = default;
  explicit DivMod(uint64_t d) : divisor(d) {}
  __device__ uint64_t div(uint64_t n) const { return n / divisor; }
};

/// Linear index -> N byte offsets, passed to kernels by value.
template <int N, class Index> struct OffsetCalc {
  using Offset = std::make_signed_t<Index>;
  int ndim = 0;
  DivMod<Index> div[kMaxDims];
  Offset strides[kMaxDims][N] = {};

  OffsetCalc() = default;
  explicit OffsetCalc(const Geometry<N>& g) : ndim(g.ndim) {
    for (int d = 0; d < g.ndim; ++d) {
      div[d] = DivMod<Index>(static_cast<Index>(g.sizes[d]));
      for (int k = 0; k < N; ++k) strides[d][k] = static_cast<Offset>(g.strides[d][k]);
    }
  }
  __device__ void get(Index linear, Offset (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      if (d == ndim - 1) {  // outermost dim: no division needed
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += static_cast<Offset>(linear) * strides[d][k];
        break;
      }
      const Index q = div[d].div(linear);
      const Offset r = static_cast<Offset>(linear - q * div[d].divisor);
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * strides[d][k];
      linear = q;
    }
  }
};

template <int N> struct Ptrs { char* p[N]; };

template <int N, class Index, class Body>
__global__ void __launch_bounds__(kBlock) strided_kernel(OffsetCalc<N, Index> calc, Index n, Ptrs<N> base, Body body) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    typename OffsetCalc<N, Index>::Offset off[N];
    calc.get(i, off);
    Ptrs<N> p;
#pragma unroll
    for (int k = 0; k < N; ++k) p.p[k] = base.p[k] + off[k];
    body(p);
  }
}

/// Runs body(Ptrs<N>) for every element of a collapsed geometry, on the current stream.
template <int N, class Body> void launch_strided(const Geometry<N>& g, const Ptrs<N>& base, const Body& body, int device) {
  if (g.numel == 0) return;
  const cudaStream_t stream = current_raw_stream(device);
  const unsigned grid = grid_for(g.numel, kBlock, device);
  if (g.fits_32bit()) {
    strided_kernel<N, uint32_t><<<grid, kBlock, 0, stream>>>(OffsetCalc<N, uint32_t>(g), static_cast<uint32_t>(g.numel), base, body);
  } else {
    strided_kernel<N, uint64_t><<<grid, kBlock, 0, stream>>>(OffsetCalc<N, uint64_t>(g), static_cast<uint64_t>(g.numel), base, body);
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

/// body(Ptrs<N>) for every element of `sizes`, operand k at bases[k] with byte_strides[k].
template <int N, class Body>
void for_each_offset(const char* op, Device device, const Shape& sizes, const std::array<char*, N>& bases,
                     const std::array<Shape, N>& strides, const Body& body) {
  const Geometry<N> g = collapse<N>(sizes, strides, op);
  Ptrs<N> base;
  for (int k = 0; k < N; ++k) base.p[k] = bases[k];
  launch_strided<N>(g, base, body, device.index);
}

// ---- typed map -------------------------------------------------------------------------------

template <class T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };

template <class Out, class F, class... In> struct MapBody {
  F f;
  template <size_t... I> __device__ void call(const Ptrs<sizeof...(In) + 1>& p, std::index_sequence<I...>) const {
    *reinterpret_cast<Out*>(p.p[0]) = f(*reinterpret_cast<const In*>(p.p[I + 1])...);
  }
  __device__ void operator()(const Ptrs<sizeof...(In) + 1>& p) const { call(p, std::index_sequence_for<In...>{}); }
};

template <int V, class Out, class F, class... In, size_t... I>
__device__ void map_vector(const F& f, Out* out, std::index_sequence<I...>, const In*... in) {
  const ::cuda::std::tuple<Vec<In, V>...> loaded(*reinterpret_cast<const Vec<In, V>*>(in)...);
  Vec<Out, V> result;
#pragma unroll
  for (int j = 0; j < V; ++j) result.v[j] = f(::cuda::std::get<I>(loaded).v[j]...);
  *reinterpret_cast<Vec<Out, V>*>(out) = result;
}

template <int V, class Out, class F, class... In>
__global__ void __launch_bounds__(kBlock) contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / V;
  for (int64_t i = first; i < nvec; i += step) {
    map_vector<V>(f, out + i * V, std::index_sequence_for<In...>{}, (in + i * V)...);
  }
  for (int64_t i = nvec * V + first; i < n; i += step) out[i] = f(in[i]...);
}

template <class... T> constexpr size_t max_size() { return std::max({sizeof(T)...}); }

/// out[i] = f(in[0][i], in[1][i], ...) over out's sizes, like cpu::map: the inputs have out's
/// sizes (broadcast views allowed), element types In..., out has element type Out.
template <class Out, class... In, class F>
void map(const Tensor& out, F f, const std::array<Tensor, sizeof...(In)>& in) {
  constexpr int N = sizeof...(In) + 1;
  std::array<char*, N> bases{static_cast<char*>(out.raw_data())};
  std::array<Shape, N> strides{byte_strides(out)};
  for (int k = 1; k < N; ++k) {
    bases[k] = static_cast<char*>(in[k - 1].raw_data());
    strides[k] = byte_strides(in[k - 1]);
  }
  const Geometry<N> g = collapse<N>(out.sizes(), strides, "map");
  if (g.numel == 0) return;
  const int device = out.device().index;
  constexpr size_t sizes[N] = {sizeof(Out), sizeof(In)...};
  bool contiguous = g.ndim <= 1;
  for (int k = 0; k < N && g.ndim == 1; ++k) contiguous = contiguous && g.strides[0][k] == static_cast<int64_t>(sizes[k]);
  constexpr int kVec = static_cast<int>(16 / max_size<Out, In...>()) > 1 ? static_cast<int>(16 / max_size<Out, In...>()) : 1;
  bool aligned = true;
  for (int k = 0; k < N; ++k) aligned = aligned && reinterpret_cast<uintptr_t>(bases[k]) % (sizes[k] * kVec) == 0;
  if (!contiguous || !aligned) {  // a misaligned dense run is a 1-dim strided walk: no divisions
    Ptrs<N> base;
    for (int k = 0; k < N; ++k) base.p[k] = bases[k];
    launch_strided<N>(g, base, MapBody<Out, F, In...>{f}, device);
    return;
  }
  [&]<size_t... I>(std::index_sequence<I...>) {
    contiguous_kernel<kVec, Out, F, In...><<<grid_for(g.numel / kVec + 1, kBlock, device), kBlock, 0, current_raw_stream(device)>>>(
        g.numel, f, reinterpret_cast<Out*>(bases[0]), reinterpret_cast<const In*>(bases[I + 1])...);
  }(std::index_sequence_for<In...>{});
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
