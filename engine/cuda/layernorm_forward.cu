// Layer normalisation (Ba, Kiros & Hinton 2016) over the last dim, biased variance plus eps
// (GPT-2's 1e-5, or a config.json's layer_norm_epsilon); forward after llm.c. The backward, which
// reads the mean and rstd saved here, is in layernorm_backward.cu; the helpers
// both use are in layernorm_common.cuh.
//
// Statistics (mean, rstd) are f32 and computed in f32 from a two-pass
// variance (no cancellation when |mean| >> std). Activations may be f32 or
// bf16, weights f32 or bf16. When out, inp, weight and bias share a dtype,
// are 16-byte aligned and a row is a whole number of 16-byte packs (at most
// 16 a lane), the row stays in registers between the passes, read and written
// with 16-byte accesses; every other case runs the scalar kernel. Either
// folds max |out| into an amax slot as it writes the row when one is asked
// for (amax.cuh; the FP8 qkv and fc matmuls read ln_1's and ln_2's outputs).
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/amax.cuh"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/layernorm_common.cuh"

namespace engine::cuda {
namespace {

// One warp per row.
template <typename O, typename I, typename W>
__global__ void layernorm_forward_kernel(O* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const I* __restrict__ inp, const W* __restrict__ weight,
                                         const W* __restrict__ bias, std::int64_t N, int C, float eps,
                                         unsigned* __restrict__ amax_slot) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C); amax_slot: see amax.cuh, or null
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const I* x = inp + n * C;  // (C)
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - m;
    sq += d * d;
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);
  O* o = out + n * C;  // (C)
  unsigned row_amax = 0;
  for (int c = lane; c < C; c += 32) {
    const O r = from_float<O>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    o[c] = r;
    row_amax = max(row_amax, amax_bits(to_float(r)));
  }
  publish_warp_amax(row_amax, amax_slot);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// ---- vectorised kernel (pack layout: layernorm_common.cuh) ---------------------

template <typename T, int K>
__global__ void layernorm_forward_vec_kernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                             const T* __restrict__ inp, const T* __restrict__ weight,
                                             const T* __restrict__ bias, std::int64_t N, int C, float eps,
                                             unsigned* __restrict__ amax_slot) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C); amax_slot: see amax.cuh, or null
  constexpr int V = Pack16<T>::kSize;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const int packs = C / V;
  const T* x = inp + n * C;  // (C)
  Pack16<T> row[K];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      row[j] = load16(x + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) sum += to_float(row[j].v[k]);
    }
  }
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (lane + 32 * j < packs) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = to_float(row[j].v[k]) - m;
        sq += d * d;
      }
    }
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);
  T* o = out + n * C;  // (C)
  unsigned row_amax = 0;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      const Pack16<T> w = load16(weight + p * V), b = load16(bias + p * V);
      Pack16<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        r.v[k] = from_float<T>((to_float(row[j].v[k]) - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
        row_amax = max(row_amax, amax_bits(to_float(r.v[k])));
      }
      store16(o + p * V, r);
    }
  }
  publish_warp_amax(row_amax, amax_slot);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

}  // namespace

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps, const Tensor& out_amax) {
  for (const Tensor* t : {&out, &mean, &rstd, &inp, &weight, &bias}) expect_cuda(*t, "layernorm_forward: operand");
  expect_f32(mean, "layernorm_forward: mean");
  expect_f32(rstd, "layernorm_forward: rstd");
  ENGINE_CHECK(weight.dtype() == bias.dtype(), "layernorm_forward: weight ", weight.describe(), " and bias ",
               bias.describe(), " must share a dtype");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  unsigned* const amax_slot = reset_amax_slot(out_amax, current_stream());  // 0 for an empty out
  if (N == 0) return;
  // Rows of up to 16 packs per lane (4096 bf16, 2048 f32) in registers.
  constexpr int kMaxForwardPacks = 16;
  const int k = packs_per_lane(C, inp.dtype(), kMaxForwardPacks, /*doubling=*/true);
  if (k > 0 && all_vectorisable(inp.dtype(), {&out, &inp, &weight, &bias})) {
    dispatch_float(inp.dtype(), "layernorm_forward: inp", [&](auto tag) {
      using T = decltype(tag);
      with_packs<kMaxForwardPacks, true>(k, [&](auto packs) {
        layernorm_forward_vec_kernel<T, decltype(packs)::value>
            <<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, current_stream()>>>(
                out.data_as<T>(), mean.data_as<float>(), rstd.data_as<float>(), inp.data_as<const T>(),
                weight.data_as<const T>(), bias.data_as<const T>(), N, static_cast<int>(C),
                static_cast<float>(eps), amax_slot);
        CUDA_CHECK_LAUNCH();
      });
    });
    return;
  }
  dispatch_float(out.dtype(), "layernorm_forward: out", [&](auto o_tag) {
    dispatch_float(inp.dtype(), "layernorm_forward: inp", [&](auto i_tag) {
      dispatch_float(weight.dtype(), "layernorm_forward: weight", [&](auto w_tag) {
        using O = decltype(o_tag);
        using I = decltype(i_tag);
        using W = decltype(w_tag);
        layernorm_forward_kernel<<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, current_stream()>>>(
            out.data_as<O>(), mean.data_as<float>(), rstd.data_as<float>(), inp.data_as<const I>(),
            weight.data_as<const W>(), bias.data_as<const W>(), N, static_cast<int>(C),
            static_cast<float>(eps), amax_slot);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace engine::cuda
