#include "engine/device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace engine {

#ifndef ENGINE_WITH_CUDA
// CPU-only build: the CUDA entry points say so instead of failing obscurely.
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
void cuda_set_device(int) { ENGINE_FAIL("--device cuda needs an engine built with CUDA (nvcc was not found at configure time)"); }
std::string cuda_device_name(int) { return "none"; }
std::string cuda_pci_bus_id(int) { return "none"; }
std::size_t cuda_free_bytes() { return 0; }
std::size_t cuda_device_memory_bytes(int) { return 0; }
bool cuda_fp8_supported(int, std::string* why) {
  if (why != nullptr) *why = "the engine was built without CUDA";
  return false;
}
bool cuda_fp8_block_scaling_supported(int index, std::string* why) { return cuda_fp8_supported(index, why); }
void* device_malloc(std::size_t) { ENGINE_FAIL("device memory needs an engine built with CUDA"); }
void device_free(void*) {}
void device_synchronize() {}
void set_device_waiter(DeviceWaiter) {}  // nothing to wait for without a GPU

namespace {
std::vector<std::chrono::steady_clock::time_point>& host_marks() {
  static std::vector<std::chrono::steady_clock::time_point> marks;
  return marks;
}
}  // namespace
void timing_marks_reset() { host_marks().clear(); }
int timing_mark() {
  host_marks().push_back(std::chrono::steady_clock::now());
  return static_cast<int>(host_marks().size()) - 1;
}
std::vector<double> timing_marks_elapsed_ms() {
  std::vector<double> ms;
  for (const auto& t : host_marks())
    ms.push_back(std::chrono::duration<double, std::milli>(t - host_marks().front()).count());
  return ms;
}
void* host_staging_malloc(std::size_t bytes, DeviceType device) {
  ENGINE_CHECK(device == DeviceType::kCpu, "page-locked host memory needs an engine built with CUDA");
  void* ptr = bytes ? std::malloc(bytes) : nullptr;
  ENGINE_CHECK(ptr != nullptr || bytes == 0, "out of host memory allocating ", bytes, " bytes");
  return ptr;
}
void host_staging_free(void* ptr, DeviceType) { std::free(ptr); }
void copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                std::size_t bytes) {
  ENGINE_CHECK(dst_device == DeviceType::kCpu && src_device == DeviceType::kCpu,
               "device copies need an engine built with CUDA");
  if (bytes) std::memmove(dst, src, bytes);
}
#endif

double gpu_peak_flops_by_name(const std::string& name) {
  // Dense bf16 tensor-core peaks from the vendors' data sheets (no sparsity).
  struct Entry {
    const char* key;
    double flops;
  };
  static const Entry table[] = {{"H200", 989e12}, {"H100", 989e12}, {"GH200", 989e12},
                                {"A100", 312e12}, {"A10G", 125e12}, {"L40S", 362e12},
                                {"L4", 121e12},   {"B200", 2250e12}};
  for (const Entry& e : table)
    if (name.find(e.key) != std::string::npos) return e.flops;
  return 0.0;
}

}  // namespace engine
