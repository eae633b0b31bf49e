// Storage: one allocation shared by a tensor and all its views.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "ember/device.h"

namespace ember {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;
  Storage(void* data, size_t nbytes, Device device, Deleter deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage() { if (deleter_) deleter_(data_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
};

/// nbytes of uninitialised memory on `device` (64-byte aligned on the CPU; the caching
/// allocator on CUDA, on the current stream).
std::shared_ptr<Storage> allocate_storage(size_t nbytes, Device device);

}  // namespace ember
