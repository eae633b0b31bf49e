// The CUDA runtime surface: availability with a reason, streams, events, memory statistics.
// Present in every build; a build without CUDA reports "built without CUDA" everywhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::cuda {

struct Availability {
  bool available = false;
  std::string reason;  // empty iff available
};
/// Names the cause: built without CUDA / no driver / driver too old for the runtime (both
/// versions) / no device visible / compute capability too low. Computed once.
Availability availability();
bool is_available();
int device_count();
/// Version of the CUDA runtime this build was compiled against (e.g. 13000), 0 without CUDA.
int runtime_version();

/// A CUDA stream handle (non-owning; pool streams live for the process, like torch's).
class Stream {
 public:
  Stream() = default;
  Stream(void* handle, int device) : handle_(handle), device_(device) {}
  void* handle() const { return handle_; }  // cudaStream_t; nullptr is the legacy default stream
  int device() const { return device_; }
  void synchronize() const;
  bool query() const;  // true when all queued work has finished
  friend bool operator==(const Stream&, const Stream&) = default;

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

/// The stream ops run on for this thread and device (the default stream unless a StreamGuard
/// or set_current_stream says otherwise). device -1 means the current device.
Stream current_stream(int device = -1);
Stream default_stream(int device = -1);
/// Round-robin over a pool of 32 streams per device, like torch.cuda.Stream().
Stream get_stream_from_pool(int device = -1);
void set_current_stream(const Stream& stream);

/// RAII: makes a stream current for its scope (the `with torch.cuda.stream(s):` analogue).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

/// A CUDA event with timing enabled.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;
  void record(const Stream& stream);
  void record();                       // on the current stream
  void wait(const Stream& stream) const;  // makes `stream` wait for this event
  void synchronize() const;
  bool query() const;
  float elapsed_time(const Event& end) const;  // milliseconds from this to end

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

/// Waits for every stream of the device (device -1: the current device).
void synchronize(int device = -1);
int current_device();
void set_device(int device);

struct MemoryStats {
  size_t allocated = 0, peak_allocated = 0, reserved = 0, peak_reserved = 0;
  size_t outside_allocator = 0;  // device memory in use outside the allocator since start
  size_t device_free = 0, device_total = 0;  // the driver's cudaMemGetInfo at the time of the call
};
MemoryStats memory_stats(int device = -1);
void reset_peak_memory_stats(int device = -1);
/// Returns cached blocks that no stream still uses to the driver.
void empty_cache();

}  // namespace ember::cuda
