// FP8 E4M3 quantisation with per-tensor current scaling (issue 35, step 1):
// the amax of a bf16 tensor, and casts to E4M3 that read it, with or without
// the transposed copy that Hopper's TN-only FP8 GEMM needs for some operands.
//
// One tensor's scaling state is three device floats (Fp8Scale):
//   amax      = max |x|, written by fp8_amax (NaN if x holds a NaN)
//   scale     = 448 / amax (1 if amax is 0 or not finite, FLT_MAX if the
//               division overflows), written by the casts
//   scale_inv = 1 / scale, written by the casts: x ~= e4m3 value * scale_inv,
//               the factor cuBLASLt's A/B scale pointers take (fp8_gemm.h)
// exactly as engine/cpu/fp8_e4m3.h defines them, so the CPU reference matches
// bit for bit. Nothing here synchronises with the host: a training step can
// enqueue amax -> cast -> GEMM without waiting.
//
// Usage per tensor: fp8_amax(x, n, s, stream); then fp8_cast(...) and/or
// fp8_cast_transpose(...) with the same s. The casts work on any GPU (the
// E4M3 conversion is emulated before sm_89); only the GEMM needs FP8 tensor
// cores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace engine::cuda {

// Device pointers to one tensor's scaling state (see above).
struct Fp8Scale {
  float* amax = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
};
// The state laid out in kFp8ScaleFloats consecutive device floats at p.
inline constexpr int kFp8ScaleFloats = 4;  // amax, scale, scale_inv, padding (16 bytes)
inline Fp8Scale fp8_scale_at(float* p) { return {p, p + 1, p + 2}; }

// *s.amax = max_i |x[i]|, i < n (0 for n == 0). Resets *s.amax itself first
// (stream-ordered), then one pass over x: 16-byte loads when x is 16-byte
// aligned, per-block reduction and one atomicMax on the float's bits per block.
// Only s.amax is used (the others may be null).
void fp8_amax(const __nv_bfloat16* x, std::int64_t n, const Fp8Scale& s, cudaStream_t stream);

// q[i] = e4m3(x[i] * scale), i < n, with scale from *s.amax; also writes
// *s.scale and *s.scale_inv. 16-byte loads and 8-byte stores where x is
// 16-byte and q 8-byte aligned, a scalar tail.
void fp8_cast(const __nv_bfloat16* x, std::int64_t n, const Fp8Scale& s, __nv_fp8_e4m3* q, cudaStream_t stream);

// x (rows, cols) row-major -> qt (cols, rows) row-major, qt[c][r] =
// e4m3(x[r][c] * scale), and, when q is not null, q (rows, cols) = the plain
// cast, in the same pass (one read of x for both). Writes *s.scale and
// *s.scale_inv too. 64 x 64 tiles with 16-byte loads and 8-byte stores when
// rows and cols are multiples of 8 and the pointers aligned (GPT shapes);
// otherwise a plain 32 x 32 tile kernel.
void fp8_cast_transpose(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const Fp8Scale& s,
                        __nv_fp8_e4m3* q, __nv_fp8_e4m3* qt, cudaStream_t stream);

}  // namespace engine::cuda
