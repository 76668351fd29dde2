// The E4M3 reference (engine/cpu/fp8_e4m3.h) against the format's definition.
//
// The CUDA FP8 tests trust this quantiser bit for bit, so it is checked here
// against an independent computation: the 256 codes decoded by the definition
// (sign, 4-bit exponent with bias 7, 3-bit mantissa, subnormals at exponent 0,
// S.1111.111 NaN), and for each input the nearest of those values found by
// exhaustive search (ties to the even mantissa, saturation at 448).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/cpu/fp8_e4m3.h"

namespace {

using namespace engine::cpu;

// The definition, written separately from the library's decoder.
double definition_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -magnitude : magnitude;
}

// The code an exhaustive search picks for x: nearest value, ties to the code
// with the even mantissa, |x| > 448 saturating, sign kept for zero.
std::uint8_t nearest_code(float x) {
  if (std::isnan(x)) return 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  int best = -1;
  double best_err = 0;
  static const std::vector<double> values = [] {  // non-negative, non-NaN codes
    std::vector<double> v;
    for (int code = 0; code < 0x7F; ++code) v.push_back(definition_value(code));
    return v;
  }();
  for (int code = 0; code < 0x7F; ++code) {
    const double err = std::fabs(values[code] - a);
    if (best < 0 || err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  if (a > 448.0) best = 0x7E;
  return static_cast<std::uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4M3, DecodesEveryCodeByTheDefinition) {
  for (int code = 0; code < 256; ++code) {
    const double want = definition_value(code);
    const float got = e4m3_to_float(static_cast<std::uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << code;
      EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << "code " << code;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);     // 2^-6, the smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(Fp8E4M3, EveryValueRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(static_cast<std::uint8_t>(code))), code) << "code " << code;
  }
}

TEST(Fp8E4M3, KnownPoints) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(-448.0f), 0xFE);
  EXPECT_EQ(e4m3_from_float(0.001953125f), 0x01);  // 2^-9
  // Ties go to the even mantissa.
  EXPECT_EQ(e4m3_from_float(0.0009765625f), 0x00);     // 2^-10: halfway 0 and 2^-9 -> 0
  EXPECT_EQ(e4m3_from_float(-0.0009765625f), 0x80);    // -> -0
  EXPECT_EQ(e4m3_from_float(0.0029296875f), 0x02);     // 3 * 2^-10: halfway 2^-9 and 2^-8 -> 2^-8
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38);           // halfway 1 and 1.125 -> 1
  EXPECT_EQ(e4m3_from_float(1.1875f), 0x3A);           // halfway 1.125 and 1.25 -> 1.25
  EXPECT_EQ(e4m3_from_float(0.0146484375f), 0x08);     // 7.5 * 2^-9: halfway 7 * 2^-9 and 2^-6 -> 2^-6
  EXPECT_EQ(e4m3_from_float(1.0625f + 1e-7f), 0x39);   // just above the tie -> 1.125
  EXPECT_EQ(e4m3_from_float(240.0f), 0x77);
  // Saturation: beyond 448 (including the 464 tie and infinities) -> 448.
  EXPECT_EQ(e4m3_from_float(449.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
}

TEST(Fp8E4M3, RoundsToTheNearestCodeByExhaustiveSearch) {
  std::vector<float> inputs;
  // Every midpoint between neighbouring codes, and one f32 ulp either side.
  for (int code = 0; code < 0x7E; ++code) {
    const float lo = e4m3_to_float(static_cast<std::uint8_t>(code));
    const float hi = e4m3_to_float(static_cast<std::uint8_t>(code + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in f32
    for (const float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), hi}) {
      inputs.push_back(v);
      inputs.push_back(-v);
    }
  }
  // Log-uniform magnitudes from 2^-14 to 2^10, both signs.
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> log2_magnitude(-14.0, 10.0);
  for (int i = 0; i < 20000; ++i) {
    const float v = static_cast<float>(std::exp2(log2_magnitude(rng)));
    inputs.push_back(i % 2 ? v : -v);
  }
  int failures = 0;
  for (const float x : inputs) {
    const std::uint8_t want = nearest_code(x), got = e4m3_from_float(x);
    if (got != want && ++failures <= 10) ADD_FAILURE() << "x " << x << ": got " << int(got) << ", want " << int(want);
  }
  EXPECT_EQ(failures, 0);
}

// Densely: every 64th f32 from 2^-12 to 480 (about 2 million values, each
// binade of E4M3's range, its subnormals and the saturation edge), both signs.
TEST(Fp8E4M3, RoundsLikeTheSearchAcrossTheWholeRange) {
  int failures = 0;
  const float lo = std::ldexp(1.0f, -12), hi = 480.0f;
  std::uint32_t from, to;
  std::memcpy(&from, &lo, 4);
  std::memcpy(&to, &hi, 4);
  for (std::uint32_t bits = from; bits <= to; bits += 64) {
    float x;
    std::memcpy(&x, &bits, 4);
    for (const float v : {x, -x}) {
      const std::uint8_t want = nearest_code(v), got = e4m3_from_float(v);
      if (got != want && ++failures <= 10) ADD_FAILURE() << "x " << v << ": got " << int(got) << ", want " << int(want);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Fp8E4M3, AmaxAndScale) {
  const float x[] = {0.5f, -3.5f, 2.0f, -0.0f};
  EXPECT_EQ(e4m3_amax(x, 4), 3.5f);
  EXPECT_EQ(e4m3_amax(x, 0), 0.0f);
  const float with_nan[] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  EXPECT_TRUE(std::isnan(e4m3_amax(with_nan, 3)));

  EXPECT_EQ(e4m3_scale(3.5f), 128.0f);   // 448 / 3.5
  EXPECT_EQ(e4m3_scale(448.0f), 1.0f);
  EXPECT_EQ(e4m3_scale(3.0f), 448.0f / 3.0f);
  EXPECT_EQ(e4m3_scale(0.0f), 1.0f);     // an all-zero tensor: any scale works; 1 keeps it harmless
  EXPECT_EQ(e4m3_scale(std::numeric_limits<float>::quiet_NaN()), 1.0f);
  EXPECT_EQ(e4m3_scale(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(e4m3_scale(1e-45f), FLT_MAX);  // 448 / (smallest f32 subnormal) overflows
  EXPECT_EQ(e4m3_scale_inv(128.0f), 0.0078125f);
  EXPECT_EQ(e4m3_scale_inv(e4m3_scale(3.0f)), 1.0f / (448.0f / 3.0f));

  // With the scale, the amax lands exactly on 448.
  std::uint8_t q[4];
  e4m3_quantize(x, 4, e4m3_scale(3.5f), q);
  EXPECT_EQ(q[0], 0x68);  // 64 = 2^6: exponent field 13, mantissa 0
  EXPECT_EQ(q[1], 0xFE);  // -448
  EXPECT_EQ(q[2], 0x78);  // 256 = 2^8: exponent field 15
  EXPECT_EQ(q[3], 0x80);  // -0
  EXPECT_EQ(e4m3_to_float(q[1]) * e4m3_scale_inv(128.0f), -3.5f);
}

TEST(Fp8E4M3, QuantizeTransposeIsTheTransposeOfQuantize) {
  const std::int64_t rows = 5, cols = 7;
  std::vector<float> x(rows * cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(rng);
  const float scale = e4m3_scale(e4m3_amax(x.data(), rows * cols));
  std::vector<std::uint8_t> q(rows * cols), qt(rows * cols);
  e4m3_quantize(x.data(), rows * cols, scale, q.data());
  e4m3_quantize_transpose(x.data(), rows, cols, scale, qt.data());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) EXPECT_EQ(qt[c * rows + r], q[r * cols + c]) << r << ", " << c;
}

// Block scaling: each block quantised under its own block's amax, exactly as
// a tensor of that block alone would be; the edge blocks are what remains.
TEST(Fp8E4M3, BlockImageScalesEachBlockByItsOwnAmax) {
  const std::int64_t rows = 5, cols = 300;  // 1 x 128 tiles: 128, 128, 44 per row
  std::vector<float> x(rows * cols);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < rows * cols; ++i) x[i] = normal(rng) * std::exp2(static_cast<float>(i % 300 / 60));
  for (const auto& [br, bc] : {std::pair<std::int64_t, std::int64_t>{1, 128}, {128, 1}, {2, 128}, {128, 128}}) {
    std::vector<float> image(rows * cols);
    e4m3_block_image(x.data(), rows, cols, br, bc, image.data());
    int failures = 0;
    for (std::int64_t r0 = 0; r0 < rows; r0 += br)
      for (std::int64_t c0 = 0; c0 < cols; c0 += bc) {
        std::vector<float> block;  // the block alone, as a tensor of its own
        for (std::int64_t r = r0; r < std::min(rows, r0 + br); ++r)
          for (std::int64_t c = c0; c < std::min(cols, c0 + bc); ++c) block.push_back(x[r * cols + c]);
        const float scale = e4m3_scale(e4m3_amax(block.data(), static_cast<std::int64_t>(block.size())));
        std::size_t k = 0;
        for (std::int64_t r = r0; r < std::min(rows, r0 + br); ++r)
          for (std::int64_t c = c0; c < std::min(cols, c0 + bc); ++c) {
            const float want = e4m3_to_float(e4m3_from_float(block[k++] * scale)) * e4m3_scale_inv(scale);
            if (image[r * cols + c] != want && ++failures <= 5)
              ADD_FAILURE() << br << " x " << bc << " blocks, element (" << r << ", " << c << "): "
                            << image[r * cols + c] << ", want " << want;
          }
      }
    EXPECT_EQ(failures, 0) << br << " x " << bc;
  }
  // One block over everything is per-tensor scaling.
  std::vector<float> whole(rows * cols);
  e4m3_block_image(x.data(), rows, cols, rows, cols, whole.data());
  const float scale = e4m3_scale(e4m3_amax(x.data(), rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i)
    ASSERT_EQ(whole[i], e4m3_to_float(e4m3_from_float(x[i] * scale)) * e4m3_scale_inv(scale)) << i;
  // A NaN spoils its own block's scale (1: amax not finite) and no other's.
  std::vector<float> spoiled = x, image(rows * cols), clean(rows * cols);
  spoiled[2 * cols + 5] = std::numeric_limits<float>::quiet_NaN();
  e4m3_block_image(spoiled.data(), rows, cols, 1, 128, image.data());
  e4m3_block_image(x.data(), rows, cols, 1, 128, clean.data());
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const bool same_block = i / cols == 2 && i % cols < 128;
    if (!same_block) ASSERT_EQ(image[i], clean[i]) << i;
  }
  EXPECT_TRUE(std::isnan(image[2 * cols + 5]));
  EXPECT_EQ(image[2 * cols + 6], e4m3_to_float(e4m3_from_float(x[2 * cols + 6])));  // scale 1
}

}  // namespace
