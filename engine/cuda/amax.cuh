// An amax computed inside the kernel that writes the tensor (issue 35: the
// FP8 operand's amax fused into its producer, so no pass reads the tensor
// only to find its maximum): the norms' out_amax, and the FP8 linear layers'
// GELU epilogues (ops::Fp8Options::out_amax, dinp_amax).
//
// The running maximum is kept as the bits of |value| as f32, exactly as
// fp8_amax keeps it (fp8_cast.cu): for non-negative floats the unsigned order
// of the bits is the numeric order, +inf included, and a NaN (sign cleared)
// compares above +inf, so a NaN makes the amax NaN. The maximum is of the
// values as stored (after rounding to the output dtype), so it equals what
// fp8_amax would find reading the tensor back, bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/common.cuh"

namespace engine::cuda {

// |v| of a stored value widened to f32, as ordered bits (above).
__device__ __forceinline__ unsigned amax_bits(float stored) { return __float_as_uint(stored) & 0x7FFFFFFFu; }

// Folds each lane's running maximum into *slot_bits: one atomic per warp, and
// none once the slot already holds at least the warp's maximum (the slot only
// grows, so a stale read costs an atomic, never a wrong result). Every lane of
// the warp must call it, with slot_bits the same on all (null: nothing to do).
__device__ __forceinline__ void publish_warp_amax(unsigned m, unsigned* slot_bits) {
  if (slot_bits == nullptr) return;
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  if (threadIdx.x % 32 == 0 && m > __ldcg(slot_bits)) atomicMax(slot_bits, m);
}

// The slot's bits, zeroed on `stream` before the producing kernel runs; null
// for an empty slot (no amax asked for).
inline unsigned* reset_amax_slot(const Tensor& slot, cudaStream_t stream) {
  if (slot.empty()) return nullptr;
  CUDA_CHECK(cudaMemsetAsync(slot.data(), 0, sizeof(float), stream));
  return static_cast<unsigned*>(slot.data());
}

}  // namespace engine::cuda
