// Deterministic random numbers.
//
// Parameter initialisation uses a counter-based generator (Philox4x32-10,
// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): element
// i of a tensor is a pure function of (key, i). A rank that holds only a slice
// of a tensor therefore draws exactly the numbers one process would draw for
// that slice, which is what makes every parallel layout start from the same
// model (ARCHITECTURE.md, "Initialisation does not depend on the layout").
#pragma once

#include <cstdint>
#include <string_view>

namespace engine {

// Key of a named stream: FNV-1a of the name, mixed with the seed.
std::uint64_t rng_key(std::uint64_t seed, std::string_view name);

// One Philox4x32-10 block: four 32-bit words for (key, counter).
struct PhiloxBlock {
  std::uint32_t v[4];
};
PhiloxBlock philox4x32(std::uint64_t key, std::uint64_t counter);

// out[j] = mean + stddev * N(0,1) draw number (first_index + j) of stream `key`.
template <typename T>
void fill_normal(T* out, std::int64_t count, std::uint64_t key, std::int64_t first_index, double mean,
                 double stddev);

// Uniform double in [0, 1) for draw `index` of stream `key`.
double uniform01(std::uint64_t key, std::uint64_t index);

}  // namespace engine
