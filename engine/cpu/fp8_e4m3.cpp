// The E4M3 reference (fp8_e4m3.h). Written from the format's definition in
// double precision, independent of any CUDA header, so that it can judge the
// CUDA kernels: every quantised value is computed exactly (x / 2^k is exact in
// double for an f32 x) and rounded by hand, ties to even.
#include "engine/cpu/fp8_e4m3.h"

#include <cfloat>
#include <cmath>
#include <limits>

namespace engine::cpu {
namespace {

// Nearest integer to q >= 0, ties to even.
double round_half_even(double q) {
  const double f = std::floor(q);
  const double d = q - f;  // exact: q has at most 53 significant bits and f <= q
  if (d > 0.5) return f + 1.0;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

}  // namespace

float e4m3_to_float(std::uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  // Subnormal: m/8 * 2^-6 = m * 2^-9; normal: (8 + m)/8 * 2^(e-7) = (8 + m) * 2^(e-10).
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), -9) : std::ldexp(static_cast<double>(8 + m), e - 10);
  return static_cast<float>(negative ? -v : v);
}

std::uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return kE4M3NaN;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  std::uint8_t magnitude;
  if (a >= 448.0) {
    magnitude = 0x7E;  // saturate (infinities included)
  } else if (a < std::ldexp(1.0, -6)) {
    // Subnormal range: multiples of 2^-9. A result of 8 is 2^-6, whose code
    // 0x08 is exactly exponent 1, mantissa 0: the encoding carries over.
    magnitude = static_cast<std::uint8_t>(round_half_even(a * 512.0));
  } else {
    int e2 = 0;
    (void)std::frexp(a, &e2);            // a in [2^(e2-1), 2^e2)
    int exponent = e2 - 1;               // -6 .. 8
    double q = round_half_even(std::ldexp(a, 3 - exponent));  // 8 .. 16: steps of 2^(exponent-3)
    if (q == 16.0) {
      q = 8.0;
      ++exponent;
    }
    // a < 448 = 14 * 2^5 keeps (exponent 8, q 15), the NaN code, out of reach.
    magnitude = static_cast<std::uint8_t>(((exponent + 7) << 3) | (static_cast<int>(q) - 8));
  }
  return static_cast<std::uint8_t>(sign | magnitude);
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

void e4m3_quantize_transpose(const float* x, std::int64_t rows, std::int64_t cols, float scale, std::uint8_t* qt) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float scaled = x[r * cols + c] * scale;
      qt[c * rows + r] = e4m3_from_float(scaled);
    }
}

}  // namespace engine::cpu
