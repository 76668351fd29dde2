// Vocabulary-parallel softmax + cross-entropy (Megatron-LM's
// _VocabParallelCrossEntropy; Shoeybi et al. 2019, sec. 3), the three
// per-rank steps of ops.h; the caller all-reduces between them:
//   partial_max   row max over this slice's valid columns   -> all-reduce MAX
//   partial_sums  sum of exp(x - max), the target's logit     -> all-reduce SUM
//   finish        loss, and the in-place gradient of this slice
//
// A slice holds global columns [vocab_start, vocab_start + V_local) of the
// logits (N, V_local); the first `valid` = clamp(vocab_size - vocab_start, 0,
// V_local) are classes, the rest padding. One block per row, like the fused
// softmax_cross_entropy.cu (which this reproduces at tp = 1 with two passes
// instead of its online max/sum, because the max must be all-reduced before
// the sum can start). Rows are read with 16-byte packs when every row is
// 16-byte aligned. Block reductions combine warps in a fixed order, so every
// statistic is bitwise deterministic. Statistics are f32.
//
// finish's in-place update: each element is read and rewritten by the same
// thread, and the target's logit was taken in partial_sums, so no barrier is
// needed.
//
// A target outside [0, vocab_size) cannot be reported without a sync; as in
// softmax_cross_entropy.cu its loss is written as NaN (partial_sums writes a
// NaN target logit on every rank, so the all-reduced sum and the loss show
// it, and finish writes NaN whatever the sums say) and its gradient row is
// the softmax without the one-hot term.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/softmax_rows.cuh"

namespace engine::cuda {
namespace {

constexpr int kVpceThreads = 512;
constexpr int kVpceWarps = kVpceThreads / 32;

// Block-wide max / sum, every thread gets the result. The warp shuffles and
// the in-order merge of the warps' partials fix the summation order.
__device__ __forceinline__ float block_max(float v, float* warp_partial /* (kVpceWarps) shared */) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) warp_partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = warp_partial[0];
  for (int w = 1; w < kVpceWarps; ++w) r = fmaxf(r, warp_partial[w]);
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* warp_partial /* (kVpceWarps) shared */) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warp_partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = warp_partial[0];
  for (int w = 1; w < kVpceWarps; ++w) r += warp_partial[w];
  return r;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kVpceThreads)
    partial_max_kernel(float* __restrict__ row_max, const T* __restrict__ logits, std::int64_t V_local,
                       std::int64_t valid) {
  // row_max (N), logits (N, V_local)
  __shared__ float warp_partial[kVpceWarps];
  const std::int64_t n = blockIdx.x;
  const Pack<T, kVec>* packs = reinterpret_cast<const Pack<T, kVec>*>(logits + n * V_local);
  const std::int64_t num_packs = (valid + kVec - 1) / kVec;  // the packs that hold a valid column
  float m = -INFINITY;  // stays -inf for a slice of padding only: the MAX all-reduce's identity
  for (std::int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
    const Pack<T, kVec> pack = packs[p];
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (p * kVec + e < valid) m = fmaxf(m, to_float(pack.v[e]));
  }
  m = block_max(m, warp_partial);
  if (threadIdx.x == 0) row_max[n] = m;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kVpceThreads)
    partial_sums_kernel(float* __restrict__ sums, const T* __restrict__ logits, const float* __restrict__ row_max,
                        const std::int32_t* __restrict__ targets, std::int64_t N, std::int64_t V_local,
                        std::int64_t valid, std::int64_t vocab_start, std::int64_t vocab_size) {
  // sums (2, N), logits (N, V_local), row_max (N), targets (N)
  __shared__ float warp_partial[kVpceWarps];
  const std::int64_t n = blockIdx.x;
  const T* row = logits + n * V_local;  // (V_local)
  const Pack<T, kVec>* packs = reinterpret_cast<const Pack<T, kVec>*>(row);
  const std::int64_t num_packs = (valid + kVec - 1) / kVec;
  const float m = row_max[n];
  float s = 0.0f;
  for (std::int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
    const Pack<T, kVec> pack = packs[p];
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      if (p * kVec + e < valid) s += __expf(to_float(pack.v[e]) - m);
  }
  s = block_sum(s, warp_partial);
  if (threadIdx.x == 0) {
    sums[n] = s;
    // 0 unless this slice holds the target, so the SUM all-reduce yields its logit.
    const std::int64_t target = targets[n];
    const std::int64_t local = target - vocab_start;
    float target_logit = 0.0f;
    if (target < 0 || target >= vocab_size) target_logit = NAN;
    else if (local >= 0 && local < V_local) target_logit = to_float(row[local]);
    sums[N + n] = target_logit;
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kVpceThreads)
    finish_kernel(float* __restrict__ losses, T* __restrict__ logits, const float* __restrict__ row_max,
                  const float* __restrict__ sums, const std::int32_t* __restrict__ targets, std::int64_t N,
                  std::int64_t V_local, std::int64_t valid, std::int64_t vocab_start, std::int64_t vocab_size,
                  float grad_scale) {
  // losses (N), logits (N, V_local), row_max (N), sums (2, N), targets (N)
  const std::int64_t n = blockIdx.x;
  const float m = row_max[n], sum_exp = sums[n], target_logit = sums[N + n];
  const std::int64_t target = targets[n];
  const bool valid_target = target >= 0 && target < vocab_size;
  const float log_sum = logf(sum_exp);
  // (max - target) + log(sum), as the fused kernel: no cancellation when the
  // loss is small next to the log-sum-exp.
  if (threadIdx.x == 0) losses[n] = valid_target ? (m - target_logit) + log_sum : NAN;

  if (grad_scale == 0.0f) return;
  // dlogits = grad_scale * (softmax - onehot) on this slice, padding 0.
  const float lse = m + log_sum;
  const std::int64_t local = valid_target ? target - vocab_start : -1;  // -1: matches no column
  write_softmax_gradient<T, kVec>(logits + n * V_local, V_local / kVec, valid, lse, local, grad_scale);
}

std::int64_t valid_columns(std::int64_t V_local, std::int64_t vocab_start, std::int64_t vocab_size) {
  return std::clamp<std::int64_t>(vocab_size - vocab_start, 0, V_local);
}

// The host-side checks the three steps share (shapes were checked by ops.cpp).
void check_common(const char* op, const Tensor& logits, std::initializer_list<const Tensor*> stats,
                  const Tensor* targets) {
  expect_cuda(logits, op);
  expect_float(logits, op);
  for (const Tensor* t : stats) {
    expect_cuda(*t, op);
    expect_f32(*t, op);
  }
  if (targets) expect_cuda(*targets, op);
  const std::int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  ENGINE_CHECK(N <= INT32_MAX, op, ": ", N, " rows is too many for one grid");
}

// Calls fn(T{}, std::integral_constant<int, kVec>{}) for the logits' dtype,
// with 16-byte packs when every row is 16-byte aligned.
template <typename Fn>
void dispatch_rows(const char* op, const Tensor& logits, Fn&& fn) {
  dispatch_float(logits.dtype(), op, [&](auto t_tag) {
    using T = decltype(t_tag);
    constexpr int kVec = 16 / sizeof(T);
    const std::int64_t V_local = logits.dim(-1);
    if (V_local % kVec == 0 && aligned(logits.data(), 16)) fn(t_tag, std::integral_constant<int, kVec>{});
    else fn(t_tag, std::integral_constant<int, 1>{});
  });
}

}  // namespace

void cross_entropy_partial_max(const Tensor& row_max, const Tensor& logits, std::int64_t vocab_start,
                               std::int64_t vocab_size) {
  const char* op = "cross_entropy_partial_max";
  check_common(op, logits, {&row_max}, nullptr);
  const std::int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  if (N == 0) return;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  dispatch_rows(op, logits, [&](auto t_tag, auto vec) {
    using T = decltype(t_tag);
    partial_max_kernel<T, decltype(vec)::value><<<static_cast<unsigned>(N), kVpceThreads, 0, current_stream()>>>(
        row_max.data_as<float>(), logits.data_as<const T>(), V_local, valid);
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_partial_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size) {
  const char* op = "cross_entropy_partial_sums";
  check_common(op, logits, {&sums, &row_max}, &targets);
  const std::int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  if (N == 0) return;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  dispatch_rows(op, logits, [&](auto t_tag, auto vec) {
    using T = decltype(t_tag);
    partial_sums_kernel<T, decltype(vec)::value><<<static_cast<unsigned>(N), kVpceThreads, 0, current_stream()>>>(
        sums.data_as<float>(), logits.data_as<const T>(), row_max.data_as<const float>(),
        targets.data_as<const std::int32_t>(), N, V_local, valid, vocab_start, vocab_size);
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_finish(const Tensor& losses, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size,
                          double grad_scale) {
  const char* op = "cross_entropy_finish";
  check_common(op, logits, {&losses, &row_max, &sums}, &targets);
  const std::int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  if (N == 0) return;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  dispatch_rows(op, logits, [&](auto t_tag, auto vec) {
    using T = decltype(t_tag);
    finish_kernel<T, decltype(vec)::value><<<static_cast<unsigned>(N), kVpceThreads, 0, current_stream()>>>(
        losses.data_as<float>(), logits.data_as<T>(), row_max.data_as<const float>(), sums.data_as<const float>(),
        targets.data_as<const std::int32_t>(), N, V_local, valid, vocab_start, vocab_size,
        static_cast<float>(grad_scale));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace engine::cuda
