// The CUDA runtime surface of a build without CUDA (EMBER_CUDA=OFF or no toolkit found): every
// entry point exists and throws, and availability() says why. src/cuda/stub_kernels.cpp is its
// counterpart for the kernels.
#include "backend.h"
#include "ember/cuda.h"

namespace ember {
namespace {
[[noreturn]] void no_cuda(const char* op) {
  fail(op, "CUDA is not available: expected a build with CUDA, got {}", "built without CUDA (EMBER_CUDA=OFF or no CUDA toolkit at configure time)");
}
}  // namespace

void Tensor::record_stream(const cuda::Stream&) const { no_cuda("record_stream"); }

namespace cuda {

Availability availability() { return {false, "built without CUDA (EMBER_CUDA=OFF or no CUDA toolkit at configure time)"}; }
bool is_available() { return false; }
int device_count() { return 0; }
int runtime_version() { return 0; }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
Stream current_stream(int) { no_cuda("current_stream"); }
Stream default_stream(int) { no_cuda("default_stream"); }
Stream get_stream_from_pool(int) { no_cuda("get_stream_from_pool"); }
void set_current_stream(const Stream&) { no_cuda("set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event() { no_cuda("Event"); }
Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::record() { no_cuda("Event::record"); }
void Event::wait(const Stream&) const { no_cuda("Event::wait"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
bool Event::query() const { no_cuda("Event::query"); }
float Event::elapsed_time(const Event&) const { no_cuda("Event::elapsed_time"); }
void synchronize(int) { no_cuda("synchronize"); }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache() { no_cuda("empty_cache"); }

void* allocate(size_t, Device) { no_cuda("allocate"); }
void deallocate(void*, Device) {}
void copy_bytes(void*, Device, const void*, Device, size_t) { no_cuda("copy"); }

}  // namespace cuda
}  // namespace ember
