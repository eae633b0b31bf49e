// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON header
// {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}},
// then the tensors' bytes, back to back, row-major, little-endian.
//
// Files are validated strictly; every problem is an ember::Error naming the file: too short, a
// Git LFS pointer instead of the weights, a header longer than the file or than 100 MB, bad
// JSON, an unknown dtype, a bad shape or offsets, a byte count that disagrees with dtype and
// shape, tensors that overlap or leave gaps, data cut short.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/device.h"
#include "ember/tensor.h"

namespace ember {

/// One tensor's entry in a safetensors header.
struct SafetensorsInfo {
  DType dtype;
  std::vector<int64_t> shape;
  size_t begin;  // byte offsets in the file (the header's data_offsets plus the data start)
  size_t end;
};

/// An open safetensors file, memory-mapped. Tensors from get() on the CPU share the mapping
/// (no copy; the mapping lives as long as any of them). The mapping is private: writing to such
/// a tensor changes neither the file nor other tensors loaded from it later.
class SafetensorsFile {
 public:
  /// Opens and validates `path`; throws ember::Error.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  /// The "__metadata__" entries (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Throws ember::Error naming the tensor and the file when absent.
  const SafetensorsInfo& info(const std::string& name) const;
  /// A contiguous CPU tensor sharing the mapping (copied only if the file places it at an
  /// address not aligned for its element type).
  Tensor get(const std::string& name) const;
  /// The tensor on `device` (a copy unless the device is the CPU).
  Tensor get(const std::string& name, Device device) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  std::map<std::string, SafetensorsInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

/// Every tensor of the file at `path` on `device`.
std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device = Device::cpu());

/// Writes `tensors` (any devices, any strides) and `metadata` to `path`. Tensors are laid out by
/// decreasing element size, then name, after a header padded to a multiple of 8 bytes, so
/// every tensor is aligned for its element type (the mapping is page-aligned).
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ember
