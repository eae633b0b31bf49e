// The CUDA runtime of a build with CUDA: availability with its cause, devices and their
// properties, capability gating, streams (a pool per device, a current stream per thread and
// device), events, synchronisation with the device error word, and host/device copies.
#include "cuda/runtime.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <map>
#include <tuple>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend.h"
#include "core/storage.h"
#include "cuda/allocator.h"

namespace ember {
namespace cuda {
namespace {

constexpr int kMinCapability = 80;  // the kernels are built for sm_80 and newer
constexpr size_t kStreamsPerPool = 32;

std::string version_string(int version) { return fmt::format("{}.{}", version / 1000, version % 1000 / 10); }

struct RuntimeState {
  Availability availability;
  int device_count = 0;
  std::vector<cudaDeviceProp> properties;
};

RuntimeState unavailable(std::string reason) {
  RuntimeState state;
  state.availability = {false, std::move(reason)};
  return state;
}

RuntimeState probe() {
  // Without the driver library every runtime call fails with a code that hides the cause, so
  // look for it first. The handle stays open: the runtime loads the same library for the process.
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    return unavailable(fmt::format("no CUDA driver: dlopen(\"libcuda.so.1\") failed: {}", why ? why : "unknown error"));
  }
  int driver_version = 0, runtime_version = 0;
  (void)cudaDriverGetVersion(&driver_version);
  (void)cudaRuntimeGetVersion(&runtime_version);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (status == cudaErrorInsufficientDriver) {
    return unavailable(fmt::format("the CUDA driver is older than the runtime: driver supports CUDA {}, "
                                   "ember uses the CUDA {} runtime (update the NVIDIA driver)",
                                   version_string(driver_version), version_string(runtime_version)));
  }
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    std::string reason = "no CUDA device visible";
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"))
      reason += fmt::format(" (CUDA_VISIBLE_DEVICES=\"{}\")", visible);
    return unavailable(reason);
  }
  if (status != cudaSuccess) {
    return unavailable(fmt::format("cudaGetDeviceCount failed: {} ({}); driver supports CUDA {}, runtime CUDA {}",
                                   cudaGetErrorName(status), cudaGetErrorString(status),
                                   version_string(driver_version), version_string(runtime_version)));
  }
  RuntimeState state;
  state.properties.resize(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp& p = state.properties[static_cast<size_t>(d)];
    if (const cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) {
      (void)cudaGetLastError();
      return unavailable(fmt::format("cudaGetDeviceProperties({}) failed: {} ({})", d, cudaGetErrorName(e),
                                     cudaGetErrorString(e)));
    }
    if (p.major * 10 + p.minor < kMinCapability) {
      return unavailable(fmt::format("device {} ({}) has compute capability {}.{}; ember needs {}.{} or newer "
                                     "(CUDA_VISIBLE_DEVICES can hide it)",
                                     d, p.name, p.major, p.minor, kMinCapability / 10, kMinCapability % 10));
    }
  }
  state.availability = {true, ""};
  state.device_count = count;
  return state;
}

const RuntimeState& runtime_state() {
  static const RuntimeState state = [] {
    try {
      return probe();
    } catch (const std::exception& e) {
      return unavailable(fmt::format("probing CUDA failed: {}", e.what()));
    }
  }();
  return state;
}

struct StreamPool {
  std::once_flag created;
  std::array<cudaStream_t, kStreamsPerPool> streams{};
  std::atomic<size_t> next{0};
};

std::vector<StreamPool>& stream_pools() {
  static std::vector<StreamPool> pools(static_cast<size_t>(runtime_state().device_count));
  return pools;
}

/// This thread's current stream per device; nullptr is the legacy default stream.
std::vector<cudaStream_t>& thread_current_streams() {
  thread_local std::vector<cudaStream_t> streams(static_cast<size_t>(runtime_state().device_count), nullptr);
  return streams;
}

struct ErrorWord {
  std::once_flag created;
  std::atomic<DeviceError*> word{nullptr};
  // Reads and clears the word without waiting for the legacy default stream's work.
  cudaStream_t stream = nullptr;
};

std::vector<ErrorWord>& error_words() {
  static std::vector<ErrorWord> words(static_cast<size_t>(runtime_state().device_count));
  return words;
}

/// 0 or 1; anything else is a mistake worth stopping for.
bool environment_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0' || std::string_view(value) == "0") return false;
  if (std::string_view(value) == "1") return true;
  fail("fast paths", "{}: expected 0 or 1, got \"{}\"", name, value);
}

/// An event for ordering only, destroyed at scope exit (the driver frees it once it completes).
class OrderingEvent {
 public:
  OrderingEvent() { EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OrderingEvent() { (void)cudaEventDestroy(event_); }
  OrderingEvent(const OrderingEvent&) = delete;
  OrderingEvent& operator=(const OrderingEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

cudaStream_t raw(const Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }

/// true when done, false when work is still queued; throws on any other status.
bool query_status(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: keep a later launch check from seeing it
    return false;
  }
  throw_cuda_error(call, status);
}

}  // namespace

// ---- internal helpers (runtime.h, allocator.h) ---------------------------------------------------

DeviceGuard::DeviceGuard(int device) : device_(device) {
  EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) (void)cudaSetDevice(previous_);
}

void require_available(const char* op) {
  const Availability& a = runtime_state().availability;
  if (!a.available) fail(op, "CUDA is not available: expected a usable CUDA device, got {}", a.reason);
}

int resolve_device(int device, const char* op) {
  require_available(op);
  if (device == -1) EMBER_CUDA_CHECK(cudaGetDevice(&device));
  const int count = runtime_state().device_count;
  EMBER_CHECK(device >= 0 && device < count, op, "device index: expected 0 <= index < {}, got {}", count, device);
  return device;
}

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail("cuda", "{} failed: expected cudaSuccess, got {} ({})", call, cudaGetErrorName(status), cudaGetErrorString(status));
}

cudaStream_t current_raw_stream(int device) {
  const int d = resolve_device(device, "current_stream");
  return thread_current_streams()[static_cast<size_t>(d)];
}

const cudaDeviceProp& device_properties(int device) {
  const int d = resolve_device(device, "device_properties");
  return runtime_state().properties[static_cast<size_t>(d)];
}

int compute_capability(int device) {
  const cudaDeviceProp& p = device_properties(device);
  return p.major * 10 + p.minor;
}

bool fast_paths_enabled(int device, int min_capability) {
  const bool disable = environment_flag("EMBER_DISABLE_FAST_PATHS");
  const bool force = environment_flag("EMBER_FORCE_FAST_PATHS");
  EMBER_CHECK(!(disable && force), "fast paths",
              "EMBER_DISABLE_FAST_PATHS and EMBER_FORCE_FAST_PATHS: expected at most one set to 1, got both");
  if (disable) return false;
  const int d = resolve_device(device, "fast paths");
  const int capability = compute_capability(d);
  if (capability >= min_capability) return true;
  EMBER_CHECK(!force, "fast paths",
              "EMBER_FORCE_FAST_PATHS=1: expected a device with compute capability {}.{} or newer, got cuda:{} ({}) with {}.{}",
              min_capability / 10, min_capability % 10, d, device_properties(d).name, capability / 10, capability % 10);
  return false;
}

int kernel_ptx_version(const void* kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> versions;
  const int d = resolve_device(device, "kernel_ptx_version");
  std::lock_guard lock(mutex);
  const auto [it, inserted] = versions.try_emplace({kernel, d}, 0);
  if (inserted) {
    DeviceGuard guard(d);
    cudaFuncAttributes attributes{};
    EMBER_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    it->second = attributes.ptxVersion;
  }
  return it->second;
}

int resident_blocks_per_sm(const void* kernel, int threads, int device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> counts;
  const int d = resolve_device(device, "resident_blocks_per_sm");
  std::lock_guard lock(mutex);
  const auto [it, inserted] = counts.try_emplace({kernel, threads, d}, 1);
  if (inserted) {
    DeviceGuard guard(d);
    int blocks = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    it->second = std::max(blocks, 1);
  }
  return it->second;
}

bool dependent_launches_enabled(int device) {
  return !environment_flag("EMBER_DISABLE_PDL") && fast_paths_enabled(device, 90);
}

DeviceError* device_error_word(int device) {
  const int d = resolve_device(device, "device_error_word");
  ErrorWord& w = error_words()[static_cast<size_t>(d)];
  std::call_once(w.created, [&] {
    DeviceGuard guard(d);
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking));
    void* word = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&word, sizeof(DeviceError)));
    // Zeroed and finished before any kernel (on any stream) can see the pointer.
    EMBER_CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(DeviceError), w.stream));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(w.stream));
    w.word.store(static_cast<DeviceError*>(word));
  });
  return w.word.load();
}

void check_device_error(int device) {
  const int d = resolve_device(device, "check_device_error");
  const ErrorWord& w = error_words()[static_cast<size_t>(d)];
  DeviceError* word = w.word.load();
  if (word == nullptr) return;  // no kernel has asked for the word, so none wrote it
  DeviceGuard guard(d);
  DeviceError error{};
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&error, word, sizeof(DeviceError), cudaMemcpyDeviceToHost, w.stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(w.stream));
  if (error.code == kNoDeviceError) return;
  EMBER_CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(DeviceError), w.stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(w.stream));
  if (error.code == kIndexOutOfRange) {
    fail("cuda", "index out of range (reported by a kernel on cuda:{}): expected an index in [{}, {}), got {}", d,
         -error.bound, error.bound, error.value);
  }
  fail("cuda", "kernel error on cuda:{}: expected a known error code, got {} (value {}, bound {})", d, error.code,
       error.value, error.bound);
}

// ---- availability and devices -------------------------------------------------------------------

Availability availability() { return runtime_state().availability; }
bool is_available() { return runtime_state().availability.available; }
int device_count() { return runtime_state().device_count; }
int runtime_version() { return CUDART_VERSION; }

int current_device() {
  require_available("current_device");
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int device) {
  const int d = resolve_device(device, "set_device");
  EMBER_CUDA_CHECK(cudaSetDevice(d));
}

// ---- streams ------------------------------------------------------------------------------------

void Stream::synchronize() const {
  const int d = resolve_device(device_, "Stream::synchronize");
  DeviceGuard guard(d);  // the legacy default stream (nullptr) is the current device's
  EMBER_CUDA_CHECK(cudaStreamSynchronize(raw(*this)));
  check_device_error(d);
}

bool Stream::query() const {
  const int d = resolve_device(device_, "Stream::query");
  DeviceGuard guard(d);
  return query_status(cudaStreamQuery(raw(*this)), "cudaStreamQuery");
}

Stream current_stream(int device) {
  const int d = resolve_device(device, "current_stream");
  return Stream(thread_current_streams()[static_cast<size_t>(d)], d);
}

Stream default_stream(int device) { return Stream(nullptr, resolve_device(device, "default_stream")); }

Stream get_stream_from_pool(int device) {
  const int d = resolve_device(device, "get_stream_from_pool");
  StreamPool& pool = stream_pools()[static_cast<size_t>(d)];
  std::call_once(pool.created, [&] {
    DeviceGuard guard(d);
    // Non-blocking: pool streams never wait for the legacy default stream, as in torch.
    for (cudaStream_t& s : pool.streams) EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  });
  return Stream(pool.streams[pool.next.fetch_add(1) % kStreamsPerPool], d);
}

void set_current_stream(const Stream& stream) {
  const int d = resolve_device(stream.device(), "set_current_stream");
  thread_current_streams()[static_cast<size_t>(d)] = raw(stream);
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

// previous_ was current on a valid device, so restoring it cannot fail.
StreamGuard::~StreamGuard() { thread_current_streams()[static_cast<size_t>(previous_.device())] = raw(previous_); }

// ---- events -------------------------------------------------------------------------------------

Event::Event() : device_(resolve_device(-1, "Event")) {
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDefault));  // timing enabled
  handle_ = event;
}

Event::~Event() {
  if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

Event::Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

namespace {
cudaEvent_t valid_event(void* handle, const char* op) {
  EMBER_CHECK(handle != nullptr, op, "event: expected a valid event, got a moved-from one");
  return static_cast<cudaEvent_t>(handle);
}
}  // namespace

void Event::record(const Stream& stream) {
  const cudaEvent_t event = valid_event(handle_, "Event::record");
  EMBER_CHECK(stream.device() == device_, "Event::record", "stream device: expected cuda:{} (the event's device), got cuda:{}",
              device_, stream.device());
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaEventRecord(event, raw(stream)));
}

void Event::record() { record(current_stream(device_)); }

void Event::wait(const Stream& stream) const {
  const cudaEvent_t event = valid_event(handle_, "Event::wait");
  const int d = resolve_device(stream.device(), "Event::wait");
  DeviceGuard guard(d);
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(raw(stream), event, 0));
}

void Event::synchronize() const {
  EMBER_CUDA_CHECK(cudaEventSynchronize(valid_event(handle_, "Event::synchronize")));
  check_device_error(device_);
}

bool Event::query() const {
  return query_status(cudaEventQuery(valid_event(handle_, "Event::query")), "cudaEventQuery");
}

float Event::elapsed_time(const Event& end) const {
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, valid_event(handle_, "Event::elapsed_time"),
                                        valid_event(end.handle_, "Event::elapsed_time")));
  return ms;
}

// ---- synchronisation and copies -----------------------------------------------------------------

void synchronize(int device) {
  const int d = resolve_device(device, "synchronize");
  DeviceGuard guard(d);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  allocator::process_events(d);
  check_device_error(d);
}

void* zeroed_stream_scratch(int device, cudaStream_t stream, ScratchPurpose purpose, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, cudaStream_t, ScratchPurpose>, Tensor> buffers;
  std::lock_guard lock(mutex);
  Tensor& t = buffers[{device, stream, purpose}];
  if (!t.defined() || t.nbytes() < bytes) {
    // The old buffer goes back to the allocator on this stream, after the kernels using it.
    t = empty({static_cast<int64_t>(std::max<size_t>(2 * bytes, 16384))}, kUInt8, Device::cuda(device));
    EMBER_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream));
  }
  return t.raw_data();
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    const int dd = resolve_device(dst_device.index, "copy");
    const int sd = resolve_device(src_device.index, "copy");
    const cudaStream_t dst_stream = current_raw_stream(dd);
    if (dd == sd) {
      DeviceGuard guard(dd);
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, dst_stream));
      return;
    }
    // Across devices the copy runs on the destination's stream after the work queued on the
    // source's stream, and the source's stream waits for the copy before it may reuse src.
    const cudaStream_t src_stream = current_raw_stream(sd);
    DeviceGuard src_guard(sd);
    OrderingEvent src_ready;
    EMBER_CUDA_CHECK(cudaEventRecord(src_ready.get(), src_stream));
    OrderingEvent copied;
    {
      DeviceGuard dst_guard(dd);
      EMBER_CUDA_CHECK(cudaStreamWaitEvent(dst_stream, src_ready.get(), 0));
      EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dd, src, sd, nbytes, dst_stream));
      EMBER_CUDA_CHECK(cudaEventRecord(copied.get(), dst_stream));
    }
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(src_stream, copied.get(), 0));
    return;
  }
  if (dst_device.is_cuda()) {
    // Synchronous: the host buffer may be pageable and may be freed as soon as this returns.
    const int d = resolve_device(dst_device.index, "copy");
    DeviceGuard guard(d);
    const cudaStream_t stream = current_raw_stream(d);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  // To the host: the caller reads the bytes, so wait, then report any kernel error.
  const int d = resolve_device(src_device.index, "copy");
  DeviceGuard guard(d);
  const cudaStream_t stream = current_raw_stream(d);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  check_device_error(d);
}

void prefer_l1_carveout(const void* kernel, int threads, size_t dynamic_smem) {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, std::pair<int, size_t>> done;  // (kernel, device) -> (threads, dynamic_smem)
  const std::lock_guard lock(mutex);
  const auto [it, inserted] = done.try_emplace({kernel, device}, threads, dynamic_smem);
  if (!inserted && it->second == std::pair{threads, dynamic_smem}) return;
  it->second = {threads, dynamic_smem};
  // Blocks per SM with all shared memory available (the attribute unset or at 100 %).
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  int blocks = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, dynamic_smem));
  cudaFuncAttributes attr{};
  EMBER_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const cudaDeviceProp& props = device_properties(device);
  const size_t per_sm = props.sharedMemPerMultiprocessor;
  const size_t need = static_cast<size_t>(blocks) * (dynamic_smem + attr.sharedSizeBytes + props.reservedSharedMemPerBlock);
  // The driver rounds a percentage up to the next capacity the SM supports.
  const int percent = static_cast<int>(std::min<size_t>(100, (need * 100 + per_sm - 1) / per_sm));
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

void allow_dynamic_smem(const void* kernel, size_t dynamic_smem) {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device) -> bytes
  const std::lock_guard lock(mutex);
  size_t& bytes = allowed[{kernel, device}];
  if (dynamic_smem <= bytes) return;
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_smem)));
  bytes = dynamic_smem;
}

}  // namespace cuda

void Tensor::record_stream(const cuda::Stream& stream) const {
  EMBER_CHECK(defined(), "record_stream", "tensor: expected a defined tensor, got an undefined one");
  EMBER_CHECK(device().is_cuda(), "record_stream", "tensor device: expected a CUDA tensor, got {}", device().str());
  EMBER_CHECK(stream.device() == device().index, "record_stream",
              "stream device: expected cuda:{} (the tensor's device), got cuda:{}", device().index, stream.device());
  cuda::require_available("record_stream");
  cuda::allocator::record_stream(storage_->data(), device().index, static_cast<cudaStream_t>(stream.handle()));
}

}  // namespace ember
