// E4M3 on the device, bit for bit as engine/cpu/fp8_e4m3.h defines it: the
// per-tensor (or per-block) scale from an amax, the conversion of one value,
// and |x| as ordered bits for exact max reductions. Shared by the casts of
// fp8_cast.cu (per tensor) and fp8_block.cu (per 1 x 128 tile or 128 x 128
// block).
//
// The engine compiles CUDA with --use_fast_math, which makes '/' approximate
// and flushes f32 subnormals to zero. The three operations whose rounding the
// reference fixes are therefore written as PTX without .ftz and with .rn: the
// scale (div.rn.f32), its inverse (rcp.rn.f32) and x * scale (mul.rn.f32).
// The conversion is __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3)
// (cvt.rn.satfinite.e4m3x2.f32 on sm_89+): round to nearest even, saturate
// at +-448, NaN -> 0x7F. bf16 -> f32 is exact (a shift).
//
// For non-negative floats the unsigned order of the bits is the numeric
// order, +inf included, and any NaN (sign cleared) compares above +inf, so a
// max over abs bits is exact, order-free, and NaN wins (fmaxf would drop it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

#include "engine/cuda/common.cuh"

namespace engine::cuda {

constexpr float kE4M3Max = 448.0f;
constexpr unsigned kAbsMask = 0x7FFFFFFFu;
constexpr unsigned kExpMask = 0x7F800000u;

// IEEE-exact f32 arithmetic regardless of --use_fast_math (no .ftz, round to nearest even).
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float rcp_rn(float a) {
  float r;
  asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

// The per-tensor scale for this amax (fp8_cast.h; engine::cpu::e4m3_scale).
__device__ __forceinline__ float scale_from_amax(float amax) {
  const unsigned bits = __float_as_uint(amax);
  if ((bits & kAbsMask) == 0 || (bits & kExpMask) == kExpMask) return 1.0f;  // 0, inf, NaN
  const float scale = div_rn(kE4M3Max, amax);
  return (__float_as_uint(scale) & kAbsMask) == kExpMask ? FLT_MAX : scale;  // overflow -> FLT_MAX
}

__device__ __forceinline__ std::uint8_t to_e4m3(bf16 x, float scale) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(mul_rn(__bfloat162float(x), scale), __NV_SATFINITE,
                                                         __NV_E4M3));
}

// |x| of a bf16 as the bits of the f32 it widens to (exact).
__device__ __forceinline__ unsigned abs_bits(bf16 x) {
  return (static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16) & kAbsMask;
}
// The larger |x| of the two bf16 packed in one 32-bit word, as f32 bits.
__device__ __forceinline__ unsigned abs_bits_pair(unsigned word) {
  return max((word << 16) & kAbsMask, word & 0xFFFF0000u & kAbsMask);
}

}  // namespace engine::cuda
