// Scalar math written so GCC/Clang auto-vectorise the loops that call it.
//
// glibc's expf and tanhf are scalar calls (about 4 ns and 18 ns per element on
// a Zen 3 core); the softmax of attention, the cross-entropy over a 50k vocab
// and GELU call them hundreds of millions of times per GPT-2 step. The float
// exp below inlines into AVX2 code at well under 1 ns per element.
//
// Vectorisation constraints that shaped the code: no floating-point compares
// (with the default -ftrapping-math GCC will not if-convert them), so ranges
// are tested on the bit patterns and selected with masks; floor is done by
// biased truncation.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace engine::cpu {

namespace detail {
inline std::uint32_t select_bits(std::uint32_t mask, std::uint32_t if_set, std::uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}
inline std::uint32_t mask_if(bool condition) { return -static_cast<std::uint32_t>(condition); }
}  // namespace detail

// exp(x) for float: Cephes' expf (S. L. Moshier, Cephes Math Library):
// x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, times 2^n
// built in the exponent bits. Measured max relative error 8e-8 (~1 ulp) on
// [-87.3, 88]. Returns 0 below -87.34 (where e^x leaves the normal range),
// saturates at e^88 above 88 (callers only pass x <= 0, or exp(-2u) in GELU
// where the saturated value still gives the exact float answer), and passes
// NaN through so a diverged run still shows NaN.
inline float fast_exp(float x) {
  using detail::mask_if;
  using detail::select_bits;
  constexpr float kMax = 88.0f, kMin = -87.3365478515625f;
  const std::uint32_t ux = std::bit_cast<std::uint32_t>(x);
  // Negative floats order as unsigned bit patterns, positive ones as signed.
  const std::uint32_t underflow = mask_if(ux > std::bit_cast<std::uint32_t>(kMin));
  const std::uint32_t overflow =
      mask_if(std::bit_cast<std::int32_t>(x) > std::bit_cast<std::int32_t>(kMax));
  const std::uint32_t is_nan = mask_if((ux & 0x7FFFFFFFu) > 0x7F800000u);
  std::uint32_t clamped = select_bits(underflow, std::bit_cast<std::uint32_t>(kMin), ux);
  clamped = select_bits(overflow, std::bit_cast<std::uint32_t>(kMax), clamped);
  const float xc = std::bit_cast<float>(clamped);

  // n = floor(x / ln2 + 1/2); the +128 bias makes truncation equal floor.
  const std::int32_t n = static_cast<std::int32_t>(xc * 1.44269504088896341f + 128.5f) - 128;
  const float fn = static_cast<float>(n);
  // r = x - n ln2, with ln2 split in two (0.693359375 is exact in 11 bits).
  const float r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * (r * r) + r + 1.0f;
  const float two_n = std::bit_cast<float>(static_cast<std::uint32_t>(n + 127) << 23);
  const std::uint32_t result = std::bit_cast<std::uint32_t>(e_r * two_n);
  return std::bit_cast<float>(select_bits(is_nan, ux, result & ~underflow));
}

// The f64 path is the reference: exact libm.
inline double fast_exp(double x) { return std::exp(x); }

}  // namespace engine::cpu
