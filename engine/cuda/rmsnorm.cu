// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), as
// Llama and Qwen2 use it (Hugging Face's LlamaRMSNorm): over the last dim,
//   out = inp * rstd * weight,  rstd = 1 / sqrt(mean_c(inp^2) + eps),
// no mean subtracted, no bias. Forward and backward; the layer-norm kernels
// (layernorm_forward.cu, layernorm_backward.cu) are the model for both, and
// layernorm_common.cuh's block size and vectorised-kernel dispatch are shared.
//
// Activations may be f32 or bf16, the weight f32 or bf16 (like layer norm's:
// a caller may pass the f32 master weight with bf16 activations); rstd is f32
// and computed in f32, as every statistic of this backend; dweight is f32.
// When the operands share a dtype, are 16-byte aligned and a row is a whole
// number of 16-byte packs, rows are read and written with 16-byte accesses
// (the forward keeps a row of up to 16 packs a lane in registers, the fused
// backward up to 8); every other case runs the scalar kernels. The forward
// folds max |out| into an amax slot as it writes, when asked (amax.cuh).
//
// Backward, deterministic (every summation order a function of N and C):
//   dinp += rstd * (g - norm * mean_c(g * norm)), norm = x * rstd, g = weight * dout
//     (one warp per row; dinp ACCUMULATES, as layernorm_backward's);
//   dweight[c] += sum_n dout * norm: each fixed chunk of rows writes one row
//     of partial sums to scratch, and column_sums.cu adds the chunks in order.
// It is layer norm's backward without the mean terms and without dbias.
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/amax.cuh"
#include "engine/cuda/column_sums.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/layernorm_common.cuh"

namespace engine::cuda {
namespace {

// ============================================================================
// forward
// ============================================================================

// One warp per row.
template <typename O, typename I, typename W>
__global__ void rmsnorm_forward_kernel(O* __restrict__ out, float* __restrict__ rstd, const I* __restrict__ inp,
                                       const W* __restrict__ weight, std::int64_t N, int C, float eps,
                                       unsigned* __restrict__ amax_slot) {
  // out (N, C), rstd (N), inp (N, C), weight (C); amax_slot: see amax.cuh, or null
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const I* x = inp + n * C;  // (C)
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_float(x[c]);
    sq += v * v;
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);
  O* o = out + n * C;  // (C)
  // (x * rstd) * weight: Hugging Face's order, and the CPU backend's.
  unsigned row_amax = 0;
  for (int c = lane; c < C; c += 32) {
    const O r = from_float<O>((to_float(x[c]) * s) * to_float(weight[c]));
    o[c] = r;
    row_amax = max(row_amax, amax_bits(to_float(r)));
  }
  publish_warp_amax(row_amax, amax_slot);
  if (lane == 0) rstd[n] = s;
}

// The row in registers (pack layout: layernorm_common.cuh), 16-byte accesses.
template <typename T, int K>
__global__ void rmsnorm_forward_vec_kernel(T* __restrict__ out, float* __restrict__ rstd, const T* __restrict__ inp,
                                           const T* __restrict__ weight, std::int64_t N, int C, float eps,
                                           unsigned* __restrict__ amax_slot) {
  // out (N, C), rstd (N), inp (N, C), weight (C); amax_slot: see amax.cuh, or null
  constexpr int V = Pack16<T>::kSize;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const int packs = C / V;
  const T* x = inp + n * C;  // (C)
  Pack16<T> row[K];
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      row[j] = load16(x + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float v = to_float(row[j].v[k]);
        sq += v * v;
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
      const Pack16<T> w = load16(weight + p * V);
      Pack16<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        r.v[k] = from_float<T>((to_float(row[j].v[k]) * s) * to_float(w.v[k]));
        row_amax = max(row_amax, amax_bits(to_float(r.v[k])));
      }
      store16(o + p * V, r);
    }
  }
  publish_warp_amax(row_amax, amax_slot);
  if (lane == 0) rstd[n] = s;
}

// ============================================================================
// backward
// ============================================================================

// dinp += rstd (g - norm mean_c(g norm)), one warp per row.
template <typename DI, typename DO, typename I, typename W>
__global__ void rmsnorm_backward_dinp_kernel(DI* __restrict__ dinp, const DO* __restrict__ dout,
                                             const I* __restrict__ inp, const W* __restrict__ weight,
                                             const float* __restrict__ rstd, std::int64_t N, int C) {
  // dinp (N, C) accumulated, dout (N, C), inp (N, C), weight (C), rstd (N)
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const DO* dy = dout + n * C;
  const I* x = inp + n * C;
  DI* dx = dinp + n * C;
  const float s = rstd[n];
  float sum_g_norm = 0.0f;
  for (int c = lane; c < C; c += 32) sum_g_norm += to_float(weight[c]) * to_float(dy[c]) * (to_float(x[c]) * s);
  const float mean_g_norm = warp_sum(sum_g_norm) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = to_float(x[c]) * s;
    const float g = to_float(weight[c]) * to_float(dy[c]);
    dx[c] = from_float<DI>(to_float(dx[c]) + s * (g - norm * mean_g_norm));
  }
}

// Partial dweight sums: block (32 x kWarpsPerBlock) handles channels
// [32 bx, 32 bx + 32) and rows [chunk * rows_per_chunk, ...); thread (lane, w)
// sums rows w, w + 8, ... of the chunk, and the 8 warp sums are added in w
// order. Writes partial[chunk, c].
template <typename DO, typename I>
__global__ void rmsnorm_backward_partial_kernel(float* __restrict__ partial_dweight, const DO* __restrict__ dout,
                                                const I* __restrict__ inp, const float* __restrict__ rstd,
                                                std::int64_t N, int C, std::int64_t rows_per_chunk) {
  // partial_dweight (chunks, C), dout (N, C), inp (N, C), rstd (N)
  __shared__ float sh_dw[kWarpsPerBlock][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane;
  const std::int64_t row0 = blockIdx.y * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  float dw = 0.0f;
  if (c < C)
    for (std::int64_t n = row0 + w; n < row1; n += kWarpsPerBlock)
      dw += to_float(dout[n * C + c]) * (to_float(inp[n * C + c]) * rstd[n]);
  sh_dw[w][lane] = dw;
  __syncthreads();
  if (w == 0 && c < C) {
    float sum = 0.0f;
    for (int k = 0; k < kWarpsPerBlock; ++k) sum += sh_dw[k][lane];
    partial_dweight[blockIdx.y * std::int64_t{C} + c] = sum;
  }
}

// The same with 16-byte loads: lane l of warp w covers the V channels of pack
// (32 blockIdx.x + l) over rows w, w + 8, ... of the chunk; per channel the
// same order as the scalar kernel.
template <typename T>
__global__ void rmsnorm_backward_partial_vec_kernel(float* __restrict__ partial_dweight, const T* __restrict__ dout,
                                                    const T* __restrict__ inp, const float* __restrict__ rstd,
                                                    std::int64_t N, int C, std::int64_t rows_per_chunk) {
  // partial_dweight (chunks, C), dout (N, C), inp (N, C), rstd (N)
  constexpr int V = Pack16<T>::kSize;
  __shared__ float sh_dw[kWarpsPerBlock][V * 32];  // [warp][k * 32 + lane]: conflict-free stores
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c0 = (blockIdx.x * 32 + lane) * V;
  const std::int64_t row0 = blockIdx.y * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  float dw[V];
#pragma unroll
  for (int k = 0; k < V; ++k) dw[k] = 0.0f;
  if (c0 < C) {
    for (std::int64_t n = row0 + w; n < row1; n += kWarpsPerBlock) {
      const Pack16<T> dy = load16(dout + n * C + c0), x = load16(inp + n * C + c0);
      const float s = rstd[n];
#pragma unroll
      for (int k = 0; k < V; ++k) dw[k] += to_float(dy.v[k]) * (to_float(x.v[k]) * s);
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) sh_dw[w][k * 32 + lane] = dw[k];
  __syncthreads();
  for (int i = threadIdx.x; i < V * 32; i += blockDim.x) {
    const int c = (blockIdx.x * 32 + i % 32) * V + i / 32;
    if (c >= C) continue;
    float sum = 0.0f;
    for (int k = 0; k < kWarpsPerBlock; ++k) sum += sh_dw[k][i];
    partial_dweight[blockIdx.y * std::int64_t{C} + c] = sum;
  }
}

// The fused backward (layernorm_backward.cu's fused kernel without the mean
// terms and dbias): block blockIdx.x owns rows [bx * rows_per_chunk, ...) and
// writes partial row bx of dweight. Warp w takes rows w, w + kFusedWarps, ...
// in order; per row it loads dout, inp and dinp (K packs a lane, all loads
// issued before the first use), reduces the row sum across the warp, writes
// dinp, and adds dout * norm into its own slice of shared memory (index
// (j V + k) 32 + lane: conflict-free). The slices are then added in w order.
constexpr int kFusedWarps = 4;

template <typename T, int K>
constexpr int fused_shared_bytes() {
  return kFusedWarps * K * Pack16<T>::kSize * 32 * static_cast<int>(sizeof(float));
}

template <typename T, int K>
__global__ void __launch_bounds__(32 * kFusedWarps)
    rmsnorm_backward_fused_kernel(T* __restrict__ dinp, float* __restrict__ partial_dweight,
                                  const T* __restrict__ dout, const T* __restrict__ inp, const T* __restrict__ weight,
                                  const float* __restrict__ rstd, std::int64_t N, int C,
                                  std::int64_t rows_per_chunk) {
  // dinp (N, C) accumulated, partial_dweight (chunks, C), dout (N, C), inp (N, C), weight (C), rstd (N)
  constexpr int V = Pack16<T>::kSize;
  constexpr int kSlice = K * V * 32;  // one warp's sums
  extern __shared__ float sums[];     // [kFusedWarps][kSlice]
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  float* acc_dw = sums + w * kSlice;
  for (int i = lane; i < kSlice; i += 32) acc_dw[i] = 0.0f;
  __syncwarp();
  const int packs = C / V;
  const std::int64_t row0 = blockIdx.x * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  for (std::int64_t n = row0 + w; n < row1; n += kFusedWarps) {
    const float s = rstd[n];
    Pack16<T> dy[K], x[K], dx[K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int p = lane + 32 * j;
      if (p < packs) {
        dy[j] = load16(dout + n * C + p * V);
        x[j] = load16(inp + n * C + p * V);
        dx[j] = load16(dinp + n * C + p * V);
      }
    }
    float sum_g_norm = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int p = lane + 32 * j;
      if (p < packs) {
        const Pack16<T> wt = load16(weight + p * V);
#pragma unroll
        for (int k = 0; k < V; ++k) sum_g_norm += to_float(wt.v[k]) * to_float(dy[j].v[k]) * (to_float(x[j].v[k]) * s);
      }
    }
    const float mean_g_norm = warp_sum(sum_g_norm) / C;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int p = lane + 32 * j;
      if (p < packs) {
        const Pack16<T> wt = load16(weight + p * V);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float norm = to_float(x[j].v[k]) * s;
          const float d = to_float(dy[j].v[k]);
          dx[j].v[k] = from_float<T>(to_float(dx[j].v[k]) + s * (to_float(wt.v[k]) * d - norm * mean_g_norm));
          acc_dw[(j * V + k) * 32 + lane] += d * norm;
        }
        store16(dinp + n * C + p * V, dx[j]);
      }
    }
  }
  __syncthreads();
  // Consecutive threads take consecutive channels, so the partial row is
  // written coalesced.
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int p = c / V;
    const int i = ((p / 32) * V + c % V) * 32 + p % 32;
    float sum = 0.0f;
    for (int u = 0; u < kFusedWarps; ++u) sum += sums[u * kSlice + i];
    partial_dweight[blockIdx.x * std::int64_t{C} + c] = sum;
  }
}

}  // namespace

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps,
                     const Tensor& out_amax) {
  for (const Tensor* t : {&out, &rstd, &inp, &weight}) expect_cuda(*t, "rmsnorm_forward: operand");
  expect_f32(rstd, "rmsnorm_forward: rstd");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  unsigned* const amax_slot = reset_amax_slot(out_amax, current_stream());  // 0 for an empty out
  if (N == 0) return;
  const float eps_f = static_cast<float>(eps);
  // Rows of up to 16 packs per lane (4096 bf16, 2048 f32) in registers.
  constexpr int kMaxForwardPacks = 16;
  const int k = packs_per_lane(C, inp.dtype(), kMaxForwardPacks, /*doubling=*/true);
  if (k > 0 && all_vectorisable(inp.dtype(), {&out, &inp, &weight})) {
    dispatch_float(inp.dtype(), "rmsnorm_forward: inp", [&](auto tag) {
      using T = decltype(tag);
      with_packs<kMaxForwardPacks, true>(k, [&](auto packs) {
        rmsnorm_forward_vec_kernel<T, decltype(packs)::value>
            <<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, current_stream()>>>(
                out.data_as<T>(), rstd.data_as<float>(), inp.data_as<const T>(), weight.data_as<const T>(), N,
                static_cast<int>(C), eps_f, amax_slot);
        CUDA_CHECK_LAUNCH();
      });
    });
    return;
  }
  dispatch_float(out.dtype(), "rmsnorm_forward: out", [&](auto o_tag) {
    dispatch_float(inp.dtype(), "rmsnorm_forward: inp", [&](auto i_tag) {
      dispatch_float(weight.dtype(), "rmsnorm_forward: weight", [&](auto w_tag) {
        using O = decltype(o_tag);
        using I = decltype(i_tag);
        using W = decltype(w_tag);
        rmsnorm_forward_kernel<<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, current_stream()>>>(
            out.data_as<O>(), rstd.data_as<float>(), inp.data_as<const I>(), weight.data_as<const W>(), N,
            static_cast<int>(C), eps_f, amax_slot);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  for (const Tensor* t : {&dinp, &dweight, &dout, &inp, &weight, &rstd}) expect_cuda(*t, "rmsnorm_backward: operand");
  expect_f32(dweight, "rmsnorm_backward: dweight (parameter gradients are f32)");
  expect_f32(rstd, "rmsnorm_backward: rstd");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  if (N == 0) return;
  cudaStream_t stream = current_stream();

  // Fused: one dtype, C a whole number of packs, up to 8 packs a lane (2048
  // bf16, 1024 f32) in registers; chunks of 32 rows, as layer norm's.
  constexpr int kMaxBackwardPacks = 8;
  const bool same = all_vectorisable(inp.dtype(), {&dinp, &dout, &inp, &weight});
  const int k = same ? packs_per_lane(C, inp.dtype(), kMaxBackwardPacks, /*doubling=*/false) : 0;
  const RowChunks rc = k > 0 ? row_chunks(N, /*min_rows=*/32, /*max_chunks=*/1024) : row_chunks(N);
  float* partial_dw = static_cast<float*>(context().scratch(sizeof(float) * rc.chunks * C));  // (chunks, C)

  if (k > 0) {
    dispatch_float(inp.dtype(), "rmsnorm_backward: inp", [&](auto tag) {
      using T = decltype(tag);
      with_packs<kMaxBackwardPacks, false>(k, [&](auto packs) {
        constexpr int K = decltype(packs)::value;
        const auto kernel = rmsnorm_backward_fused_kernel<T, K>;
        constexpr int shared_bytes = fused_shared_bytes<T, K>();  // at most 32 KB (K = 8, bf16)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
        kernel<<<static_cast<unsigned>(rc.chunks), 32 * kFusedWarps, shared_bytes, stream>>>(
            dinp.data_as<T>(), partial_dw, dout.data_as<const T>(), inp.data_as<const T>(),
            weight.data_as<const T>(), rstd.data_as<const float>(), N, static_cast<int>(C), rc.rows_per_chunk);
        CUDA_CHECK_LAUNCH();
      });
    });
  } else if (same && C % pack16_elements(inp.dtype()) == 0) {
    // Rows too long for registers (Llama's C = 4096 and up in bf16): the
    // scalar dinp kernel (it reads each row twice, the second time mostly
    // from L2), partial sums with 16-byte loads.
    dispatch_float(inp.dtype(), "rmsnorm_backward: inp", [&](auto tag) {
      using T = decltype(tag);
      rmsnorm_backward_dinp_kernel<T, T, T, T><<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
          dinp.data_as<T>(), dout.data_as<const T>(), inp.data_as<const T>(), weight.data_as<const T>(),
          rstd.data_as<const float>(), N, static_cast<int>(C));
      CUDA_CHECK_LAUNCH();
      constexpr int V = Pack16<T>::kSize;
      const dim3 grid(ceil_div(C, 32 * V), static_cast<unsigned>(rc.chunks));
      rmsnorm_backward_partial_vec_kernel<T><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          partial_dw, dout.data_as<const T>(), inp.data_as<const T>(), rstd.data_as<const float>(), N,
          static_cast<int>(C), rc.rows_per_chunk);
      CUDA_CHECK_LAUNCH();
    });
  } else {
    dispatch_float(dinp.dtype(), "rmsnorm_backward: dinp", [&](auto di_tag) {
      dispatch_float(dout.dtype(), "rmsnorm_backward: dout", [&](auto do_tag) {
        dispatch_float(inp.dtype(), "rmsnorm_backward: inp", [&](auto i_tag) {
          dispatch_float(weight.dtype(), "rmsnorm_backward: weight", [&](auto w_tag) {
            using DI = decltype(di_tag);
            using DO = decltype(do_tag);
            using I = decltype(i_tag);
            using W = decltype(w_tag);
            rmsnorm_backward_dinp_kernel<<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
                dinp.data_as<DI>(), dout.data_as<const DO>(), inp.data_as<const I>(), weight.data_as<const W>(),
                rstd.data_as<const float>(), N, static_cast<int>(C));
            CUDA_CHECK_LAUNCH();
          });
          using DO = decltype(do_tag);
          using I = decltype(i_tag);
          const dim3 grid(ceil_div(C, 32), static_cast<unsigned>(rc.chunks));
          rmsnorm_backward_partial_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
              partial_dw, dout.data_as<const DO>(), inp.data_as<const I>(), rstd.data_as<const float>(), N,
              static_cast<int>(C), rc.rows_per_chunk);
          CUDA_CHECK_LAUNCH();
        });
      });
    });
  }
  const ChunkSums sums[1] = {{dweight.data_as<float>(), partial_dw}};
  add_chunk_sums(sums, 1, rc.chunks, C, stream);
}

}  // namespace engine::cuda
