#include "core/storage.h"

#include "ops/dispatch.h"

namespace ember {

std::shared_ptr<Storage> allocate_storage(size_t nbytes, Device device) {
  void* data = EMBER_DISPATCH(device, allocate, nbytes, device);
  return std::make_shared<Storage>(data, nbytes, device,
                                   [device](void* p) { EMBER_DISPATCH(device, deallocate, p, device); });
}

}  // namespace ember
