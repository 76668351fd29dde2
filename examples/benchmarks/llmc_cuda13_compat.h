// Pre-included (nvcc -include) when llmc_reference.sh builds llm.c, which is
// not part of the project and is not edited. llm.c at f1e2ace was written for
// CUDA 12: CUDA 13 takes a cudaMemLocation where CUDA 12's cudaMemAdvise took
// a device number, so its managed-memory fallback,
//   cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)
// does not compile. This overload restores the CUDA 12 form (C++ linkage,
// beside the runtime's extern "C" one). Nothing else differs.
#pragma once
#include <cuda_runtime.h>
#if defined(__cplusplus) && defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice, int device) {
  cudaMemLocation location{};
  location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device;
  return cudaMemAdvise(ptr, count, advice, location);
}
#endif
