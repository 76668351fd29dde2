// The single-process pieces of the 1-bit compressed all-reduce: sign packing
// (bit layout, padding, round trips), the two compression scales against a
// double-precision recomputation, the error identity of one compression, and
// independence from the OpenMP thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/rng.h"
#include "parallel/compressed_allreduce.h"

using parallel::CompressionScale;

namespace {

// Values in +-[0.05, 1.05): never zero, so every sign is unambiguous.
std::vector<float> nonzero_values(std::int64_t count, std::uint64_t seed) {
  const std::uint64_t key = engine::rng_key(seed, "compressed_allreduce_cpu");
  std::vector<float> v(count);
  for (std::int64_t i = 0; i < count; ++i) {
    const double magnitude = 0.05 + engine::uniform01(key, 2 * i);
    v[i] = static_cast<float>(engine::uniform01(key, 2 * i + 1) < 0.5 ? -magnitude : magnitude);
  }
  return v;
}

const std::int64_t kCounts[] = {1, 31, 32, 33, 64, 1000, 100003};

TEST(SignPacking, BitLayoutIsLittleEndianWithinWords) {
  // Element 32w + k is bit k of word w; set means non-negative.
  std::vector<float> v(40, -1.0f);
  v[0] = 2.0f;
  v[5] = 0.5f;
  v[31] = 1.0f;
  v[33] = 3.0f;
  std::vector<std::uint32_t> words(parallel::packed_sign_words(40));
  ASSERT_EQ(words.size(), 2u);
  parallel::pack_signs(v, words);
  EXPECT_EQ(words[0], (1u << 0) | (1u << 5) | (1u << 31));
  EXPECT_EQ(words[1], 1u << 1);  // bits past element 39 are 0
}

TEST(SignPacking, ZeroAndNegativeZeroArePositive) {
  // Like DeepSpeed's sign().add_(1).bool(): 0 maps to +1, so a zero momentum
  // is sent as +scale (and its error -scale is fed back next call).
  const std::vector<float> v = {0.0f, -0.0f, -1e-30f, 1e-30f};
  std::vector<std::uint32_t> words(1);
  parallel::pack_signs(v, words);
  EXPECT_EQ(words[0], 0b1011u);
}

TEST(SignPacking, RoundTripReproducesSigns) {
  for (std::int64_t count : kCounts) {
    SCOPED_TRACE(count);
    const std::vector<float> v = nonzero_values(count, 7);
    std::vector<std::uint32_t> words(parallel::packed_sign_words(count));
    parallel::pack_signs(v, words);
    std::vector<float> out(count);
    parallel::unpack_signs(words, 0.25f, out);
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(out[i], v[i] >= 0 ? 0.25f : -0.25f) << "element " << i;
    // Padding bits of the last word are zero (messages are deterministic).
    if (count % 32 != 0) EXPECT_EQ(words.back() >> (count % 32), 0u);
  }
}

TEST(SignPacking, WrongWordCountThrows) {
  std::vector<float> v(33, 1.0f);
  std::vector<std::uint32_t> words(1);
  EXPECT_THROW(parallel::pack_signs(v, words), engine::Error);
  std::vector<float> out(33);
  EXPECT_THROW(parallel::unpack_signs(words, 1.0f, out), engine::Error);
}

TEST(CompressionScale, MatchesDoubleRecomputation) {
  for (std::int64_t count : kCounts) {
    SCOPED_TRACE(count);
    const std::vector<float> v = nonzero_values(count, 11);
    double sq = 0, abs = 0;
    for (float x : v) {
      sq += static_cast<double>(x) * x;
      abs += std::fabs(static_cast<double>(x));
    }
    // The implementation accumulates in double too, in another order; the
    // results differ by ~1e-16 relative and then round to the same float
    // (or a neighbour): 1 float ulp relative is the tolerance.
    const double rms = std::sqrt(sq / count), mean_abs = abs / count;
    EXPECT_NEAR(parallel::compression_scale(v, CompressionScale::kRms), rms, rms * 1.2e-7);
    EXPECT_NEAR(parallel::compression_scale(v, CompressionScale::kMeanAbs), mean_abs, mean_abs * 1.2e-7);
  }
  EXPECT_EQ(parallel::compression_scale(std::span<const float>(), CompressionScale::kRms), 0.0f);
}

TEST(CompressWithError, ErrorIsValueMinusReconstruction) {
  for (CompressionScale kind : {CompressionScale::kRms, CompressionScale::kMeanAbs}) {
    for (std::int64_t count : kCounts) {
      SCOPED_TRACE(std::string(parallel::compression_scale_name(kind)) + " x " + std::to_string(count));
      const std::vector<float> v = nonzero_values(count, 13);
      std::vector<float> e = v;
      std::vector<std::uint32_t> words(parallel::packed_sign_words(count));
      const float scale = parallel::compress_with_error(e, words, kind);
      EXPECT_EQ(scale, parallel::compression_scale(v, kind));
      std::vector<float> r(count);
      parallel::unpack_signs(words, scale, r);
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(r[i] > 0, v[i] >= 0) << "element " << i;
        // e = fl(v - r): the exact difference rounded once, so exact in float.
        ASSERT_EQ(e[i], v[i] - r[i]) << "element " << i;
      }
      if (kind == CompressionScale::kMeanAbs) {
        // The least-squares scale leaves an error orthogonal to the signs:
        // sum_i e_i sign_i = sum |v| - n * mean|v| = 0 (up to rounding).
        double dot = 0, norm = 0;
        for (std::int64_t i = 0; i < count; ++i) {
          dot += static_cast<double>(e[i]) * (v[i] >= 0 ? 1 : -1);
          norm += std::fabs(static_cast<double>(v[i]));
        }
        EXPECT_NEAR(dot, 0.0, 1e-6 * norm);
      }
    }
  }
}

TEST(CompressWithError, SameBitsWhateverTheThreadCount) {
  const std::int64_t count = 300007;  // many norm blocks and parallel loops
  const std::vector<float> v = nonzero_values(count, 17);
  const int threads_before = omp_get_max_threads();
  std::vector<std::vector<float>> errors;
  std::vector<std::vector<std::uint32_t>> words;
  std::vector<float> scales;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    errors.push_back(v);
    words.emplace_back(parallel::packed_sign_words(count));
    scales.push_back(parallel::compress_with_error(errors.back(), words.back(), CompressionScale::kRms));
  }
  omp_set_num_threads(threads_before);
  for (std::size_t t = 1; t < scales.size(); ++t) {
    EXPECT_EQ(scales[t], scales[0]);
    EXPECT_EQ(words[t], words[0]);
    EXPECT_EQ(errors[t], errors[0]);
  }
}

}  // namespace
