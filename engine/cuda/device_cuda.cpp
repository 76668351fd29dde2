// The CUDA build's device entry points (engine/device.h). The CPU-only build's
// versions live in engine/device.cpp under #ifndef ENGINE_WITH_CUDA.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/cuda/context.h"
#include "engine/cuda/fp8_gemm.h"
#include "engine/device.h"

namespace engine {

namespace {
// Set once this process selects a GPU or allocates device memory.
std::atomic<bool> g_cuda_in_use{false};
bool cuda_in_use() { return g_cuda_in_use.load(std::memory_order_relaxed); }
}  // namespace

bool built_with_cuda() { return true; }

int cuda_device_count() {
  // Must not throw: "no driver" or "no device" simply means zero GPUs (tests
  // skip, the launcher falls back to the CPU).
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    return 0;
  }
  return count;
}

void cuda_set_device(int index) {
  g_cuda_in_use.store(true);
  const int count = cuda_device_count();
  ENGINE_CHECK(index >= 0 && index < count, "cuda device ", index, " does not exist: ", count,
               " device(s) visible");
  CUDA_CHECK(cudaSetDevice(index));
}

std::string cuda_device_name(int index) {
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, index));
  return props.name;
}

bool cuda_fp8_supported(int index, std::string* why) { return cuda::fp8_device_supported(index, why); }
bool cuda_fp8_block_scaling_supported(int index, std::string* why) {
  return cuda::fp8_block_scaling_supported(index, why);
}

std::string cuda_pci_bus_id(int index) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof(id), index));
  return id;
}

std::size_t cuda_free_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

std::size_t cuda_device_memory_bytes(int index) {
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, index));
  return props.totalGlobalMem;
}

void* device_malloc(std::size_t bytes) {
  g_cuda_in_use.store(true);
  void* ptr = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    ENGINE_FAIL("cudaMalloc of ", format_bytes(bytes), " failed (", cudaGetErrorString(err), "); ",
                format_bytes(free_bytes), " free of ", format_bytes(total_bytes));
  }
  return ptr;
}

void device_free(void* ptr) {
  // Never throws (called from destructors). cudaFree synchronises the device.
  if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

void* host_staging_malloc(std::size_t bytes, DeviceType device) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  if (device == DeviceType::kCuda) {
    const cudaError_t err = cudaMallocHost(&ptr, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      ENGINE_FAIL("cudaMallocHost of ", format_bytes(bytes), " (page-locked host memory) failed: ",
                  cudaGetErrorString(err));
    }
    return ptr;
  }
  ptr = std::malloc(bytes);
  ENGINE_CHECK(ptr != nullptr, "out of host memory allocating ", format_bytes(bytes));
  return ptr;
}

void host_staging_free(void* ptr, DeviceType device) {
  if (ptr == nullptr) return;
  if (device != DeviceType::kCuda) {
    std::free(ptr);
    return;
  }
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();  // never throws (destructors)
}

namespace {
// The installed waiter and the thread that installed it (set_device_waiter).
std::mutex g_waiter_mutex;
DeviceWaiter g_waiter;
std::thread::id g_waiter_thread;

DeviceWaiter waiter_for_this_thread() {
  std::lock_guard<std::mutex> lock(g_waiter_mutex);
  return g_waiter && std::this_thread::get_id() == g_waiter_thread ? g_waiter : DeviceWaiter{};
}

// Returns once the work queued on `stream` so far has run: through the
// waiter, polling an event behind it, when one is installed for this thread.
// The caller then synchronises as before, which no longer blocks on that work.
void wait_for_stream(cudaStream_t stream, const char* what) {
  const DeviceWaiter waiter = waiter_for_this_thread();
  if (!waiter) return;
  cudaEvent_t done = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  struct Destroy {
    cudaEvent_t e;
    ~Destroy() { cudaEventDestroy(e); }
  } destroy{done};
  CUDA_CHECK(cudaEventRecord(done, stream));
  waiter(
      [done] {
        const cudaError_t rc = cudaEventQuery(done);
        if (rc == cudaErrorNotReady) {
          (void)cudaGetLastError();  // the runtime records "not ready" as the last error; a later launch check must not see it
          return false;
        }
        CUDA_CHECK(rc);
        return true;
      },
      what);
}
}  // namespace

void set_device_waiter(DeviceWaiter waiter) {
  std::lock_guard<std::mutex> lock(g_waiter_mutex);
  g_waiter = std::move(waiter);
  g_waiter_thread = std::this_thread::get_id();
}

void device_synchronize() {
  // A CPU run of a CUDA build never touches the driver (there may be none):
  // only a process that has used a GPU synchronises one. The compute stream
  // is waited for through the waiter, if any; other streams' work (the
  // communicators') is behind it wherever a result was waited for.
  if (!cuda_in_use()) return;
  wait_for_stream(cuda::current_stream(), "device synchronisation");
  CUDA_CHECK(cudaDeviceSynchronize());
}

namespace {
// The timeline's marks. Events are created on first need and kept for later
// timelines (creating one costs a driver call; a gpt2-1558m step records tens
// of thousands). Timing events (no cudaEventDisableTiming) on the stream the
// ops launch on.
struct TimingMarks {
  bool on_gpu = false;
  int used = 0;
  std::vector<cudaEvent_t> events;
  std::vector<std::chrono::steady_clock::time_point> host;
};
TimingMarks& timing_marks() {
  static TimingMarks marks;
  return marks;
}
}  // namespace

void timing_marks_reset() {
  TimingMarks& m = timing_marks();
  m.on_gpu = cuda_in_use();
  m.used = 0;
  m.host.clear();
}

int timing_mark() {
  TimingMarks& m = timing_marks();
  if (!m.on_gpu) {
    m.host.push_back(std::chrono::steady_clock::now());
    return static_cast<int>(m.host.size()) - 1;
  }
  if (m.used == static_cast<int>(m.events.size())) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreate(&event) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    m.events.push_back(event);
  }
  if (cudaEventRecord(m.events[m.used], cuda::current_stream()) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return m.used++;
}

std::vector<double> timing_marks_elapsed_ms() {
  TimingMarks& m = timing_marks();
  std::vector<double> ms;
  if (!m.on_gpu) {
    for (const auto& t : m.host) ms.push_back(std::chrono::duration<double, std::milli>(t - m.host.front()).count());
    return ms;
  }
  if (m.used == 0) return ms;
  CUDA_CHECK(cudaEventSynchronize(m.events[m.used - 1]));
  ms.reserve(m.used);
  for (int i = 0; i < m.used; ++i) {
    float elapsed = 0;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, m.events[0], m.events[i]));
    ms.push_back(elapsed);
  }
  return ms;
}

void copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == DeviceType::kCpu && src_device == DeviceType::kCpu) {
    std::memmove(dst, src, bytes);
    return;
  }
  // Queued on the backend's stream so the copy is ordered after the kernels
  // that produced `src`; cudaMemcpyDefault lets unified addressing work out
  // the direction. A copy that touches host memory returns only once the
  // host side is safe to use.
  cudaStream_t stream = cuda::current_stream();
  const bool touches_host = dst_device == DeviceType::kCpu || src_device == DeviceType::kCpu;
  // Before the copy: one with pageable host memory returns only once it is
  // done, so it would block behind the queued work inside the driver.
  if (touches_host) wait_for_stream(stream, "copy between device and host");
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (touches_host) CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace engine
