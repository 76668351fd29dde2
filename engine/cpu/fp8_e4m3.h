// FP8 E4M3 on the CPU: the quantise-dequantise reference that the CUDA FP8
// path (engine/cuda/fp8_cast.cu, fp8_gemm.cu) is tested against bit for bit.
//
// E4M3 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", OCP OFP8):
// 1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits.
//   exponent 1..15: (1 + m/8) * 2^(e-7)        normal, 2^-6 .. 448
//   exponent 0:     (m/8) * 2^-6                subnormal, smallest 2^-9
//   S.1111.111 is NaN (0x7F, 0xFF); there are no infinities, so the largest
//   finite value is 1.75 * 2^8 = 448 (S.1111.110).
// Quantising rounds to nearest, ties to even mantissa, and saturates: any
// finite or infinite value beyond 448 in magnitude becomes +-448 (what CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does); NaN stays NaN.
//
// Per-tensor current scaling (NVIDIA Transformer Engine's "current scaling";
// the amax is of the tensor being cast, not a history):
//   amax      = max |x| over the tensor (NaN if any element is NaN)
//   scale     = 448 / amax in f32, correctly rounded; 1 when amax is 0 or not
//               finite; FLT_MAX when the division overflows (amax tiny)
//   q         = e4m3(x * scale), the product rounded to f32 first
//   scale_inv = 1 / scale in f32, correctly rounded: x ~= q * scale_inv, and
//               the factor cuBLASLt's A/B scale pointers multiply by.
#pragma once

#include <cstdint>

namespace engine::cpu {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr std::uint8_t kE4M3NaN = 0x7F;

// The value of an E4M3 code (NaN for 0x7F and 0xFF; -0.0f for 0x80).
float e4m3_to_float(std::uint8_t code);

// x rounded to the nearest E4M3 value (ties to even), saturating at +-448.
std::uint8_t e4m3_from_float(float x);

// max |x| of n floats, NaN if any is NaN (0 for n == 0).
float e4m3_amax(const float* x, std::int64_t n);

// The per-tensor scale for a tensor of this amax, and its inverse (see above).
float e4m3_scale(float amax);
float e4m3_scale_inv(float scale);

// q[i] = e4m3(x[i] * scale), i < n.
void e4m3_quantize(const float* x, std::int64_t n, float scale, std::uint8_t* q);

// (rows, cols) row-major x -> (cols, rows) row-major qt, qt[c][r] = e4m3(x[r][c] * scale).
void e4m3_quantize_transpose(const float* x, std::int64_t rows, std::int64_t cols, float scale, std::uint8_t* qt);

// Block scaling (DeepSeek-V3 technical report, sec. 3.3.1: activations per
// 1 x 128 tile along the reduction dimension, weights per 128 x 128 block):
// the same rule as above within each block, whose own amax gives its scale.
// x (rows, cols) row-major is cut into blocks of block_rows x block_cols
// starting at (0, 0), those at the right and bottom edges smaller; out (rows,
// cols) = each element's E4M3 image dequantised, e4m3(x * s) * (1 / s) with s
// = e4m3_scale(amax of its block). out may not alias x.
void e4m3_block_image(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t block_rows,
                      std::int64_t block_cols, float* out);

}  // namespace engine::cpu
