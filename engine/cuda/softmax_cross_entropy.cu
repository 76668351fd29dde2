// Fused classifier: softmax + cross-entropy loss + its gradient, in place
// (llm.c's fused_classifier). The probabilities are never stored.
//
// One block per row n of the logits (N, Vp):
//   pass 1 reads the row once with an online max/sum (Milakov & Gimelshein
//          2018, "Online normalizer calculation for softmax"): every thread
//          keeps a running (max, sum of exp(x - max)) over its elements,
//          then the block merges the pairs -> lse = max + log(sum), in f32.
//   loss   losses[n] = lse - logits[n, target]
//   pass 2 (grad_scale != 0) overwrites the row with
//          grad_scale * (exp(x - lse) - onehot(target)), padding columns 0,
//          in the logits dtype. Each element is read and rewritten by the
//          same thread, and the target logit is read before the barrier that
//          ends pass 1, so the in-place update is race-free.
// A target outside [0, vocab_size) cannot be reported without a sync; its
// loss is written as NaN so the step's loss shows it.
#include <cmath>
#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/softmax_rows.cuh"

namespace engine::cuda {
namespace {

constexpr int kCeThreads = 512;

// Online-softmax state: max m and sum s of exp(x - m).
struct MaxSum {
  float m;
  float s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // both empty
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

template <typename T, typename L, int kVec>
__global__ void __launch_bounds__(kCeThreads)
    softmax_cross_entropy_kernel(L* __restrict__ losses, T* __restrict__ logits,
                                 const std::int32_t* __restrict__ targets, std::int64_t Vp, std::int64_t V,
                                 float grad_scale) {
  // losses (N), logits (N, Vp), targets (N)
  __shared__ MaxSum warp_state[kCeThreads / 32];
  __shared__ float target_logit;
  const std::int64_t n = blockIdx.x;
  T* row = logits + n * Vp;  // (Vp)
  Pack<T, kVec>* packs = reinterpret_cast<Pack<T, kVec>*>(row);
  const std::int64_t num_packs = Vp / kVec;
  const int target = targets[n];
  const bool valid_target = target >= 0 && target < V;
  if (threadIdx.x == 0) target_logit = valid_target ? to_float(row[target]) : NAN;

  // Pass 1: online max / sum of this thread's elements in [0, V).
  MaxSum state{-INFINITY, 0.0f};
  for (std::int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
    const Pack<T, kVec> pack = packs[p];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const std::int64_t i = p * kVec + e;
      if (i >= V) break;
      const float x = to_float(pack.v[e]);
      if (x > state.m) {
        state.s = state.s * __expf(state.m - x) + 1.0f;  // exp(-inf) = 0 on the first element
        state.m = x;
      } else {
        state.s += __expf(x - state.m);
      }
    }
  }
  // Merge across the warp, then across warps (fixed order: deterministic).
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, state.m, offset), __shfl_xor_sync(0xffffffffu, state.s, offset)};
    state = merge(state, other);
  }
  if (threadIdx.x % 32 == 0) warp_state[threadIdx.x / 32] = state;
  __syncthreads();  // also publishes target_logit before pass 2 overwrites the row
  MaxSum total = warp_state[0];
  for (int w = 1; w < kCeThreads / 32; ++w) total = merge(total, warp_state[w]);
  const float log_sum = logf(total.s);
  const float lse = total.m + log_sum;
  // (max - target) + log(sum) rather than lse - target: no cancellation when
  // the loss is small next to lse. NaN for an invalid target.
  if (threadIdx.x == 0) losses[n] = from_float<L>((total.m - target_logit) + log_sum);

  if (grad_scale == 0.0f) return;
  // Pass 2: dlogits = grad_scale * (softmax - onehot), padding 0.
  write_softmax_gradient<T, kVec>(row, num_packs, V, lse, target, grad_scale);
}

}  // namespace

void softmax_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           std::int64_t vocab_size, double grad_scale) {
  expect_cuda(losses, "softmax_cross_entropy: losses");
  expect_cuda(logits, "softmax_cross_entropy: logits");
  expect_cuda(targets, "softmax_cross_entropy: targets");
  const std::int64_t Vp = logits.dim(-1), N = logits.numel() / Vp;
  if (N == 0) return;
  ENGINE_CHECK(N <= INT32_MAX, "softmax_cross_entropy: ", N, " rows is too many for one grid");
  dispatch_float(logits.dtype(), "softmax_cross_entropy: logits", [&](auto t_tag) {
    dispatch_float(losses.dtype(), "softmax_cross_entropy: losses", [&](auto l_tag) {
      using T = decltype(t_tag);
      using L = decltype(l_tag);
      constexpr int kVec = 16 / sizeof(T);  // 16-byte loads when every row is 16-byte aligned
      const bool vectorise = Vp % kVec == 0 && aligned(logits.data(), 16);
      auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(N), kCeThreads, 0, current_stream()>>>(
            losses.data_as<L>(), logits.data_as<T>(), targets.data_as<const std::int32_t>(), Vp, vocab_size,
            static_cast<float>(grad_scale));
        CUDA_CHECK_LAUNCH();
      };
      if (vectorise) launch(softmax_cross_entropy_kernel<T, L, kVec>);
      else launch(softmax_cross_entropy_kernel<T, L, 1>);
    });
  });
}

}  // namespace engine::cuda
