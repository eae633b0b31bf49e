// ember::Error and the check macro every op uses for user errors.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace ember {

/// Every user error (bad shape, dtype, device, argument, file). The message reads
/// "[op] what: expected A, got B". Nothing in ember aborts on user input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws ember::Error("[op] " + formatted message).
template <class... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("[{}] {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace ember

/// EMBER_CHECK(cond, "op", "what: expected {}, got {}", a, b) throws ember::Error when cond is false.
#define EMBER_CHECK(cond, op, ...)                 \
  do {                                             \
    if (!(cond)) ::ember::fail(op, __VA_ARGS__);   \
  } while (0)
