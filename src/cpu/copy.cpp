// CPU memory, copies, casts and fills.
#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "cpu/loops.h"

namespace ember::cpu {

void* allocate(size_t nbytes, Device) {
  // 64-byte alignment for vector loads; a 0-byte tensor still gets a unique pointer.
  const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  EMBER_CHECK(p != nullptr, "allocate", "host memory: expected {} bytes to be available, got an allocation failure", nbytes);
  return p;
}

void deallocate(void* ptr, Device) { std::free(ptr); }

void copy_bytes(void* dst, Device, const void* src, Device, size_t nbytes) { std::memcpy(dst, src, nbytes); }

void copy(const Tensor& src, const Tensor& dst) {
  dispatch(dst.dtype(), [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    dispatch(src.dtype(), [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      map<Out, In>(dst, [](In v) { return convert<Out>(v); }, {src});
    });
  });
}

void fill(const Tensor& dst, const Scalar& value) {
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.to<T>();
    map<T>(dst, [v]() { return v; }, {});
  });
}

}  // namespace ember::cpu
