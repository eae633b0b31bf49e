#include "ops/dispatch.h"

namespace ember::ops {

void check_defined(const char* op, const Tensor& x, const char* what) {
  EMBER_CHECK(x.defined(), op, "{}: expected a defined tensor, got an undefined one", what);
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) { first = t; continue; }
    EMBER_CHECK(t->device() == first->device(), op, "all tensors on one device: expected {}, got {}",
                first->device().str(), t->device().str());
  }
}

void copy_into(const Tensor& src, const Tensor& dst) {
  check_same_device("copy", {&src, &dst});
  EMBER_CHECK(src.sizes() == dst.sizes(), "copy", "sizes: expected {}, got {}", shape_str(dst.sizes()), shape_str(src.sizes()));
  if (src.numel() == 0) return;
  EMBER_DISPATCH(dst.device(), copy, src, dst);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  // Whichever side is a GPU owns the transfer; CPU to CPU is a memcpy.
  if (dst_device.is_cuda() || src_device.is_cuda()) cuda::copy_bytes(dst, dst_device, src, src_device, nbytes);
  else cpu::copy_bytes(dst, dst_device, src, src_device, nbytes);
}

}  // namespace ember::ops
