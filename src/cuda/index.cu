// CUDA indexing: index_select, gather, index_add, take.
//
// Each is one pass of the elementwise engine over the output (or source) with the indexed
// operand's stride along `dim` zeroed: the body loads the index, checks it, and moves the
// element `index * stride(dim)` bytes further. An index out of range is never followed: the
// element is skipped and the index recorded in the device error word (runtime.h), which the
// host reports at its next synchronisation. index_select, gather and take move raw bits.
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

template <class I> __device__ int64_t load_index(const char* p) { return static_cast<int64_t>(*reinterpret_cast<const I*>(p)); }

template <class F> void dispatch_index(const Tensor& index, const char* op, F&& f) {
  if (index.dtype() == kInt64) f(type_tag<int64_t>{});
  else if (index.dtype() == kInt32) f(type_tag<int32_t>{});
  else fail(op, "index dtype: expected int64 or int32, got {}", name(index.dtype()));
}

/// Ptrs: [0] destination, [1] source with the indexed dim's stride zeroed, [2] index.
template <class T, class I> struct SelectBody {
  int64_t bound, stride;  // size and byte stride of the indexed dim of the source
  DeviceError* error;
  __device__ void operator()(const Ptrs<3>& p) const {
    const int64_t i = load_index<I>(p.p[2]);
    if (i < 0 || i >= bound) {
      record_index_error(error, i, bound);
      return;
    }
    *reinterpret_cast<T*>(p.p[0]) = *reinterpret_cast<const T*>(p.p[1] + i * stride);
  }
};

Shape with_zero(Shape strides, int64_t dim) {
  strides[static_cast<size_t>(dim)] = 0;
  return strides;
}

/// Runs SelectBody over out's sizes; x_strides (bytes, dim zeroed by this function) and
/// index_strides (bytes) are laid over out's sizes.
void select_into(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Shape& index_strides,
                 const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  DeviceError* error = device_error_word(out.device().index);
  const int64_t bound = x.dim() == 0 ? 1 : x.size(dim);
  const int64_t stride = x.dim() == 0 ? 0 : x.stride(dim) * static_cast<int64_t>(x.itemsize());
  const Shape x_strides = x.dim() == 0 ? Shape{} : with_zero(byte_strides(x), dim);
  dispatch_bits(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index, op, [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_offset<3>(op, out.device(), out.sizes(),
                         {static_cast<char*>(out.raw_data()), static_cast<char*>(x.raw_data()),
                          static_cast<char*>(index.raw_data())},
                         {byte_strides(out), x_strides, index_strides}, SelectBody<T, I>{bound, stride, error});
    });
  });
}

/// Strides (bytes) that lay a 1-D (or 0-D) index along `dim` of a tensor of rank `rank`.
Shape index_along(const Tensor& index, int64_t dim, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 0);
  if (rank > 0 && index.dim() == 1) s[static_cast<size_t>(dim)] = index.stride(0) * static_cast<int64_t>(index.itemsize());
  return s;
}

// ---- index_add -------------------------------------------------------------------------------

/// out = out + v for one element, atomically, with the CPU backend's arithmetic (the 16-bit
/// floats add in float and round once). 8- and 16-bit types update their aligned 32-bit word
/// with a CAS loop; that word lies inside the allocation, whose blocks are 512-byte granular.
template <class T> __device__ T add_one(T a, compute_t<T> v) {
  if constexpr (std::is_same_v<T, bool>) return a || v;
  else if constexpr (is_low_float_v<T>) return T(add_rn(static_cast<float>(a), v));
  else return static_cast<T>(a + v);
}

template <class T> __device__ void atomic_add(T* address, compute_t<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                std::is_same_v<T, uint32_t>) {
    atomicAdd(address, v);
  } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(v));
  } else if constexpr (is_complex_v<T>) {
    auto* parts = reinterpret_cast<typename T::value_type*>(address);
    atomicAdd(parts, v.real());
    atomicAdd(parts + 1, v.imag());
  } else {
    static_assert(sizeof(T) <= 2);
    using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    const auto a = reinterpret_cast<uintptr_t>(address);
    auto* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(a & 3) * 8;
    const unsigned mask = static_cast<unsigned>(static_cast<Bits>(~Bits{0})) << shift;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const auto current_bits = static_cast<Bits>((assumed & mask) >> shift);
      T current;
      memcpy(&current, &current_bits, sizeof(T));
      const T next = add_one(current, v);
      Bits next_bits;
      memcpy(&next_bits, &next, sizeof(T));
      old = atomicCAS(word, assumed, (assumed & ~mask) | (static_cast<unsigned>(next_bits) << shift));
    } while (assumed != old);
  }
}

/// Ptrs: [0] out with dim's stride zeroed, [1] source, [2] index. out[idx] += alpha * src in
/// the compute type (no fused multiply-add, as on the CPU).
template <class T, class I> struct IndexAddBody {
  using C = compute_t<T>;
  int64_t bound, stride;  // size and byte stride of out along dim
  C alpha;
  DeviceError* error;
  __device__ void operator()(const Ptrs<3>& p) const {
    const int64_t i = load_index<I>(p.p[2]);
    if (i < 0 || i >= bound) {
      record_index_error(error, i, bound);
      return;
    }
    const C v = static_cast<C>(*reinterpret_cast<const T*>(p.p[1]));
    C scaled;
    if constexpr (std::is_same_v<C, bool>) scaled = alpha && v;
    else if constexpr (std::is_floating_point_v<C>) scaled = mul_rn(alpha, v);
    else scaled = static_cast<C>(alpha * v);
    atomic_add(reinterpret_cast<T*>(p.p[0] + i * stride), scaled);
  }
};

// ---- take ------------------------------------------------------------------------------------

/// Ptrs: [0] out, [1] index; x is addressed by its flat C-order position.
template <class T, class I> struct TakeBody {
  OffsetCalc<1, uint64_t> x_offsets;
  const char* x;
  int64_t numel;
  DeviceError* error;
  __device__ void operator()(const Ptrs<2>& p) const {
    int64_t i = load_index<I>(p.p[1]);
    if (i < -numel || i >= numel) {
      record_index_error(error, i, numel);
      return;
    }
    if (i < 0) i += numel;
    int64_t off[1];
    x_offsets.get(static_cast<uint64_t>(i), off);
    *reinterpret_cast<T*>(p.p[0]) = *reinterpret_cast<const T*>(x + off[0]);
  }
};

}  // namespace

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  select_into("index_select", x, dim, index, index_along(index, dim, out.dim()), out);
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  select_into("gather", x, dim, index, byte_strides(index), out);
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  if (src.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  DeviceError* error = device_error_word(out.device().index);
  const int64_t bound = out.dim() == 0 ? 1 : out.size(dim);
  const int64_t stride = out.dim() == 0 ? 0 : out.stride(dim) * static_cast<int64_t>(out.itemsize());
  const Shape out_strides = out.dim() == 0 ? Shape{} : with_zero(byte_strides(out), dim);
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C a = scalar_to<C>(alpha);
    dispatch_index(index, "index_add", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_offset<3>("index_add", out.device(), src.sizes(),
                         {static_cast<char*>(out.raw_data()), static_cast<char*>(src.raw_data()),
                          static_cast<char*>(index.raw_data())},
                         {out_strides, byte_strides(src), index_along(index, dim, src.dim())},
                         IndexAddBody<T, I>{bound, stride, a, error});
    });
  });
}

void take(const Tensor& x, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  DeviceError* error = device_error_word(out.device().index);
  const Geometry<1> xg = collapse<1>(x.sizes(), {byte_strides(x)}, "take");
  dispatch_bits(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index, "take", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_offset<2>("take", out.device(), out.sizes(),
                         {static_cast<char*>(out.raw_data()), static_cast<char*>(index.raw_data())},
                         {byte_strides(out), byte_strides(index)},
                         TakeBody<T, I>{OffsetCalc<1, uint64_t>(xg), static_cast<const char*>(x.raw_data()), x.numel(), error});
    });
  });
}

}  // namespace ember::cuda
