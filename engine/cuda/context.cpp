#include "engine/cuda/context.h"

#include <array>
#include <cstdlib>
#include <mutex>

namespace engine::cuda {

std::size_t Context::lt_workspace_bytes_from_env() {
  const char* env = std::getenv("ENGINE_LT_WORKSPACE_MIB");
  if (env == nullptr || *env == '\0') return kLtWorkspaceBytes;
  char* end = nullptr;
  const long mib = std::strtol(env, &end, 10);
  ENGINE_CHECK(*end == '\0' && mib >= 1 && mib <= 4096, "ENGINE_LT_WORKSPACE_MIB='", env,
               "' is not a size in MiB from 1 to 4096");
  return static_cast<std::size_t>(mib) << 20;
}

Context::Context(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device));
  // A *blocking* stream (not cudaStreamNonBlocking): it synchronises with the
  // legacy default stream, so plain cudaMemcpy calls made elsewhere (tests,
  // other libraries) stay ordered with our kernels. Streams that should
  // overlap with compute (communication) are created non-blocking by their
  // owners and ordered with events.
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
  CUBLAS_CHECK(cublasLtCreate(&lt_));
  CUBLAS_CHECK(cublasCreate(&blas_));
  lt_workspace_ = Buffer(DeviceType::kCuda, lt_workspace_bytes_from_env());
  CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  CUBLAS_CHECK(cublasSetWorkspace(blas_, lt_workspace_.data(), lt_workspace_.bytes()));
  // Plain fp32 GEMMs must stay fp32 (no TF32): the fp32 mode exists to match
  // the CPU backend tightly.
  CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));

  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  sm_count_ = props.multiProcessorCount;
  max_smem_optin_ = props.sharedMemPerBlockOptin;
}

void Context::set_stream(cudaStream_t stream) {
  stream_ = stream;
  CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  CUBLAS_CHECK(cublasSetWorkspace(blas_, lt_workspace_.data(), lt_workspace_.bytes()));
}

void* Context::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Stream-ordered on the compute stream, the only one that uses scratch:
    // the old region is released once the kernels queued before this call
    // have run, and neither the host nor the device waits. A cudaFree here
    // would synchronise the whole device in the middle of a step, NCCL's
    // collectives on the communication streams included, which then wait
    // for peers that may be waiting for this rank (issue 34). Rounded up to
    // 1 MiB so small increases do not regrow.
    if (scratch_ != nullptr) {
      CUDA_CHECK(cudaFreeAsync(scratch_, stream_));
      count_release(DeviceType::kCuda, scratch_bytes_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    const std::size_t rounded = (bytes + (1u << 20) - 1) / (1u << 20) * (1u << 20);
    const cudaError_t rc = cudaMallocAsync(&scratch_, rounded, stream_);
    ENGINE_CHECK(rc == cudaSuccess, "out of GPU memory: ", format_bytes(rounded), " of op scratch (",
                 cudaGetErrorString(rc), ")");
    scratch_bytes_ = rounded;
    count_allocation(DeviceType::kCuda, rounded);
  }
  return scratch_;
}

Context& context() {
  constexpr int kMaxDevices = 64;
  static std::array<Context*, kMaxDevices> contexts{};
  static std::mutex mutex;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  ENGINE_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " is outside [0, ",
               kMaxDevices, ")");
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts[device] == nullptr) contexts[device] = new Context(device);  // never freed, see context.h
  return *contexts[device];
}

}  // namespace engine::cuda
