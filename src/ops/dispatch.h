// Front-end helpers: device checks and the one place that picks a backend.
#pragma once
#include <initializer_list>

#include "backend.h"
#include "core/shape.h"
#include "ember/tensor.h"

/// Calls ember::cpu::fn(args...) or ember::cuda::fn(args...) for `device`.
#define EMBER_DISPATCH(device, fn, ...) \
  ((device).is_cpu() ? ::ember::cpu::fn(__VA_ARGS__) : ::ember::cuda::fn(__VA_ARGS__))

namespace ember::ops {

/// Throws unless every defined tensor is on the device of the first.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
/// Throws unless x is defined.
void check_defined(const char* op, const Tensor& x, const char* what = "input");
/// dst = src cast to dst's dtype; same sizes, same device.
void copy_into(const Tensor& src, const Tensor& dst);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace ember::ops
