// What every cuBLASLt call site shares (matmul.cu, fp8_gemm.cu): the
// descriptors of one call, destroyed however the call ends, and the
// alignment class of a pointer that the heuristic must be told about.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "engine/cuda/common.cuh"

namespace engine::cuda {

// Largest power of two (up to 256) dividing the address; 0 for null. The
// heuristic assumes 256-byte aligned matrices unless told otherwise, and
// views into flat buffers may be less aligned.
inline std::uint32_t lt_alignment_of(const void* p) {
  if (p == nullptr) return 0;
  std::uint32_t a = 256;
  while (a > 1 && !aligned(p, a)) a /= 2;
  return a;
}

// RAII for the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace engine::cuda
