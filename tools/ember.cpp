// The `ember` command line: `ember info` (devices, build, CUDA availability and why not) and
// `ember demo` (a short tour of the tensor ops).
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <ember/ember.h>

namespace {

int run_info() {
  fmt::print("ember {}\n", EMBER_VERSION);
  const auto cuda_available = ember::cuda::availability();
  fmt::print("CUDA runtime built against: {}\n",
             ember::cuda::runtime_version() ? fmt::format("{}.{}", ember::cuda::runtime_version() / 1000,
                                                          ember::cuda::runtime_version() % 1000 / 10)
                                            : std::string("none"));
  fmt::print("CUDA available: {}{}\n", cuda_available.available ? "yes" : "no",
             cuda_available.available ? "" : " (" + cuda_available.reason + ")");
  fmt::print("devices: cpu");
  for (int i = 0; i < ember::cuda::device_count(); ++i) fmt::print(", {}", ember::Device::cuda(i).str());
  fmt::print("\n");
  return 0;
}

void show(const char* label, const ember::Tensor& t) {
  const ember::Tensor f = t.to(ember::Device::cpu()).to(ember::kFloat64);
  fmt::print("{:<34} {} {:<9} {}\n", label, fmt::format("[{}]", fmt::join(t.sizes(), ",")), ember::name(t.dtype()),
             fmt::join(f.to_vector<double>(), " "));
}

int run_demo(const std::string& device_name) {
  using namespace ember;
  const Device device = Device::parse(device_name);
  const Tensor x = tensor<float>({1, -2, 3, 0.5f, 448, 465}, {2, 3}).to(device);
  show("x", x);
  show("x.to(float8_e4m3fn) (465 -> 448)", x.to(kFloat8_e4m3fn));
  show("saturate_cast(x * 1e5, float8_e5m2)", saturate_cast(x * 1e5, kFloat8_e5m2));
  show("x.t()", x.t().contiguous());
  show("softmax(x, -1)", softmax(x, -1));
  show("sum(x, {0})", sum(x, {0}));
  show("x @ x.t()", matmul(x, x.t()));
  show("x + arange(3) (broadcast)", x + arange(0, 3, 1, kInt64, device));
  const auto [mantissa, exponent] = frexp(x);
  show("frexp(x) mantissa", mantissa);
  show("frexp(x) exponent", exponent);
  show("logspace(0, 3, 4)", logspace(0, 3, 4, 10, kFloat32, device));
  show("take(x, [-1, 0])", take(x, tensor<int64_t>({-1, 0}).to(device)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember: a C++ tensor library with CUDA kernels and a mixture-of-experts inference engine"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "devices, build configuration and CUDA availability");
  std::string device = "cpu";
  auto* demo = app.add_subcommand("demo", "a short tour of the tensor ops");
  demo->add_option("--device", device, "cpu or cuda[:N]");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return run_info();
    if (*demo) return run_demo(device);
  } catch (const ember::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
