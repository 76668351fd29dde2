#include "engine/buffer.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "engine/device.h"

namespace engine {
namespace {

struct Counters {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> allocations{0};
};
Counters& counters(DeviceType device) {
  static Counters cpu, cuda;
  return device == DeviceType::kCpu ? cpu : cuda;
}

void count_alloc(DeviceType device, std::size_t bytes) {
  Counters& c = counters(device);
  c.allocations.fetch_add(1);
  const std::size_t now = c.current.fetch_add(bytes) + bytes;
  std::size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

MemoryStats memory_stats(DeviceType device) {
  const Counters& c = counters(device);
  return MemoryStats{c.current.load(), c.peak.load(), c.allocations.load()};
}

void count_allocation(DeviceType device, std::size_t bytes) { count_alloc(device, bytes); }
void count_release(DeviceType device, std::size_t bytes) { counters(device).current.fetch_sub(bytes); }

void reset_peak_memory(DeviceType device) {
  Counters& c = counters(device);
  c.peak.store(c.current.load());
}

Buffer::Buffer(DeviceType device, std::size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device == DeviceType::kCpu) {
    data_ = std::aligned_alloc(Arena::kAlignment, align_up(bytes, Arena::kAlignment));
    ENGINE_CHECK(data_ != nullptr, "out of host memory allocating ", format_bytes(bytes));
  } else {
    data_ = device_malloc(bytes);
  }
  count_alloc(device, bytes);
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() {
  if (data_ == nullptr) return;
  if (device_ == DeviceType::kCpu) {
    std::free(data_);
  } else {
    device_free(data_);
  }
  counters(device_).current.fetch_sub(bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::as_tensor(Shape shape, DType dtype) const {
  ENGINE_CHECK(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype) <= bytes_, "a ",
               dtype_name(dtype), shape.str(), " tensor does not fit in a buffer of ",
               format_bytes(bytes_));
  return Tensor(data_, shape, dtype, device_);
}

Arena Arena::planning(DeviceType device) {
  Arena arena;
  arena.device_ = device;
  arena.planning_ = true;
  return arena;
}

Arena::Arena(DeviceType device, std::size_t capacity)
    : buffer_(device, capacity), device_(device), capacity_(capacity) {}

Tensor Arena::allocate(Shape shape, DType dtype, const char* what) {
  const std::size_t bytes = align_up(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype), kAlignment);
  if (planning_) {
    used_ += bytes;
    return Tensor(nullptr, shape, dtype, device_);
  }
  ENGINE_CHECK(used_ + bytes <= capacity_, "arena overflow allocating ", what, " ", dtype_name(dtype),
               shape.str(), ": ", format_bytes(used_), " used of ", format_bytes(capacity_),
               " (the arena was planned for a smaller allocation sequence)");
  Tensor t(static_cast<char*>(buffer_.data()) + used_, shape, dtype, device_);
  used_ += bytes;
  return t;
}

std::string format_bytes(std::size_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(text, sizeof text, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(text, sizeof text, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(text, sizeof text, "%.2f KiB", b / 1024.0);
  else std::snprintf(text, sizeof text, "%zu B", bytes);
  return text;
}

}  // namespace engine
