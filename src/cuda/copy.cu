// CUDA copies with every dtype cast, and fill.
//
// Compile time: the 17x16 casts go through one kernel per output type that converts from the
// input dtype named at run time (a uniform switch, free next to the memory traffic); only the
// hot float casts (f32 <-> f16/bf16, f16 <-> bf16) get fully typed, vectorised kernels.
#include "cuda/loops.cuh"

namespace ember::cuda {
namespace {

template <class Out, class In> struct CastOp {
  __device__ Out operator()(In v) const { return convert<Out>(v); }
};
template <class T> struct IdentityOp {
  __device__ T operator()(T v) const { return v; }
};
template <class T> struct FillOp {
  T value;
  __device__ T operator()() const { return value; }
};

/// Ptrs: [0] destination (Out), [1] source (dtype `from`).
template <class Out> struct DynamicCastBody {
  DType from;
  __device__ void operator()(const Ptrs<2>& p) const { *reinterpret_cast<Out*>(p.p[0]) = load_converted<Out>(p.p[1], from); }
};

template <class Out, class In> bool try_typed_cast(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dtype_of<In>() || dst.dtype() != dtype_of<Out>()) return false;
  map<Out, In>(dst, CastOp<Out, In>{}, {src});
  return true;
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index);
  if (src.dtype() == dst.dtype()) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                       current_raw_stream(dst.device().index)));
      return;
    }
    dispatch_bits(dst.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      map<T, T>(dst, IdentityOp<T>{}, {src});
    });
    return;
  }
  if (try_typed_cast<float, Half>(src, dst) || try_typed_cast<float, BFloat16>(src, dst) ||
      try_typed_cast<Half, float>(src, dst) || try_typed_cast<BFloat16, float>(src, dst) ||
      try_typed_cast<Half, BFloat16>(src, dst) || try_typed_cast<BFloat16, Half>(src, dst)) {
    return;
  }
  dispatch(dst.dtype(), [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    for_each_offset<2>("copy", dst.device(), dst.sizes(), {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                       {byte_strides(dst), byte_strides(src)}, DynamicCastBody<Out>{src.dtype()});
  });
}

void fill(const Tensor& dst, const Scalar& value) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index);
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T>(dst, FillOp<T>{scalar_to<T>(value)}, {});
  });
}

}  // namespace ember::cuda
