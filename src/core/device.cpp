#include "ember/device.h"

#include <charconv>

#include "ember/error.h"

namespace ember {

std::string Device::str() const {
  return type == Type::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.substr(0, 5) == "cuda:") {
    int index = -1;
    const auto digits = s.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  fail("device", "unknown device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"{}\"", s);
}

}  // namespace ember
