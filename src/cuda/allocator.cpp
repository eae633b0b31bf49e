// The caching device allocator (see allocator.h). One state per device, guarded by its mutex;
// the mutex is never held while waiting for a stream or an event.
#include "cuda/allocator.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "cuda/runtime.h"

namespace ember::cuda {
namespace allocator {
namespace {

constexpr size_t kMinBlockSize = 512;          // every size is rounded up to a multiple of this
constexpr size_t kSmallSize = size_t{1} << 20;    // largest request served by the small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;  // segment size of the small pool
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // smaller large requests share a 20 MiB segment
constexpr size_t kLargeBuffer = size_t{20} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;   // larger requests get their own segment, rounded to this

size_t round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize : (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

struct Block;
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};
/// Free blocks ordered by (stream, size, address): lower_bound finds the best fit on a stream.
using Pool = std::set<Block*, BlockOrder>;

struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // the allocating stream, the only one that may reuse the block
  Pool* pool = nullptr;           // nullptr: a direct (uncached) allocation
  Block* prev = nullptr;          // address-order neighbours within the segment
  Block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;               // events of a free still in flight on recorded streams
  std::vector<cudaStream_t> stream_uses;  // streams other than `stream` that used the block
};

bool BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<const void*>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<const void*>()(a->ptr, b->ptr);
}

struct DeviceState {
  std::mutex mutex;
  Pool small_pool, large_pool;
  std::unordered_map<void*, Block*> live;              // allocated blocks by address
  std::vector<std::pair<cudaEvent_t, Block*>> pending;  // frees waiting for recorded streams
  std::vector<cudaEvent_t> spare_events;
  size_t allocated = 0, peak_allocated = 0, reserved = 0, peak_reserved = 0;
  bool baseline_known = false;
  size_t baseline = 0;  // device memory in use when the allocator first saw the device
};

std::vector<std::unique_ptr<DeviceState>>& device_states() {
  static std::vector<std::unique_ptr<DeviceState>> states = [] {
    std::vector<std::unique_ptr<DeviceState>> created;
    for (int d = 0; d < device_count(); ++d) created.push_back(std::make_unique<DeviceState>());
    return created;
  }();
  return states;
}

DeviceState& state_of(int device) { return *device_states().at(static_cast<size_t>(device)); }

std::string mib(size_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

Mode mode_from_environment() {
  const char* value = std::getenv("EMBER_CUDA_ALLOC");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "caching") return Mode::Caching;
  if (std::string_view(value) == "direct") return Mode::Direct;
  fail("cuda allocator", "EMBER_CUDA_ALLOC: expected \"caching\" or \"direct\", got \"{}\"", value);
}

std::atomic<Mode>& mode_word() {
  // An unrecognised value throws here and, the static being left uninitialised, again next time.
  static std::atomic<Mode> word{mode_from_environment()};
  return word;
}

void note_reserved(DeviceState& s, size_t bytes) {
  s.reserved += bytes;
  if (s.reserved > s.peak_reserved) s.peak_reserved = s.reserved;
}

void note_allocated(DeviceState& s, Block* block) {
  block->allocated = true;
  s.allocated += block->size;
  if (s.allocated > s.peak_allocated) s.peak_allocated = s.allocated;
  s.live.emplace(block->ptr, block);
}

void ensure_baseline(DeviceState& s) {
  if (s.baseline_known) return;
  size_t free_bytes = 0, total_bytes = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t used = total_bytes - free_bytes;
  s.baseline = used > s.reserved ? used - s.reserved : 0;
  s.baseline_known = true;
}

/// cudaMalloc; nullptr when the device is out of memory (the error is cleared).
void* device_malloc(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (status != cudaSuccess) throw_cuda_error("cudaMalloc", status);
  return ptr;
}

/// Merges `other` into `block` when `other` is a free neighbour no stream still uses.
void merge_into(Block* block, Block* other) {
  if (other == nullptr || other->allocated || other->pending_events > 0) return;
  other->pool->erase(other);
  if (block->prev == other) {
    block->ptr = other->ptr;
    block->prev = other->prev;
    if (block->prev) block->prev->next = block;
  } else {
    block->next = other->next;
    if (block->next) block->next->prev = block;
  }
  block->size += other->size;
  delete other;
}

/// Returns a block that is neither allocated nor pending to its pool, merged with free neighbours.
void free_block(Block* block) {
  block->stream_uses.clear();
  merge_into(block, block->prev);
  merge_into(block, block->next);
  block->pool->insert(block);
}

void process_events_locked(DeviceState& s) {
  for (auto it = s.pending.begin(); it != s.pending.end();) {
    const cudaError_t status = cudaEventQuery(it->first);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: keep a later launch check from seeing it
      ++it;
      continue;
    }
    if (status != cudaSuccess) throw_cuda_error("cudaEventQuery", status);
    s.spare_events.push_back(it->first);
    Block* block = it->second;
    it = s.pending.erase(it);
    if (--block->pending_events == 0) free_block(block);
  }
}

/// Waits (without the mutex) for every event of a pending free that exists now.
void wait_for_pending_frees(DeviceState& s, std::unique_lock<std::mutex>& lock) {
  std::vector<cudaEvent_t> events;
  for (const auto& entry : s.pending) events.push_back(entry.first);
  lock.unlock();
  // An event handed back and re-recorded meanwhile only makes this wait longer; events are
  // never destroyed, so every handle stays valid.
  for (cudaEvent_t event : events) EMBER_CUDA_CHECK(cudaEventSynchronize(event));
  lock.lock();
  process_events_locked(s);
}

/// Takes every cached segment that is entirely free out of the pools and the statistics; the
/// caller frees the returned pointers with free_segments once the mutex is released.
std::vector<void*> detach_free_segments(DeviceState& s) {
  std::vector<void*> segments;
  for (Pool* pool : {&s.small_pool, &s.large_pool}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;
        continue;
      }
      segments.push_back(block->ptr);
      s.reserved -= block->size;
      it = pool->erase(it);
      delete block;
    }
  }
  return segments;
}

/// cudaFree waits for the whole device, so it never runs under the mutex.
void free_segments(const std::vector<void*>& segments) {
  for (void* ptr : segments) EMBER_CUDA_CHECK(cudaFree(ptr));
}

Block* allocate_cached(DeviceState& s, size_t size, cudaStream_t stream) {
  Pool& pool = size <= kSmallSize ? s.small_pool : s.large_pool;
  Block key;
  key.stream = stream;
  key.size = size;
  Block* block = nullptr;
  if (auto it = pool.lower_bound(&key); it != pool.end() && (*it)->stream == stream) {
    block = *it;
    pool.erase(it);
  } else {
    const size_t bytes = segment_size(size);
    void* ptr = device_malloc(bytes);
    if (ptr == nullptr) return nullptr;
    block = new Block;
    block->ptr = static_cast<char*>(ptr);
    block->size = bytes;
    block->stream = stream;
    block->pool = &pool;
    note_reserved(s, bytes);
  }
  const size_t remaining = block->size - size;
  const bool split = &pool == &s.small_pool ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    auto* rest = new Block;
    rest->ptr = block->ptr + size;
    rest->size = remaining;
    rest->stream = stream;
    rest->pool = &pool;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
  }
  note_allocated(s, block);
  return block;
}

Block* allocate_direct(DeviceState& s, size_t nbytes, cudaStream_t stream) {
  void* ptr = device_malloc(nbytes);
  if (ptr == nullptr) return nullptr;
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = nbytes;
  block->stream = stream;
  note_reserved(s, nbytes);
  note_allocated(s, block);
  return block;
}

cudaEvent_t take_event(DeviceState& s) {
  if (!s.spare_events.empty()) {
    cudaEvent_t event = s.spare_events.back();
    s.spare_events.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

/// Frees an allocated block of the caching pools (direct blocks are handled by deallocate).
void release_block(DeviceState& s, Block* block, int device) {
  block->allocated = false;
  s.allocated -= block->size;
  if (block->stream_uses.empty()) {
    free_block(block);
    return;
  }
  // Record an event on every stream that used the block: it is reused once all have passed
  // this point (tracking only the last stream would let the others race with the next owner).
  DeviceGuard guard(device);
  for (cudaStream_t use : block->stream_uses) {
    cudaEvent_t event = take_event(s);
    EMBER_CUDA_CHECK(cudaEventRecord(event, use));
    s.pending.emplace_back(event, block);
    ++block->pending_events;
  }
  block->stream_uses.clear();
}

}  // namespace

Mode mode() { return mode_word().load(); }
void set_mode(Mode mode) { mode_word().store(mode); }

void record_stream(void* ptr, int device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  DeviceState& s = state_of(device);
  std::lock_guard lock(s.mutex);
  const auto it = s.live.find(ptr);
  EMBER_CHECK(it != s.live.end(), "record_stream",
              "pointer: expected memory allocated by ember on cuda:{}, got {}", device, ptr);
  Block* block = it->second;
  // Direct allocations are freed with cudaFree, which waits for the whole device.
  if (block->pool == nullptr || stream == block->stream) return;
  for (cudaStream_t use : block->stream_uses)
    if (use == stream) return;
  block->stream_uses.push_back(stream);
}

void process_events(int device) {
  DeviceState& s = state_of(device);
  std::lock_guard lock(s.mutex);
  process_events_locked(s);
}

}  // namespace allocator

void* allocate(size_t nbytes, Device device) {
  if (nbytes == 0) return nullptr;
  const int d = resolve_device(device.index, "allocate");
  const allocator::Mode mode = allocator::mode();
  DeviceGuard guard(d);
  const cudaStream_t stream = current_raw_stream(d);
  allocator::DeviceState& s = allocator::state_of(d);
  std::unique_lock lock(s.mutex);
  allocator::ensure_baseline(s);
  allocator::process_events_locked(s);
  const auto attempt = [&] {
    return mode == allocator::Mode::Direct ? allocator::allocate_direct(s, nbytes, stream)
                                           : allocator::allocate_cached(s, allocator::round_size(nbytes), stream);
  };
  allocator::Block* block = attempt();
  if (block == nullptr) {
    // Out of memory: give the cached segments back to the driver and try once more.
    allocator::wait_for_pending_frees(s, lock);
    const std::vector<void*> segments = allocator::detach_free_segments(s);
    lock.unlock();
    allocator::free_segments(segments);
    lock.lock();
    block = attempt();
  }
  if (block == nullptr) {
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("allocate", "CUDA out of memory on cuda:{}: expected room for {} bytes ({}), got none; "
         "ember has {} allocated and {} reserved, the device has {} free of {}",
         d, nbytes, allocator::mib(nbytes), allocator::mib(s.allocated), allocator::mib(s.reserved),
         allocator::mib(free_bytes), allocator::mib(total_bytes));
  }
  return block->ptr;
}

void deallocate(void* ptr, Device device) {
  if (ptr == nullptr) return;
  // Runs in destructors: errors are reported, never thrown.
  try {
    allocator::DeviceState& s = allocator::state_of(device.index);
    {
      std::lock_guard lock(s.mutex);
      const auto it = s.live.find(ptr);
      if (it == s.live.end()) {
        std::fprintf(stderr, "ember: [deallocate] pointer %p was not allocated by ember on cuda:%d\n", ptr, device.index);
        return;
      }
      allocator::Block* block = it->second;
      s.live.erase(it);
      if (block->pool != nullptr) {
        allocator::release_block(s, block, device.index);
        return;
      }
      s.allocated -= block->size;
      s.reserved -= block->size;
      delete block;
    }
    // A direct allocation: cudaFree (which waits for the device) outside the mutex.
    EMBER_CUDA_CHECK(cudaFree(ptr));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: [deallocate] freeing %p on cuda:%d failed: %s\n", ptr, device.index, e.what());
  }
}

MemoryStats memory_stats(int device) {
  const int d = resolve_device(device, "memory_stats");
  DeviceGuard guard(d);
  allocator::DeviceState& s = allocator::state_of(d);
  std::lock_guard lock(s.mutex);
  allocator::ensure_baseline(s);
  size_t free_bytes = 0, total_bytes = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t used = total_bytes - free_bytes;
  MemoryStats stats;
  stats.allocated = s.allocated;
  stats.peak_allocated = s.peak_allocated;
  stats.reserved = s.reserved;
  stats.peak_reserved = s.peak_reserved;
  stats.outside_allocator = used > s.reserved + s.baseline ? used - s.reserved - s.baseline : 0;
  stats.device_free = free_bytes;
  stats.device_total = total_bytes;
  return stats;
}

void reset_peak_memory_stats(int device) {
  const int d = resolve_device(device, "reset_peak_memory_stats");
  allocator::DeviceState& s = allocator::state_of(d);
  std::lock_guard lock(s.mutex);
  s.peak_allocated = s.allocated;
  s.peak_reserved = s.reserved;
}

void empty_cache() {
  require_available("empty_cache");
  for (int d = 0; d < device_count(); ++d) {
    allocator::DeviceState& s = allocator::state_of(d);
    std::unique_lock lock(s.mutex);
    if (s.reserved == 0) continue;  // never used: leave its context uncreated
    DeviceGuard guard(d);
    allocator::wait_for_pending_frees(s, lock);
    const std::vector<void*> segments = allocator::detach_free_segments(s);
    lock.unlock();
    allocator::free_segments(segments);
  }
}

}  // namespace ember::cuda
