#include "engine/cuda/host_signal.h"

#include "engine/cuda/context.h"

namespace engine::cuda {
namespace {

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void wait_for_host_counter_kernel(const volatile std::uint64_t* counter, std::uint64_t value) {
  // Volatile: every iteration reads host memory again, over the bus.
  while (*counter < value) __nanosleep(2000);
  // What the host wrote before the counter (the staged bytes) is read by the
  // copies after this kernel, which start only once it has returned.
  __threadfence_system();
}

__global__ void delay_kernel(std::uint64_t nanoseconds) {
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) __nanosleep(1000);
}

}  // namespace

void wait_for_host_counter(const std::uint64_t* counter, std::uint64_t value, cudaStream_t stream) {
  wait_for_host_counter_kernel<<<1, 1, 0, stream>>>(counter, value);
  CUDA_CHECK_LAUNCH();
}

void delay_stream(std::int64_t nanoseconds, cudaStream_t stream) {
  if (nanoseconds <= 0) return;
  delay_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t>(nanoseconds));
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
