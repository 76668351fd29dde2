// The CUDA backend's per-device state: the stream every op launches on, one
// cuBLASLt handle (plus a cuBLAS handle for the rare fallback), a fixed
// cuBLASLt workspace, and a grow-only scratch area for kernels that need
// temporary device memory (attention's dQ accumulator, embedding sort keys,
// reduction partials, dtype staging).
//
// Memory rule (ARCHITECTURE.md: the step loop never allocates): the cuBLASLt
// workspace is allocated once, when the context is created. Scratch is grown
// only when an op asks for more than it has ever asked for before. A training
// step asks for the same sizes every step, so scratch only grows during the
// first step; from then on no op allocates. A growth is stream-ordered
// (cudaFreeAsync/cudaMallocAsync): it never synchronises the device. Both
// count in memory_stats(kCuda) like any other allocation.
//
// Lifetime: one Context per device, created on first use and intentionally
// never destroyed (destroying CUDA objects during static destruction races
// the CUDA runtime's own teardown).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/buffer.h"
#include "engine/check.h"

// CUDA_CHECK(call): throws engine::Error naming the call, the CUDA error and
// the file:line of the call site.
#define CUDA_CHECK(expr)                                                                        \
  do {                                                                                          \
    const cudaError_t engine_cuda_err_ = (expr);                                                \
    if (engine_cuda_err_ != cudaSuccess) [[unlikely]]                                           \
      ENGINE_FAIL("CUDA error ", cudaGetErrorName(engine_cuda_err_), " (",                      \
                  cudaGetErrorString(engine_cuda_err_), ") in ", #expr);                        \
  } while (0)

// CUBLAS_CHECK(call): same for cuBLAS and cuBLASLt status codes.
#define CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                          \
    const cublasStatus_t engine_cublas_st_ = (expr);                                            \
    if (engine_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                \
      ENGINE_FAIL("cuBLAS error ", cublasGetStatusName(engine_cublas_st_), " (",                \
                  cublasGetStatusString(engine_cublas_st_), ") in ", #expr);                    \
  } while (0)

// CUDA_CHECK_LAUNCH(): after a <<<...>>> launch, turns a bad launch
// configuration into an engine::Error at the launch site. (Faults inside the
// kernel surface at the next synchronising call.)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace engine::cuda {

class Context {
 public:
  // cuBLASLt's recommended workspace on Hopper is 32 MiB. The heuristic
  // offers only algorithms that fit the workspace, and split-K's partial
  // products of the weight-gradient GEMMs (K = tokens, a small output: 1600 x
  // 1600 floats are 10 MiB a split at gpt2-1558m) outgrow 32 MiB quickly, so
  // ENGINE_LT_WORKSPACE_MIB (1 to 4096) sets another size for the speed
  // experiments of issue 34; lt_workspace_bytes_from_env() reads it.
  static constexpr std::size_t kLtWorkspaceBytes = 32u << 20;
  static std::size_t lt_workspace_bytes_from_env();

  explicit Context(int device);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Makes every later op of this device launch on `stream` (e.g. a stream the
  // caller captures into a CUDA graph). The caller keeps ownership.
  void set_stream(cudaStream_t stream);

  cublasLtHandle_t lt() const { return lt_; }
  cublasHandle_t blas() const { return blas_; }
  void* lt_workspace() const { return lt_workspace_.data(); }
  std::size_t lt_workspace_bytes() const { return lt_workspace_.bytes(); }

  // At least `bytes` of device scratch, 256-byte aligned. The pointer stays
  // valid until the next scratch() call; ops carve one call's region into the
  // pieces they need. Growing synchronises the stream first (the old region
  // may still be in use by queued kernels), so it must not happen while a
  // CUDA graph is being captured: run one step before capturing.
  void* scratch(std::size_t bytes);
  std::size_t scratch_bytes() const { return scratch_bytes_; }

  int sm_count() const { return sm_count_; }
  std::size_t max_shared_memory_per_block() const { return max_smem_optin_; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Buffer lt_workspace_;
  void* scratch_ = nullptr;  // cudaMallocAsync on stream_, counted in memory_stats(kCuda)
  std::size_t scratch_bytes_ = 0;
  int sm_count_ = 0;
  std::size_t max_smem_optin_ = 0;
};

// The context of the current device (cudaGetDevice), created on first use.
Context& context();
inline cudaStream_t current_stream() { return context().stream(); }

// Carves consecutive 256-byte aligned pieces out of one scratch region:
//   ScratchPlan plan; auto a = plan.add(n1); auto b = plan.add(n2);
//   char* base = plan.allocate();  ... base + a, base + b
class ScratchPlan {
 public:
  std::size_t add(std::size_t bytes) {
    const std::size_t offset = used_;
    used_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  std::size_t bytes() const { return used_; }
  char* allocate() const { return static_cast<char*>(context().scratch(used_)); }

 private:
  std::size_t used_ = 0;
};

}  // namespace engine::cuda
