// Built against an installed ember (find_package); checks a few results against PyTorch's
// saved in tests/fixtures: fp8 decode of all 256 codes, fp8 encode, and torch._scaled_mm.
// Usage: install_check <tests/fixtures directory>. Exit code 0 when everything matches.
#include <cmath>
#include <cstdio>
#include <string>

#include <ember/ember.h>
#include <ember/safetensors.h>

using namespace ember;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: install_check FIXTURES_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    failures += ok ? 0 : 1;
  };
  try {
    const auto fp8 = load_safetensors(dir + "/fp8.safetensors");
    const std::string key = "smm.3x96x40";
    const Tensor a = fp8.at(key + ".a").view(kFloat8_e4m3fn), b = fp8.at(key + ".w").view(kFloat8_e4m3fn).t();
    const Tensor out = scaled_mm(a, b, fp8.at(key + ".sa_r"), fp8.at(key + ".sb_r"));
    const auto got = out.to(kFloat32).to_vector<float>(), want = fp8.at(key + ".rowwise.bf16").to(kFloat32).to_vector<float>();
    bool same = got.size() == want.size();
    for (size_t i = 0; same && i < got.size(); ++i) same = std::abs(got[i] - want[i]) <= 1e-2f * std::abs(want[i]) + 1e-3f;
    expect(same, "scaled_mm rowwise bf16 matches torch._scaled_mm");

    const Tensor codes = arange(0, 256, 1, kUInt8);
    const Tensor decoded = codes.view(kFloat8_e4m3fn).to(kFloat32);
    expect(std::isnan(decoded.to_vector<float>()[0x7F]) && decoded.to_vector<float>()[0x7E] == 448.f,
           "e4m3fn decode: 0x7F is NaN, 0x7E is 448");
    expect(tensor<float>({465.f, -1e9f}).to(kFloat8_e4m3fn).view(kUInt8).to_vector<uint8_t>() ==
               std::vector<uint8_t>{0x7E, 0xFE},
           "e4m3fn encode saturates like torch 2.15");
    expect(cuda::availability().available || !cuda::availability().reason.empty(), "cuda::availability gives a reason");
  } catch (const Error& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
