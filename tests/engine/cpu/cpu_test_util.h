// Helpers for the CPU op tests: tensors over std::vector, seeded random
// values, tolerance checks that name the failing element, and a central
// finite-difference gradient.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace engine::test {

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, std::uint16_t>) return DType::kBF16;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::kI32;
}

// A CPU tensor viewing `v` (which must outlive it).
template <typename T>
Tensor view(std::vector<T>& v, Shape shape) {
  EXPECT_EQ(static_cast<std::int64_t>(v.size()), shape.numel());
  return Tensor(v.data(), shape, dtype_of<T>(), DeviceType::kCpu);
}

// Uniform values in [lo, hi), reproducible from `seed`.
inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(n);
  for (double& x : out) x = dist(gen);
  return out;
}

template <typename T>
std::vector<T> cast_to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// |actual - expected| <= atol + rtol * |expected| for every element; reports
// the first few failures by index.
template <typename T>
void expect_all_close(const std::vector<T>& actual, const std::vector<double>& expected, double rtol, double atol,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]), e = expected[i];
    const bool ok = std::fabs(a - e) <= atol + rtol * std::fabs(e);  // false for NaN
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << a << ", expected " << e << " (diff " << a - e
                    << ", rtol " << rtol << ", atol " << atol << ")";
  }
}

// The tolerance pair each precision is checked with against a double reference.
struct Tolerance {
  double rtol, atol;
};
// f32 kernels vs an exact double reference: f32 has a 6e-8 unit roundoff; the
// ops here sum at most a few hundred terms of magnitude <= ~10 (BLAS with FMA,
// double accumulation in the row reductions), so errors stay near 1e-6 of
// the values' scale. 1e-5 leaves a margin yet catches any real bug (a wrong
// index or missing term is O(1e-2) or worse).
// f64 kernels: the same sums at 1e-16 unit roundoff; 1e-12 leaves 1e3x margin.
template <typename T>
constexpr Tolerance reference_tolerance() {
  if constexpr (std::is_same_v<T, float>) return {1e-5, 1e-5};
  return {1e-12, 1e-12};
}

// Central differences dL/dx[i] = (L(x + h e_i) - L(x - h e_i)) / 2h for every
// element of x, perturbing x in place (x is restored). With h = 1e-5 in double
// the truncation error is O(h^2 L''') ~ 1e-10 and the roundoff
// O(eps |L| / h) ~ 1e-11 |L|, far below the 1e-6 the tests allow.
inline std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                            double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

// Analytic vs numeric gradients: relative 1e-6 (see numeric_gradient), with
// an absolute floor of 1e-8 for entries that are zero analytically.
inline void expect_gradient_matches(const std::vector<double>& analytic, const std::vector<double>& numeric,
                                    const std::string& what) {
  expect_all_close(analytic, numeric, 1e-6, 1e-8, what + " vs finite differences");
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Independent bf16 reference: pick the nearer of the two bf16 neighbours of
// x (ties to the even one), computed in double rather than by bit tricks.
inline double bf16_bits_to_double(std::uint16_t h) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16));
}
inline std::uint16_t reference_bf16(double x) {
  if (std::isnan(x)) return 0x7FC0;
  float toward_zero = static_cast<float>(x);
  if (std::fabs(static_cast<double>(toward_zero)) > std::fabs(x)) toward_zero = std::nextafter(toward_zero, 0.0f);
  const std::uint16_t lo = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(toward_zero) >> 16);
  if (bf16_bits_to_double(lo) == x) return lo;
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);  // next magnitude up (inf after the max)
  // Above the largest finite bf16 the next step up is 2^128 (then overflow to inf).
  const double v_hi = (hi & 0x7F80) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), x) : bf16_bits_to_double(hi);
  const double d_lo = std::fabs(x - bf16_bits_to_double(lo)), d_hi = std::fabs(v_hi - x);
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) ? hi : lo;
}

}  // namespace engine::test
