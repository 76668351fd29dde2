// bfloat16 <-> float/double conversions on the host.
//
// bf16 is the top half of an IEEE binary32: 1 sign, 8 exponent, 7 mantissa
// bits. Narrowing rounds to nearest, ties to even, as CUDA's __float2bfloat16
// does, so host-written bf16 matches device-written bf16 bit for bit.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace engine::cpu {

using bf16_bits = std::uint16_t;

inline float bf16_to_float(bf16_bits h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

inline bf16_bits float_to_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: keep the sign, force a quiet NaN
    return static_cast<bf16_bits>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest with ties to
  // even; a carry out of the mantissa correctly bumps the exponent (to inf
  // above the largest finite bf16).
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<bf16_bits>((bits + rounding) >> 16);
}

// double -> bf16 in one correct rounding. Going through a nearest-rounded
// float could round twice (a double just above a bf16 tie lands exactly on
// the tie as a float, then ties to even goes the wrong way), so the float
// step rounds to odd instead: truncate, and set the lowest bit if anything
// was lost. Rounding to odd with >= 2 extra bits makes the second rounding
// correct (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
// proved algorithms using rounding to odd", IEEE TC 2008).
inline bf16_bits double_to_bf16(double d) {
  if (std::isnan(d)) return float_to_bf16(static_cast<float>(d));
  float f = static_cast<float>(d);  // nearest
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // now truncated
  if (static_cast<double>(f) != d) f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
  return float_to_bf16(f);
}

}  // namespace engine::cpu
