#include "engine/cuda/host_signal.h"

#include <cuda.h>  // driver types only: the functions come through cudaGetDriverEntryPointByVersion

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/cuda/context.h"

namespace engine::cuda {
namespace {

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void wait_for_host_counter_kernel(const volatile std::uint64_t* counter, std::uint64_t value) {
  // Volatile: every iteration reads host memory again, over the bus. The
  // copies queued after this kernel start once it has returned, and read
  // what the host wrote before the counter.
  while (static_cast<std::int64_t>(*counter - value) < 0) __nanosleep(2000);
}

__global__ void delay_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) __nanosleep(1000);
}

using WaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using DeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);

// cuStreamWaitValue64 when this device takes 64-bit stream memory operations
// and the environment does not ask for the kernel; else null. Looked up once.
WaitValue64 stream_wait_value() {
  static WaitValue64 wait = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* choice = std::getenv("ENGINE_NCCL_DOUBLE_WAIT");
    if (choice != nullptr && std::strcmp(choice, "kernel") == 0) return;
    void* wait_fn = nullptr;
    void* attribute_fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &wait_fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &attribute_fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return;
    }
    int device = 0, supported = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    if (reinterpret_cast<DeviceGetAttribute>(attribute_fn)(&supported, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                                           static_cast<CUdevice>(device)) != CUDA_SUCCESS)
      return;
    if (supported != 0) wait = reinterpret_cast<WaitValue64>(wait_fn);
  });
  return wait;
}

}  // namespace

void wait_for_host_counter(const std::uint64_t* counter, std::uint64_t value, cudaStream_t stream) {
  if (WaitValue64 wait = stream_wait_value()) {
    void* device_address = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&device_address, const_cast<std::uint64_t*>(counter), 0));
    const CUresult rc = wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_address),
                             static_cast<cuuint64_t>(value), CU_STREAM_WAIT_VALUE_GEQ);
    ENGINE_CHECK(rc == CUDA_SUCCESS, "cuStreamWaitValue64 failed with CUresult ", static_cast<int>(rc),
                 " (ENGINE_NCCL_DOUBLE_WAIT=kernel waits in a kernel instead)");
    return;
  }
  wait_for_host_counter_kernel<<<1, 1, 0, stream>>>(counter, value);
  CUDA_CHECK_LAUNCH();
}

void delay_stream(std::int64_t nanoseconds, cudaStream_t stream) {
  if (nanoseconds <= 0) return;
  delay_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t>(nanoseconds));
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
