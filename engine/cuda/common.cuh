// Helpers shared by the CUDA kernels: dtype conversion, warp reductions,
// grid sizing, dtype dispatch and host-side argument checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "engine/check.h"
#include "engine/cuda/context.h"
#include "engine/tensor.h"

namespace engine::cuda {

using bf16 = __nv_bfloat16;

// ---- element access: every kernel computes in f32 ---------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// ---- 16-byte vectors: 8 bf16 or 4 f32 per load and store -------------------
// Memory-bound kernels move 16 bytes per thread per access (a warp then reads
// 512 contiguous bytes per instruction); callers check that the pointers are
// 16-byte aligned and the lengths a multiple of Pack16<T>::kSize.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};
// Host side: elements of `dtype` in one 16-byte pack.
inline std::int64_t pack16_elements(DType dtype) { return 16 / static_cast<std::int64_t>(dtype_size(dtype)); }

template <typename T>
__device__ __forceinline__ Pack16<T> load16(const T* p) {
  Pack16<T> r;
  *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const Pack16<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

// ---- warp reductions (all lanes get the result) ----------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---- GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 uses ------
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// computed as x * s with s = 0.5 (1 + tanh(u)) = sigmoid(2u): no cancellation
// in 1 + tanh(u) for negative x, and the same form as the CPU backend, so the
// fp32 mode matches it tightly. gelu'(x) = s + x s (1 - s) 2 u'(x).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_sigmoid_2u(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));  // exp overflow -> 1/inf = 0, the right limit
}
__device__ __forceinline__ float gelu(float x) { return x * gelu_sigmoid_2u(x); }
__device__ __forceinline__ float gelu_grad(float x) {
  const float s = gelu_sigmoid_2u(x);
  const float dudx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + x * s * (1.0f - s) * 2.0f * dudx;
}

// ---- launch geometry ---------------------------------------------------------
constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU,
// capped so the grid size never depends on anything but n (deterministic
// reductions rely on that).
inline unsigned grid_for(std::int64_t n, int threads = kThreads, std::int64_t max_blocks = 8192) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, max_blocks));
}

inline unsigned ceil_div(std::int64_t a, std::int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// ---- host-side checks ----------------------------------------------------------
inline void expect_cuda(const Tensor& t, const char* what) {
  ENGINE_CHECK(!t.empty() && t.device() == DeviceType::kCuda, what, " must be a cuda tensor, got ",
               t.empty() ? std::string("an empty tensor") : t.describe());
}
inline void expect_float(const Tensor& t, const char* what) {
  ENGINE_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, what, " must be f32 or bf16 on cuda, got ",
               t.describe());
}
inline void expect_f32(const Tensor& t, const char* what) {
  ENGINE_CHECK(t.dtype() == DType::kF32, what, " must be f32, got ", t.describe());
}
inline bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// ---- dtype dispatch ----------------------------------------------------------------
// dispatch_float(dtype, "op: tensor", [&](auto tag) { using T = decltype(tag); ... });
// calls the lambda with float{} or bf16{} and fails clearly for anything else.
template <typename F>
void dispatch_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); return;
    case DType::kBF16: f(bf16{}); return;
    default: ENGINE_FAIL(what, ": dtype ", dtype_name(dtype), " is not supported on cuda (f32 or bf16 only)");
  }
}

}  // namespace engine::cuda
