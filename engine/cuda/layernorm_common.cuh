// Pieces shared by the layer-norm forward (layernorm_forward.cu) and backward
// (layernorm_backward.cu), and by RMSNorm (rmsnorm.cu), whose kernels follow
// them: the block size of the one-warp-per-row kernels, and the host-side
// choice and dispatch of the vectorised kernels (how many 16-byte packs of a
// row each lane holds, and which instantiation runs).
//
// Everything here is in an unnamed namespace: each .cu file compiles its own
// internal copy, so no symbol is defined in two.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "engine/cuda/common.cuh"

namespace engine::cuda {
namespace {

// Warps (rows) per block of the one-warp-per-row kernels of both passes.
constexpr int kWarpsPerBlock = 8;

// ---- vectorised kernels --------------------------------------------------------
// A warp's row is C / V packs of V = Pack16<T>::kSize elements; lane l holds
// packs l, l + 32, ..., at most K of them (K a compile-time constant, so the
// array stays in registers).

// The packs per lane that hold a row of C elements of `dtype` in one warp's
// registers: the smallest K with C <= 32 K V, rounded up to a power of two
// when `doubling` (fewer kernels instantiated), at most max_k; 0 when C is
// not a whole number of packs or the row is longer than 32 * max_k packs.
int packs_per_lane(std::int64_t C, DType dtype, int max_k, bool doubling) {
  const std::int64_t v = pack16_elements(dtype);
  if (C % v != 0) return 0;
  const std::int64_t exact = (C / v + 31) / 32;
  std::int64_t k = 1;
  while (k < exact) k = doubling ? 2 * k : k + 1;
  return k <= max_k ? static_cast<int>(k) : 0;
}

// Calls f(std::integral_constant<int, K>{}) for k = K, where K runs over
// 1, 2, 4, ... (Doubling) or 1, 2, 3, ... up to MaxK: only those kernels are
// instantiated.
template <int MaxK, bool Doubling, int K = 1, typename F>
void with_packs(int k, F&& f) {
  if (k == K) {
    f(std::integral_constant<int, K>{});
    return;
  }
  constexpr int kNext = Doubling ? 2 * K : K + 1;
  if constexpr (kNext <= MaxK) {
    with_packs<MaxK, Doubling, kNext>(k, std::forward<F>(f));
  } else {
    ENGINE_FAIL("layernorm/rmsnorm: no vectorised kernel for ", k, " packs per lane");
  }
}

// True when every tensor has `dtype` and 16-byte alignment (rows of a C with
// C % V == 0 then stay aligned).
bool all_vectorisable(DType dtype, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->dtype() != dtype || !aligned(t->data(), 16)) return false;
  return true;
}

}  // namespace
}  // namespace engine::cuda
