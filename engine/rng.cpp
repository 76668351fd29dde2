#include "engine/rng.h"

#include <cmath>
#include <numbers>

namespace engine {

std::uint64_t rng_key(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  // splitmix64 finaliser over (hash ^ seed) so nearby seeds give unrelated keys.
  std::uint64_t z = h ^ (seed * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

PhiloxBlock philox4x32(std::uint64_t key, std::uint64_t counter) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter), c1 = static_cast<std::uint32_t>(counter >> 32);
  std::uint32_t c2 = 0, c3 = 0;
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const std::uint32_t n3 = static_cast<std::uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

namespace {
// 53-bit uniform in (0, 1] from two words (never 0, so log() is finite).
double to_unit_open(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(hi) << 21) ^ (lo >> 11);
  return (static_cast<double>(bits & ((1ull << 53) - 1)) + 1.0) / 9007199254740992.0;
}
}  // namespace

template <typename T>
void fill_normal(T* out, std::int64_t count, std::uint64_t key, std::int64_t first_index, double mean,
                 double stddev) {
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < count; ++j) {
    // Box-Muller on one Philox block per element: draw i depends only on i.
    const PhiloxBlock b = philox4x32(key, static_cast<std::uint64_t>(first_index + j));
    const double u1 = to_unit_open(b.v[0], b.v[1]);
    const double u2 = to_unit_open(b.v[2], b.v[3]);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    out[j] = static_cast<T>(mean + stddev * z);
  }
}
template void fill_normal<float>(float*, std::int64_t, std::uint64_t, std::int64_t, double, double);
template void fill_normal<double>(double*, std::int64_t, std::uint64_t, std::int64_t, double, double);

double uniform01(std::uint64_t key, std::uint64_t index) {
  const PhiloxBlock b = philox4x32(key, index);
  return to_unit_open(b.v[0], b.v[1]) - 0x1p-53;  // [0, 1)
}

}  // namespace engine
