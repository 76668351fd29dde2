// Pieces shared by the two classifier kernels (softmax_cross_entropy.cu and
// vocab_parallel_cross_entropy.cu): vectorised row access and the in-place
// softmax gradient.
#pragma once

#include <cstdint>

#include "engine/cuda/common.cuh"

namespace engine::cuda {

// kVec elements loaded or stored as one aligned vector (16 bytes when the
// row width and address allow it).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// Overwrites a row of logits in place with grad_scale * (softmax - onehot):
// columns [0, valid) are classes, columns from `valid` on are padding (0);
// `target` is the target's column in this row, or -1 when it is not here.
// Called by every thread of the row's block.
template <typename T, int kVec>
__device__ __forceinline__ void write_softmax_gradient(T* row, std::int64_t num_packs, std::int64_t valid,
                                                       float lse, std::int64_t target, float grad_scale) {
  Pack<T, kVec>* packs = reinterpret_cast<Pack<T, kVec>*>(row);
  for (std::int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
    Pack<T, kVec> pack = packs[p];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const std::int64_t i = p * kVec + e;
      float g = 0.0f;
      if (i < valid) g = grad_scale * (__expf(to_float(pack.v[e]) - lse) - (i == target ? 1.0f : 0.0f));
      pack.v[e] = from_float<T>(g);
    }
    packs[p] = pack;
  }
}

}  // namespace engine::cuda
