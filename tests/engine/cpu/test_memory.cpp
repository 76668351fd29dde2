// fill, copy (dtype conversions), scale, add, accumulate, sum_of_squares.
#include <omp.h>

#include <cstring>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

template <typename T>
class CpuElementwise : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuElementwise, FloatTypes);

// Sizes below and above the threshold where the loops go parallel.
constexpr std::int64_t kSizes[] = {37, 40000};

// Each result is one correctly rounded operation, so T(double reference) is
// exact: double has more than 2p + 2 bits of a float's p, so rounding twice
// cannot differ from rounding once (Figueroa, "When is double rounding
// innocuous?", SIGNUM 1995). Hence tolerance 0.
TYPED_TEST(CpuElementwise, ScaleAddAccumulateMatchReference) {
  using T = TypeParam;
  for (std::int64_t n : kSizes) {
    const auto a_ref = random_values(n, 1), b_ref = random_values(n, 2);
    std::vector<T> a = cast_to<T>(a_ref), b = cast_to<T>(b_ref), out(n);

    ops::add(view(out, {n}), view(a, {n}), view(b, {n}));
    std::vector<double> expected(n);
    for (std::int64_t i = 0; i < n; ++i) expected[i] = static_cast<T>(double(a[i]) + double(b[i]));
    expect_all_close(out, expected, 0, 0, "add");

    ops::add(view(a, {n}), view(a, {n}), view(b, {n}));  // out aliases a
    expect_all_close(a, expected, 0, 0, "add in place");

    ops::accumulate(view(a, {n}), view(b, {n}));
    for (std::int64_t i = 0; i < n; ++i) expected[i] = static_cast<T>(expected[i] + double(b[i]));
    expect_all_close(a, expected, 0, 0, "accumulate");

    ops::scale(view(a, {n}), 0.375);
    for (std::int64_t i = 0; i < n; ++i) expected[i] = static_cast<T>(expected[i] * 0.375);
    expect_all_close(a, expected, 0, 0, "scale");
  }
}

TYPED_TEST(CpuElementwise, SumOfSquaresMatchesReference) {
  using T = TypeParam;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{100003}}) {
    std::vector<T> x = cast_to<T>(random_values(n, 3, -2, 2));
    double expected = 0;
    for (T v : x) expected += double(v) * double(v);
    // Accumulated in double over <= 1e5 terms: relative error <= n * 1.1e-16.
    EXPECT_NEAR(ops::sum_of_squares(view(x, {n})), expected, 1e-11 * expected) << "n=" << n;
  }
}

TEST(CpuMemory, SumOfSquaresIsIndependentOfThreadCount) {
  std::vector<float> x = cast_to<float>(random_values(200001, 4));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = ops::sum_of_squares(view(x, {200001}));
  omp_set_num_threads(2);
  const double two = ops::sum_of_squares(view(x, {200001}));
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);  // bitwise: fixed chunks, summed in order
}

TEST(CpuMemory, SumOfSquaresOfBf16) {
  std::vector<std::uint16_t> x = {0x3F80, 0xC000, 0x3F00};  // 1, -2, 0.5
  EXPECT_EQ(ops::sum_of_squares(view(x, {3})), 5.25);
}

TEST(CpuMemory, FillEveryDtype) {
  std::vector<float> f(5);
  std::vector<double> d(5);
  std::vector<std::uint16_t> h(5);
  std::vector<std::int32_t> i(5);
  ops::fill(view(f, {5}), 1.5);
  ops::fill(view(d, {5}), -0.1);
  ops::fill(view(h, {5}), 3.0);
  ops::fill(view(i, {5}), -7);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(f[k], 1.5f);
    EXPECT_EQ(d[k], -0.1);
    EXPECT_EQ(h[k], 0x4040);  // 3.0 in bf16
    EXPECT_EQ(i[k], -7);
  }
  EXPECT_THROW(ops::fill(view(i, {5}), 0.5), Error);
}

TEST(CpuMemory, CopyConvertsBetweenFloatTypes) {
  const std::int64_t n = 40000;  // parallel path
  const auto ref = random_values(n, 5, -100, 100);
  std::vector<double> d = ref, d2(n);
  std::vector<float> f(n), f2(n);
  std::vector<std::uint16_t> h(n), h2(n);

  ops::copy(view(f, {n}), view(d, {n}));  // f64 -> f32: nearest
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(f[i], static_cast<float>(ref[i])) << i;
  ops::copy(view(d2, {n}), view(f, {n}));  // f32 -> f64: exact
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(d2[i], double(f[i])) << i;

  ops::copy(view(h, {n}), view(f, {n}));  // f32 -> bf16
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], reference_bf16(f[i])) << "f32 " << f[i];
  ops::copy(view(h2, {n}), view(d, {n}));  // f64 -> bf16: one rounding, not two
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(h2[i], reference_bf16(d[i])) << "f64 " << d[i];

  ops::copy(view(f2, {n}), view(h, {n}));  // bf16 -> f32: exact
  ops::copy(view(d2, {n}), view(h, {n}));  // bf16 -> f64: exact
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f2[i], bf16_bits_to_double(h[i]));
    ASSERT_EQ(d2[i], bf16_bits_to_double(h[i]));
  }

  std::vector<float> same(n);  // same dtype: a plain copy
  ops::copy(view(same, {n}), view(f, {n}));
  EXPECT_EQ(std::memcmp(same.data(), f.data(), n * sizeof(float)), 0);
}

TEST(CpuMemory, Bf16RoundingEdgeCases) {
  auto from_bits = [](std::uint32_t b) { return std::bit_cast<float>(b); };
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f = {
      1.0f,
      from_bits(0x3F808000),  // exactly between 0x3F80 and 0x3F81: ties to even, down
      from_bits(0x3F818000),  // exactly between 0x3F81 and 0x3F82: ties to even, up
      from_bits(0x3F808001),  // just above the tie: up
      inf, -inf,
      std::numeric_limits<float>::max(),  // above the largest bf16's half ulp: inf
      from_bits(0x00000001),              // tiniest subnormal: 0
      -0.0f,
      std::numeric_limits<float>::quiet_NaN()};
  const std::vector<std::uint16_t> expected = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80, 0x7F80, 0x0000, 0x8000};
  std::vector<std::uint16_t> h(f.size());
  ops::copy(view(h, {std::int64_t(f.size())}), view(f, {std::int64_t(f.size())}));
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(h[i], expected[i]) << "element " << i;
  EXPECT_TRUE(std::isnan(bf16_bits_to_double(h.back())));

  // f64 just above a bf16 tie: the nearest float IS the tie (1 + 2^-8), so
  // double -> float -> bf16 would round down to 1; one correct rounding goes up.
  std::vector<double> d = {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -8),
                           1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)};
  std::vector<std::uint16_t> hd(3);
  ops::copy(view(hd, {3}), view(d, {3}));
  EXPECT_EQ(hd[0], 0x3F81);
  EXPECT_EQ(hd[1], 0x3F80);
  EXPECT_EQ(hd[2], 0x3F80);
}

TEST(CpuMemory, CopyIntegersOnlyToIntegers) {
  std::vector<std::int32_t> a = {1, -2, 3}, b(3);
  std::vector<float> f(3);
  ops::copy(view(b, {3}), view(a, {3}));
  EXPECT_EQ(a, b);
  EXPECT_THROW(ops::copy(view(f, {3}), view(a, {3})), Error);
  EXPECT_THROW(ops::copy(view(a, {3}), view(f, {3})), Error);
}

}  // namespace
