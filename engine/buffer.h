// Owning memory: Buffer (one allocation) and Arena (a bump allocator over one
// Buffer, sized before the first step so the step loop never allocates).
//
// Every allocation is counted per device in MemoryStats, which the step log
// reports as the engine's peak memory.
#pragma once

#include <cstddef>
#include <string>

#include "engine/tensor.h"

namespace engine {

// Bytes currently held and the high-water mark, per device type.
struct MemoryStats {
  std::size_t current = 0;
  std::size_t peak = 0;
  std::size_t allocations = 0;  // allocations made so far (the step loop must make none after its first step)
};
MemoryStats memory_stats(DeviceType device);
void reset_peak_memory(DeviceType device);  // peak := current
// For memory allocated outside Buffer (the CUDA context's stream-ordered
// scratch): counted in memory_stats as a Buffer's would be.
void count_allocation(DeviceType device, std::size_t bytes);
void count_release(DeviceType device, std::size_t bytes);

// One allocation, freed on destruction. Host memory is 256-byte aligned;
// device memory comes from cudaMalloc (only when built with CUDA).
class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceType device, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  DeviceType device() const { return device_; }
  // The whole buffer viewed as a tensor of `shape` (must fit).
  Tensor as_tensor(Shape shape, DType dtype) const;

 private:
  void release();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  DeviceType device_ = DeviceType::kCpu;
};

// Bump allocator. Use it in two passes so sizes are never written twice:
//   Arena plan = Arena::planning(device);   run the allocation sequence on it
//   Arena real(device, plan.used());         run the same sequence for real
// A planning arena hands out views with a null pointer and only counts bytes.
class Arena {
 public:
  static constexpr std::size_t kAlignment = 256;  // cuBLASLt and vector loads like 256

  static Arena planning(DeviceType device);
  Arena() = default;
  Arena(DeviceType device, std::size_t capacity);

  Tensor allocate(Shape shape, DType dtype, const char* what = "tensor");
  void reset() { used_ = 0; }  // every view handed out becomes invalid
  std::size_t used() const { return used_; }
  std::size_t capacity() const { return capacity_; }
  bool is_planning() const { return planning_; }
  DeviceType device() const { return device_; }

 private:
  Buffer buffer_;
  DeviceType device_ = DeviceType::kCpu;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  bool planning_ = false;
};

std::string format_bytes(std::size_t bytes);  // "1.50 GiB"

}  // namespace engine
