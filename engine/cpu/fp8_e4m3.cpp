// The E4M3 reference (fp8_e4m3.h), independent of any CUDA header, so that
// it can judge the CUDA kernels: the decoder from the format's definition,
// the quantiser on the float's bits (exact: it only keeps or rounds mantissa
// bits), both held to an exhaustive nearest-code search by the tests.
#include "engine/cpu/fp8_e4m3.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace engine::cpu {
namespace {

// The value of a code by the format's definition.
float decode(std::uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  // Subnormal: m/8 * 2^-6 = m * 2^-9; normal: (8 + m)/8 * 2^(e-7) = (8 + m) * 2^(e-10).
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), -9) : std::ldexp(static_cast<double>(8 + m), e - 10);
  return static_cast<float>(negative ? -v : v);
}

}  // namespace

float e4m3_to_float(std::uint8_t code) {
  // Every code decoded once (the emulation decodes every operand element).
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = decode(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table[code];
}

std::uint8_t e4m3_from_float(float x) {
  // On the float's bits (this runs for every operand element of the CPU's FP8
  // emulation): the exponent kept, the 23-bit mantissa rounded to 3 bits,
  // ties to even. tests/engine/cpu/test_fp8_e4m3.cpp holds it to an
  // exhaustive nearest-code search over the format's definition.
  if (std::isnan(x)) return kE4M3NaN;
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint8_t sign = (bits >> 24) & 0x80;
  const std::uint32_t magnitude_bits = bits & 0x7FFFFFFF;
  float a;
  std::memcpy(&a, &magnitude_bits, sizeof a);
  if (a >= kE4M3Max) return static_cast<std::uint8_t>(sign | 0x7E);  // saturate (infinities included)
  if (a < 0.015625f) {
    // Subnormal range, below 2^-6: multiples of 2^-9. a * 512 is exact (a
    // power of two), and nearbyint rounds ties to even in the default mode.
    // A result of 8 is 2^-6, whose code 0x08 is exactly exponent 1,
    // mantissa 0: the encoding carries over.
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0f)));
  }
  int exponent = static_cast<int>(magnitude_bits >> 23) - 127;  // -6 .. 8
  const std::uint32_t mantissa = magnitude_bits & 0x7FFFFF;
  std::uint32_t kept = mantissa >> 20;                             // the top 3 bits
  const std::uint32_t dropped = mantissa & 0xFFFFF, half = 0x80000;
  if (dropped > half || (dropped == half && (kept & 1) != 0)) ++kept;
  if (kept == 8) {
    kept = 0;
    ++exponent;
  }
  // a < 448 = 1.75 * 2^8 keeps (exponent 8, mantissa 7), the NaN code, out of reach.
  return static_cast<std::uint8_t>(sign | ((exponent + 7) << 3) | kept);
}

float e4m3_amax(const float* x, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return std::numeric_limits<float>::quiet_NaN();
    if (a > amax) amax = a;
  }
  return amax;
}

float e4m3_scale(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const float scale = kE4M3Max / amax;  // f32 division, correctly rounded (IEEE)
  return std::isinf(scale) ? FLT_MAX : scale;
}

float e4m3_scale_inv(float scale) { return 1.0f / scale; }

void e4m3_quantize(const float* x, std::int64_t n, float scale, std::uint8_t* q) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float scaled = x[i] * scale;  // rounded to f32, as on the GPU
    q[i] = e4m3_from_float(scaled);
  }
}

void e4m3_block_image(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t block_rows,
                      std::int64_t block_cols, float* out) {
  const std::int64_t row_blocks = (rows + block_rows - 1) / block_rows, col_blocks = (cols + block_cols - 1) / block_cols;
#pragma omp parallel for schedule(static) collapse(2) if (rows * cols > 32768)
  for (std::int64_t rb = 0; rb < row_blocks; ++rb)
    for (std::int64_t cb = 0; cb < col_blocks; ++cb) {
      const std::int64_t r0 = rb * block_rows, r1 = std::min(rows, r0 + block_rows);
      const std::int64_t c0 = cb * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;  // NaN if the block holds one, as e4m3_amax's
      for (std::int64_t r = r0; r < r1; ++r) {
        const float row = e4m3_amax(x + r * cols + c0, c1 - c0);
        if (std::isnan(row)) {
          amax = row;
          break;
        }
        amax = std::max(amax, row);
      }
      const float scale = e4m3_scale(amax), scale_inv = e4m3_scale_inv(scale);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          out[r * cols + c] = e4m3_to_float(e4m3_from_float(x[r * cols + c] * scale)) * scale_inv;
    }
}

void e4m3_quantize_transpose(const float* x, std::int64_t rows, std::int64_t cols, float scale, std::uint8_t* qt) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float scaled = x[r * cols + c] * scale;
      qt[c * rows + r] = e4m3_from_float(scaled);
    }
}

}  // namespace engine::cpu
