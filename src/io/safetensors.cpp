// safetensors reader (mmap, strict validation) and writer.
#include "ember/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/shape.h"
#include "core/storage.h"

namespace ember {
namespace {

using nlohmann::json;

constexpr const char* kOp = "safetensors";
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kLfsPrefix = "version https://git-lfs.github.com/spec";

// The safetensors dtype spellings ember reads and writes, by DType code. C128 is ember's
// extension for complex128, which the format does not define.
constexpr std::array<std::string_view, kNumDTypes> kNames{
    "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64",
    "F16", "BF16", "F32", "F64", "C64", "C128", "F8_E4M3", "F8_E5M2"};

std::string_view safetensors_name(DType d) { return kNames[static_cast<size_t>(d)]; }

bool parse_dtype(std::string_view s, DType& out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kNames[static_cast<size_t>(i)] == s) {
      out = dtype_from_name(s);
      return true;
    }
  }
  return false;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EMBER_CHECK(fd >= 0, kOp, "{}: expected a readable file, got {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail(kOp, "{}: expected a readable file, got {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(kOp, "{}: expected a regular file, got a directory or special file", path);
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      // Private and writable: writes to a zero-copy tensor stay in this process's pages.
      base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (base == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        base = nullptr;
        fail(kOp, "{}: expected to memory-map {} bytes, got {}", path, size, std::strerror(err));
      }
    }
    ::close(fd);
  }
  ~Mapping() {
    if (base != nullptr) ::munmap(base, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(base); }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), mapping_(std::make_shared<Mapping>(path)) {
  const size_t file_size = mapping_->size;
  const unsigned char* bytes = mapping_->bytes();
  if (file_size >= kLfsPrefix.size() &&
      std::string_view(reinterpret_cast<const char*>(bytes), kLfsPrefix.size()) == kLfsPrefix) {
    fail(kOp, "{}: is a Git LFS pointer, not the weights: run git lfs pull", path);
  }
  EMBER_CHECK(file_size >= 8, kOp, "{}: file size: expected at least 8 bytes (the header length), got {}", path,
              file_size);
  const uint64_t header_len = read_le64(bytes);
  EMBER_CHECK(header_len <= kMaxHeaderBytes, kOp, "{}: header length: expected at most {} bytes, got {}", path,
              kMaxHeaderBytes, header_len);
  EMBER_CHECK(header_len <= file_size - 8, kOp,
              "{}: header length: expected at most the {} bytes after the length field, got {} "
              "(truncated download?)",
              path, file_size - 8, header_len);
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = file_size - data_start;

  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(header_len));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail(kOp, "{}: header: expected valid JSON, got a parse error: {}", path, e.what());
  }
  EMBER_CHECK(header.is_object(), kOp, "{}: header: expected a JSON object, got {}", path, header.type_name());

  struct Range { size_t begin, end; const std::string* name; };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      EMBER_CHECK(entry.is_object(), kOp, "{}: __metadata__: expected an object of strings, got {}", path,
                  entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        EMBER_CHECK(value.is_string(), kOp, "{}: __metadata__[\"{}\"]: expected a string, got {}", path, key,
                    value.type_name());
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    EMBER_CHECK(entry.is_object(), kOp, "{}: tensor \"{}\": expected an object with dtype, shape, data_offsets, got {}",
                path, name, entry.type_name());
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      EMBER_CHECK(entry.contains(key), kOp, "{}: tensor \"{}\": expected a \"{}\" field, got none", path, name, key);
    }
    const json& jd = entry["dtype"];
    EMBER_CHECK(jd.is_string(), kOp, "{}: tensor \"{}\": dtype: expected a string, got {}", path, name, jd.type_name());
    SafetensorsInfo info{};
    EMBER_CHECK(parse_dtype(jd.get<std::string>(), info.dtype), kOp,
                "{}: tensor \"{}\": unknown dtype: expected one of BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, "
                "BF16, F32, F64, C64, C128, F8_E4M3, F8_E5M2, got \"{}\"",
                path, name, jd.get<std::string>());

    const json& js = entry["shape"];
    EMBER_CHECK(js.is_array(), kOp, "{}: tensor \"{}\": shape: expected an array of integers, got {}", path, name,
                js.type_name());
    uint64_t numel = 1;
    bool numel_overflow = false;
    for (const json& s : js) {
      EMBER_CHECK(s.is_number_integer(), kOp, "{}: tensor \"{}\": shape: expected integers, got {}", path, name, s.dump());
      EMBER_CHECK(s.is_number_unsigned() || s.get<int64_t>() >= 0, kOp,
                  "{}: tensor \"{}\": shape: expected sizes >= 0, got {}", path, name, s.dump());
      EMBER_CHECK(s.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), kOp,
                  "{}: tensor \"{}\": shape: expected sizes below 2^63, got {}", path, name, s.dump());
      const uint64_t size = s.get<uint64_t>();
      info.shape.push_back(static_cast<int64_t>(size));
      if (size != 0 && numel > std::numeric_limits<uint64_t>::max() / size) numel_overflow = true;
      else numel *= size;
    }
    if (std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end()) {  // an empty tensor
      numel_overflow = false;
      numel = 0;
    }

    const json& jo = entry["data_offsets"];
    const bool offsets_ok = jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned();
    EMBER_CHECK(offsets_ok, kOp, "{}: tensor \"{}\": data_offsets: expected two non-negative integers [begin, end], got {}",
                path, name, jo.dump());
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    EMBER_CHECK(begin <= end, kOp, "{}: tensor \"{}\": data_offsets: expected begin <= end, got [{}, {}]", path, name,
                begin, end);
    EMBER_CHECK(end <= data_size, kOp,
                "{}: tensor \"{}\": data_offsets: expected end <= {} (the data section's size), got {} "
                "(truncated file?)",
                path, name, data_size, end);
    const size_t item = itemsize(info.dtype);
    EMBER_CHECK(!numel_overflow && numel <= (end - begin) / item && numel * item == end - begin, kOp,
                "{}: tensor \"{}\": byte count: expected numel {} x itemsize {} ({} {}) bytes, got {}", path, name,
                numel_overflow ? std::string("(overflow)") : std::to_string(numel), item, ember::name(info.dtype),
                shape_str(info.shape), end - begin);
    info.begin = data_start + static_cast<size_t>(begin);
    info.end = data_start + static_cast<size_t>(end);
    auto [it, inserted] = infos_.emplace(name, std::move(info));
    ranges.push_back({it->second.begin, it->second.end, &it->first});
  }

  // The tensors must tile the data section exactly: no overlap, no gap, nothing after.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t expected = data_start;
  const std::string* previous = nullptr;
  for (const Range& r : ranges) {
    EMBER_CHECK(r.begin >= expected, kOp, "{}: tensors \"{}\" and \"{}\" overlap: expected \"{}\" to begin at data offset {}, got {}",
                path, previous ? *previous : std::string(), *r.name, *r.name, expected - data_start, r.begin - data_start);
    EMBER_CHECK(r.begin == expected, kOp, "{}: gap before tensor \"{}\": expected it to begin at data offset {}, got {}",
                path, *r.name, expected - data_start, r.begin - data_start);
    expected = r.end;
    previous = r.name;
  }
  EMBER_CHECK(expected == file_size, kOp, "{}: data section: expected the tensors to end at the file's end ({} bytes of data), got {} bytes left over after the last tensor",
              path, data_size, file_size - expected);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& [name, info] : infos_) out.push_back(name);
  return out;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = infos_.find(name);
  EMBER_CHECK(it != infos_.end(), kOp, "{}: tensor \"{}\": expected it in the file, got no such name ({} tensors)", path_,
              name, infos_.size());
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsInfo& in = info(name);
  const size_t nbytes = in.end - in.begin;
  auto* data = static_cast<unsigned char*>(mapping_->base) + in.begin;
  Shape strides = contiguous_strides(in.shape);
  // Element alignment: the item size, or the part size for complex types.
  const size_t alignment = is_complex(in.dtype) ? itemsize(in.dtype) / 2 : itemsize(in.dtype);
  if (reinterpret_cast<uintptr_t>(data) % alignment != 0) {
    Tensor out = empty(in.shape, in.dtype, Device::cpu());
    std::memcpy(out.raw_data(), data, nbytes);
    return out;
  }
  // The deleter owns a reference to the mapping, which outlives every tensor that views it.
  auto storage = std::make_shared<Storage>(data, nbytes, Device::cpu(), [mapping = mapping_](void*) {});
  return Tensor(std::move(storage), in.shape, std::move(strides), 0, in.dtype);
}

Tensor SafetensorsFile::get(const std::string& name, Device device) const {
  Tensor t = get(name);
  return device.is_cpu() ? t : t.to(device);
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, Device device) {
  const SafetensorsFile file(path);
  std::map<std::string, Tensor> out;
  for (const std::string& name : file.names()) out.emplace(name, file.get(name, device));
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != "__metadata__", kOp, "{}: tensor name: expected anything but the reserved \"__metadata__\", got it",
                path);
    EMBER_CHECK(t.defined(), kOp, "{}: tensor \"{}\": expected a defined tensor, got an undefined one", path, name);
    order.emplace_back(name, t.to(Device::cpu()).contiguous());
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.itemsize() > b.second.itemsize();
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : order) {
    header[name] = {{"dtype", std::string(safetensors_name(t.dtype()))}, {"shape", t.sizes()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  EMBER_CHECK(f.good(), kOp, "{}: expected a writable file, got {}", path, std::strerror(errno));
  std::array<char, 8> len{};
  for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  f.write(len.data(), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : order) f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  f.close();
  EMBER_CHECK(!f.fail(), kOp, "{}: expected to write {} bytes, got a write error", path, 8 + text.size() + offset);
}

}  // namespace ember
