// safetensors: round trips of every dtype, files written by the reference Python implementation
// (scripts/fixtures/make_safetensors.py), and one specific error per kind of malformed file.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "compare.h"

using namespace ember;

namespace {

std::string temp_path(const std::string& tag) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return (std::filesystem::temp_directory_path() /
          ("ember_" + std::to_string(::getpid()) + "_" + test->name() + "_" + tag + ".safetensors"))
      .string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

/// A file: header length, header text, data.
std::string crafted(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

/// The float32 pattern of the fixtures: (k % 23 - 11) * 0.25 + offset for flat index k.
Tensor pattern(const std::vector<int64_t>& shape, float offset = 0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t k = 0; k < v.size(); ++k) v[k] = (static_cast<float>(k % 23) - 11) * 0.25f + offset;
  return tensor<float>(v, shape);
}

/// Complex numbers pattern + i * (k + 0.5).
Tensor complex_pattern(const std::vector<int64_t>& shape, DType d) {
  const auto re = pattern(shape).to_vector<float>();
  std::vector<std::complex<double>> v;
  for (size_t k = 0; k < re.size(); ++k) v.emplace_back(re[k], static_cast<double>(k) + 0.5);
  return tensor<std::complex<double>>(v, shape).to(d);
}

/// Opening `bytes` as a file throws an ember::Error whose message names the file and contains
/// `expected`.
void expect_rejected(const std::string& tag, const std::string& bytes, const std::string& expected) {
  const std::string path = temp_path(tag);
  write_bytes(path, bytes);
  try {
    SafetensorsFile file(path);
    ADD_FAILURE() << tag << ": expected an ember::Error containing \"" << expected << "\"";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(expected), std::string::npos) << tag << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << tag << ": the message does not name the file: " << msg;
  }
  std::filesystem::remove(path);
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtype) {
  std::map<std::string, Tensor> tensors;
  for (int code = 0; code < kNumDTypes; ++code) {
    const auto d = static_cast<DType>(code);
    tensors[std::string(name(d))] = is_complex(d) ? complex_pattern({3, 5}, d) : pattern({3, 5}).to(d);
  }
  tensors["transposed"] = pattern({4, 6}).t();  // saved contiguous
  tensors["scalar"] = scalar_tensor(-2.5, kFloat64);
  tensors["empty"] = zeros({0, 7}, kInt16);
  tensors["nan_inf"] = tensor<float>({NAN, INFINITY, -INFINITY, -0.0f, 1e-45f});
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"who", "ember"}};
  const std::string path = temp_path("all");
  save_safetensors(path, tensors, metadata);

  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "data section not 8-byte aligned";

  const auto loaded = load_safetensors(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(loaded.count(name)) << name;
    const Tensor& l = loaded.at(name);
    EXPECT_EQ(l.dtype(), t.dtype()) << name;
    EXPECT_EQ(l.sizes(), t.sizes()) << name;
    EXPECT_TRUE(l.is_contiguous()) << name;
    EXPECT_TENSOR_EQ(l, t) << name;
  }

  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.names().size(), tensors.size());
  // Every tensor is aligned for its element type, so get() never copies: the same bytes twice.
  for (const std::string& name : file.names()) {
    const SafetensorsInfo& info = file.info(name);
    EXPECT_EQ(info.begin % std::min<size_t>(itemsize(info.dtype), 8), 0u) << name;
    EXPECT_EQ(file.get(name).raw_data(), file.get(name).raw_data()) << name;
    // The bytes in the file are the tensor's bytes (little-endian, row-major).
    const Tensor c = tensors.at(name).contiguous();
    EXPECT_EQ(info.end - info.begin, c.nbytes()) << name;
    EXPECT_EQ(std::memcmp(bytes.data() + info.begin, c.raw_data(), c.nbytes()), 0) << name;
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, ZeroCopyTensorsOutliveTheFileObject) {
  const std::string path = temp_path("keep");
  save_safetensors(path, {{"w", pattern({64, 3})}});
  Tensor w;
  {
    SafetensorsFile file(path);
    w = file.get("w");
  }
  std::filesystem::remove(path);  // the mapping, not the path, keeps the bytes
  EXPECT_TENSOR_EQ(w, pattern({64, 3}));
  // Writes go to private pages: a fresh load of a saved file is unaffected.
  const std::string path2 = temp_path("private");
  save_safetensors(path2, {{"w", pattern({4})}});
  Tensor a = SafetensorsFile(path2).get("w");
  a.data_ptr<float>()[0] = 123;
  EXPECT_EQ(SafetensorsFile(path2).get("w").to_vector<float>()[0], -11 * 0.25f);
  std::filesystem::remove(path2);
}

TEST(Safetensors, ReadsFilesWrittenByPythonSafetensors) {
  const std::string path = test::fixture_path("safetensors_torch.safetensors");
  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "ember fixture"}}));
  const auto loaded = load_safetensors(path);
  // bool, complex128 and the cast rules are checked separately; here every dtype python writes.
  const std::vector<DType> dtypes{kUInt8, kInt8, kUInt16, kInt16, kUInt32, kInt32, kUInt64, kInt64, kFloat16,
                                  kBFloat16, kFloat32, kFloat64, kFloat8_e4m3fn, kFloat8_e5m2};
  ASSERT_EQ(loaded.size(), dtypes.size() + 4);
  for (DType d : dtypes) {
    const std::string key = "t_" + std::string(name(d));
    ASSERT_TRUE(loaded.count(key)) << key;
    const Tensor expected = is_unsigned(d) ? pattern({2, 3, 4}, 3).to(d) : pattern({2, 3, 4}).to(d);
    EXPECT_EQ(loaded.at(key).dtype(), d) << key;
    EXPECT_TENSOR_EQ(loaded.at(key), expected) << key;
  }
  std::vector<bool> b;
  for (int k = 0; k < 24; ++k) b.push_back(k % 3 != 0);
  EXPECT_TENSOR_EQ(loaded.at("t_bool"), tensor<bool>(b, {2, 3, 4}));
  const auto c = loaded.at("t_complex64").to_vector<std::complex<float>>();
  const auto re = pattern({24}).to_vector<float>();
  for (size_t k = 0; k < 24; ++k) EXPECT_EQ(c[k], std::complex<float>(re[k], -static_cast<float>(k))) << k;
  EXPECT_EQ(loaded.at("scalar").dim(), 0);
  EXPECT_EQ(loaded.at("scalar").item<float>(), 3.5f);
  EXPECT_EQ(loaded.at("empty").sizes(), (std::vector<int64_t>{0, 3}));
}

TEST(Safetensors, MalformedFilesGiveSpecificErrors) {
  const std::string f32x2 = std::string(8, '\0');  // 8 bytes of data
  expect_rejected("empty", "", "expected at least 8 bytes");
  expect_rejected("short", "abc", "expected at least 8 bytes");
  expect_rejected("lfs",
                  "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 5368709120\n",
                  "is a Git LFS pointer, not the weights: run git lfs pull");
  expect_rejected("truncated_header", le64(1000) + "{\"a\":", "truncated download");
  expect_rejected("huge_header", le64(200'000'000) + std::string(64, ' '), "expected at most 100000000 bytes");
  expect_rejected("bad_json", crafted("{\"a\": {\"dtype\": ", ""), "expected valid JSON");
  expect_rejected("not_object", crafted("[1, 2]", ""), "expected a JSON object");
  expect_rejected("unknown_dtype",
                  crafted(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,8]}})", f32x2), "unknown dtype");
  expect_rejected("torch_dtype_name",
                  crafted(R"({"a":{"dtype":"float32","shape":[2],"data_offsets":[0,8]}})", f32x2), "unknown dtype");
  expect_rejected("negative_shape",
                  crafted(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2), "expected sizes >= 0");
  expect_rejected("float_shape",
                  crafted(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", f32x2), "expected integers");
  for (const char* offsets : {"[0]", "[0,4,8]", "[\"0\",8]", "[-1,8]", "3"}) {
    expect_rejected(std::string("offsets_") + std::to_string(std::strlen(offsets)),
                    crafted(std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)") + offsets + "}}", f32x2),
                    "expected two non-negative integers");
  }
  expect_rejected("begin_after_end",
                  crafted(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", f32x2), "expected begin <= end");
  expect_rejected("data_truncated",
                  crafted(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32x2), "truncated file");
  expect_rejected("byte_count",
                  crafted(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2), "byte count");
  expect_rejected("byte_count_dtype",
                  crafted(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", f32x2), "byte count");
  expect_rejected("overlap",
                  crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')),
                  "overlap");
  expect_rejected("gap",
                  crafted(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          std::string(12, '\0')),
                  "gap before tensor \"b\"");
  expect_rejected("gap_at_start",
                  crafted(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2), "gap before tensor \"a\"");
  expect_rejected("trailing",
                  crafted(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2), "4 bytes left over");
  expect_rejected("missing_field", crafted(R"({"a":{"dtype":"F32","shape":[2]}})", f32x2),
                  "expected a \"data_offsets\" field");
  expect_rejected("metadata_value",
                  crafted(R"({"__metadata__":{"n":3},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32x2),
                  "__metadata__[\"n\"]: expected a string");
  expect_rejected("entry_not_object", crafted(R"({"a":[1,2]})", ""), "tensor \"a\": expected an object");

  // A valid file, then a name it does not have.
  const std::string path = temp_path("valid");
  write_bytes(path, crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32x2));
  SafetensorsFile file(path);
  EXPECT_EQ(file.get("a").to_vector<float>(), (std::vector<float>{0, 0}));
  try {
    file.get("missing.weight");
    ADD_FAILURE() << "expected an ember::Error for a missing tensor";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("\"missing.weight\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  std::filesystem::remove(path);

  // A header whose length leaves the data unaligned: the tensor is copied, with the same values.
  const std::string unaligned = temp_path("unaligned");
  const float values[2] = {1.5f, -2.25f};
  write_bytes(unaligned, crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )",
                                 std::string(reinterpret_cast<const char*>(values), 8)));
  EXPECT_EQ(SafetensorsFile(unaligned).get("a").to_vector<float>(), (std::vector<float>{1.5f, -2.25f}));
  std::filesystem::remove(unaligned);
  EXPECT_THROW(SafetensorsFile("/nonexistent/ember/model.safetensors"), Error);
  EXPECT_THROW(save_safetensors(temp_path("reserved"), {{"__metadata__", zeros({1})}}), Error);
}
