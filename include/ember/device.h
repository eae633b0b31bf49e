// Where a tensor's storage lives.
#pragma once
#include <string>

namespace ember {

struct Device {
  enum class Type { CPU, CUDA };
  Type type = Type::CPU;
  int index = 0;

  static Device cpu() { return {Type::CPU, 0}; }
  static Device cuda(int index = 0) { return {Type::CUDA, index}; }
  bool is_cpu() const { return type == Type::CPU; }
  bool is_cuda() const { return type == Type::CUDA; }
  /// "cpu", "cuda:0".
  std::string str() const;
  /// Parses "cpu", "cuda", "cuda:1"; throws ember::Error otherwise.
  static Device parse(std::string_view);
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace ember
