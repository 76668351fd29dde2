// Layer normalisation (Ba, Kiros & Hinton 2016) backward, after llm.c. The
// forward, which saves the f32 mean and rstd read here, is in
// layernorm_forward.cu; the helpers both use are in layernorm_common.cuh.
//
// Activations may be f32 or bf16, weights f32 or bf16; the parameter
// gradients are f32.
//
// Backward, all deterministic (every summation order a function of N and C):
//   dinp += rstd * (g - mean_c(g) - norm * mean_c(g * norm)),
//     with norm = (x - mean) * rstd and g = weight * dout (one warp per row);
//   dweight[c] += sum_n dout * norm, dbias[c] += sum_n dout: each fixed
//     chunk of rows writes one row of partial sums to a scratch table, and
//     column_sums.cu adds the chunks in order.
// The common case (activations, weights and dinp of one dtype, C a whole
// number of 16-byte packs, at most 8 packs a lane: C <= 2048 bf16 or 1024 f32)
// does both in one fused kernel, reading dout, inp and dinp once with 16-byte
// loads and writing dinp once: the fewest bytes the op can move. Every other
// case runs a dinp kernel and a partial-sum kernel, each reading dout and inp.
//
// History on the H100 (gpt2-1558m, 8192 rows of 1600 bf16; the bytes the op
// must move take about 35 us at 3 TB/s): scalar kernels 124 us a call; with
// 16-byte loads in separate dinp and partial kernels 115 us (2026-11-23,
// RESULTS.md), where ptxas reported 157 registers for the dinp kernel (one
// 256-thread block, 8 warps, per SM) and the chunk sums were a chain of 64
// dependent loads per column on 7 blocks. The fused kernel below holds
// K = ceil(C / (32 V)) packs a lane (not the next power of two), keeps the
// dweight/dbias sums of each warp in shared memory, and uses 4-warp blocks
// (168 registers at K = 7: up to 3 blocks per SM); it took 56.5 us (commit
// f81b42a, 1.6x the floor).
// The scalar and the fused kernels sum in different orders: their results
// may differ by f32 rounding.
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/column_sums.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/cuda/layernorm_common.cuh"

namespace engine::cuda {
namespace {

// Kernel 1: dinp += ..., one warp per row.
template <typename DI, typename DO, typename I, typename W>
__global__ void layernorm_backward_dinp_kernel(DI* __restrict__ dinp, const DO* __restrict__ dout,
                                               const I* __restrict__ inp, const W* __restrict__ weight,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               std::int64_t N, int C) {
  // dinp (N, C) accumulated, dout (N, C), inp (N, C), weight (C), mean (N), rstd (N)
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const DO* dy = dout + n * C;
  const I* x = inp + n * C;
  DI* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_g = 0.0f, sum_g_norm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - m) * s;
    const float g = to_float(weight[c]) * to_float(dy[c]);
    sum_g += g;
    sum_g_norm += g * norm;
  }
  const float mean_g = warp_sum(sum_g) / C;
  const float mean_g_norm = warp_sum(sum_g_norm) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_float(x[c]) - m) * s;
    const float g = to_float(weight[c]) * to_float(dy[c]);
    dx[c] = from_float<DI>(to_float(dx[c]) + s * (g - mean_g - norm * mean_g_norm));
  }
}

// Kernel 2: block (32 x kWarpsPerBlock) handles channels [32 bx, 32 bx + 32)
// and rows [chunk * rows_per_chunk, ...). Thread (lane, w) sums rows
// w, w + 8, ... of the chunk for channel 32 bx + lane; the 8 partial sums are
// then added in w order. Writes partial[chunk, c] for dweight and dbias.
template <typename DO, typename I>
__global__ void layernorm_backward_partial_kernel(float* __restrict__ partial_dweight,
                                                  float* __restrict__ partial_dbias, const DO* __restrict__ dout,
                                                  const I* __restrict__ inp, const float* __restrict__ mean,
                                                  const float* __restrict__ rstd, std::int64_t N, int C,
                                                  std::int64_t rows_per_chunk) {
  // partial_* (chunks, C), dout (N, C), inp (N, C), mean (N), rstd (N)
  __shared__ float sh_dw[kWarpsPerBlock][32];
  __shared__ float sh_db[kWarpsPerBlock][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane;
  const std::int64_t row0 = blockIdx.y * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (std::int64_t n = row0 + w; n < row1; n += kWarpsPerBlock) {
      const float dy = to_float(dout[n * C + c]);
      const float norm = (to_float(inp[n * C + c]) - mean[n]) * rstd[n];
      dw += dy * norm;
      db += dy;
    }
  }
  sh_dw[w][lane] = dw;
  sh_db[w][lane] = db;
  __syncthreads();
  if (w == 0 && c < C) {
    float sdw = 0.0f, sdb = 0.0f;
    for (int k = 0; k < kWarpsPerBlock; ++k) {
      sdw += sh_dw[k][lane];
      sdb += sh_db[k][lane];
    }
    partial_dweight[blockIdx.y * std::int64_t{C} + c] = sdw;
    partial_dbias[blockIdx.y * std::int64_t{C} + c] = sdb;
  }
}

// ---- vectorised kernels (pack layout: layernorm_common.cuh) --------------------

// The fused backward: block blockIdx.x owns rows [bx * rows_per_chunk, ...)
// and writes partial row bx of dweight and dbias. Warp w takes rows w,
// w + kFusedWarps, ... in order; per row it loads dout, inp and dinp (K packs
// a lane, all loads issued before the first use), reduces the two row sums
// across the warp, writes dinp, and adds dout * norm and dout into its own
// slice of shared memory (index (j V + k) 32 + lane: conflict-free). The
// slices are then added in w order.
constexpr int kFusedWarps = 4;

template <typename T, int K>
constexpr int fused_shared_bytes() {
  return kFusedWarps * 2 * K * Pack16<T>::kSize * 32 * static_cast<int>(sizeof(float));
}

template <typename T, int K>
__global__ void __launch_bounds__(32 * kFusedWarps)
    layernorm_backward_fused_kernel(T* __restrict__ dinp, float* __restrict__ partial_dweight,
                                    float* __restrict__ partial_dbias, const T* __restrict__ dout,
                                    const T* __restrict__ inp, const T* __restrict__ weight,
                                    const float* __restrict__ mean, const float* __restrict__ rstd, std::int64_t N,
                                    int C, std::int64_t rows_per_chunk) {
  // dinp (N, C) accumulated, partial_* (chunks, C), dout (N, C), inp (N, C), weight (C), mean (N), rstd (N)
  constexpr int V = Pack16<T>::kSize;
  constexpr int kSlice = K * V * 32;  // one warp's sums of one parameter
  extern __shared__ float sums[];     // [kFusedWarps][2][kSlice]: dweight then dbias
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  float* acc_dw = sums + 2 * w * kSlice;
  float* acc_db = acc_dw + kSlice;
  for (int i = lane; i < kSlice; i += 32) acc_dw[i] = acc_db[i] = 0.0f;
  __syncwarp();
  const int packs = C / V;
  const std::int64_t row0 = blockIdx.x * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  for (std::int64_t n = row0 + w; n < row1; n += kFusedWarps) {
    const float m = mean[n], s = rstd[n];
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
    float sum_g = 0.0f, sum_g_norm = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int p = lane + 32 * j;
      if (p < packs) {
        const Pack16<T> wt = load16(weight + p * V);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float norm = (to_float(x[j].v[k]) - m) * s;
          const float g = to_float(wt.v[k]) * to_float(dy[j].v[k]);
          sum_g += g;
          sum_g_norm += g * norm;
        }
      }
    }
    const float mean_g = warp_sum(sum_g) / C;
    const float mean_g_norm = warp_sum(sum_g_norm) / C;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int p = lane + 32 * j;
      if (p < packs) {
        const Pack16<T> wt = load16(weight + p * V);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float norm = (to_float(x[j].v[k]) - m) * s;
          const float d = to_float(dy[j].v[k]);
          const float g = to_float(wt.v[k]) * d;
          dx[j].v[k] = from_float<T>(to_float(dx[j].v[k]) + s * (g - mean_g - norm * mean_g_norm));
          acc_dw[(j * V + k) * 32 + lane] += d * norm;
          acc_db[(j * V + k) * 32 + lane] += d;
        }
        store16(dinp + n * C + p * V, dx[j]);
      }
    }
  }
  __syncthreads();
  // Consecutive threads take consecutive channels, so the partial rows are
  // written coalesced.
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int p = c / V;
    const int i = ((p / 32) * V + c % V) * 32 + p % 32;
    float sdw = 0.0f, sdb = 0.0f;
    for (int u = 0; u < kFusedWarps; ++u) {
      sdw += sums[2 * u * kSlice + i];
      sdb += sums[(2 * u + 1) * kSlice + i];
    }
    partial_dweight[blockIdx.x * std::int64_t{C} + c] = sdw;
    partial_dbias[blockIdx.x * std::int64_t{C} + c] = sdb;
  }
}

// Kernel 2 with 16-byte loads: lane l of warp w covers the V channels of pack
// (32 blockIdx.x + l) over rows w, w + 8, ... of the chunk, and the warps'
// sums are added in w order: per channel the same order as the scalar kernel.
template <typename T>
__global__ void layernorm_backward_partial_vec_kernel(float* __restrict__ partial_dweight,
                                                      float* __restrict__ partial_dbias, const T* __restrict__ dout,
                                                      const T* __restrict__ inp, const float* __restrict__ mean,
                                                      const float* __restrict__ rstd, std::int64_t N, int C,
                                                      std::int64_t rows_per_chunk) {
  // partial_* (chunks, C), dout (N, C), inp (N, C), mean (N), rstd (N)
  constexpr int V = Pack16<T>::kSize;
  __shared__ float sh_dw[kWarpsPerBlock][V * 32];  // [warp][k * 32 + lane]: conflict-free stores
  __shared__ float sh_db[kWarpsPerBlock][V * 32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c0 = (blockIdx.x * 32 + lane) * V;
  const std::int64_t row0 = blockIdx.y * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  float dw[V], db[V];
#pragma unroll
  for (int k = 0; k < V; ++k) dw[k] = db[k] = 0.0f;
  if (c0 < C) {
    for (std::int64_t n = row0 + w; n < row1; n += kWarpsPerBlock) {
      const Pack16<T> dy = load16(dout + n * C + c0), x = load16(inp + n * C + c0);
      const float m = mean[n], s = rstd[n];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float g = to_float(dy.v[k]);
        dw[k] += g * ((to_float(x.v[k]) - m) * s);
        db[k] += g;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sh_dw[w][k * 32 + lane] = dw[k];
    sh_db[w][k * 32 + lane] = db[k];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < V * 32; i += blockDim.x) {
    const int c = (blockIdx.x * 32 + i % 32) * V + i / 32;
    if (c >= C) continue;
    float sdw = 0.0f, sdb = 0.0f;
    for (int k = 0; k < kWarpsPerBlock; ++k) {
      sdw += sh_dw[k][i];
      sdb += sh_db[k][i];
    }
    partial_dweight[blockIdx.y * std::int64_t{C} + c] = sdw;
    partial_dbias[blockIdx.y * std::int64_t{C} + c] = sdb;
  }
}

}  // namespace

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  for (const Tensor* t : {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd})
    expect_cuda(*t, "layernorm_backward: operand");
  expect_f32(dweight, "layernorm_backward: dweight (parameter gradients are f32)");
  expect_f32(dbias, "layernorm_backward: dbias (parameter gradients are f32)");
  expect_f32(mean, "layernorm_backward: mean");
  expect_f32(rstd, "layernorm_backward: rstd");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  if (N == 0) return;
  cudaStream_t stream = current_stream();

  // Fused: one dtype, C a whole number of packs, up to 8 packs a lane (2048
  // bf16, 1024 f32) in registers. Chunks of 32 rows (at most 1024 chunks):
  // enough blocks to fill the GPU at GPT sizes (256 for 8192 rows), and a
  // partial table small next to the activations (8192 x 1600: 3.3 MB).
  constexpr int kMaxBackwardPacks = 8;
  const bool same = all_vectorisable(inp.dtype(), {&dinp, &dout, &inp, &weight});
  const int k = same ? packs_per_lane(C, inp.dtype(), kMaxBackwardPacks, /*doubling=*/false) : 0;
  const RowChunks rc = k > 0 ? row_chunks(N, /*min_rows=*/32, /*max_chunks=*/1024) : row_chunks(N);
  ScratchPlan plan;
  const std::size_t at_dw = plan.add(sizeof(float) * rc.chunks * C), at_db = plan.add(sizeof(float) * rc.chunks * C);
  char* base = plan.allocate();
  float* partial_dw = reinterpret_cast<float*>(base + at_dw);  // (chunks, C)
  float* partial_db = reinterpret_cast<float*>(base + at_db);  // (chunks, C)

  if (k > 0) {
    dispatch_float(inp.dtype(), "layernorm_backward: inp", [&](auto tag) {
      using T = decltype(tag);
      with_packs<kMaxBackwardPacks, false>(k, [&](auto packs) {
        constexpr int K = decltype(packs)::value;
        const auto kernel = layernorm_backward_fused_kernel<T, K>;
        constexpr int shared_bytes = fused_shared_bytes<T, K>();
        // Over 48 KB of dynamic shared memory must be asked for (K >= 7 in bf16).
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
        kernel<<<static_cast<unsigned>(rc.chunks), 32 * kFusedWarps, shared_bytes, stream>>>(
            dinp.data_as<T>(), partial_dw, partial_db, dout.data_as<const T>(), inp.data_as<const T>(),
            weight.data_as<const T>(), mean.data_as<const float>(), rstd.data_as<const float>(), N,
            static_cast<int>(C), rc.rows_per_chunk);
        CUDA_CHECK_LAUNCH();
      });
    });
  } else if (same && C % pack16_elements(inp.dtype()) == 0) {
    // Rows too long for registers: the scalar dinp kernel (it reads each row
    // twice, the second time mostly from L2), partial sums with 16-byte loads.
    dispatch_float(inp.dtype(), "layernorm_backward: inp", [&](auto tag) {
      using T = decltype(tag);
      layernorm_backward_dinp_kernel<T, T, T, T><<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
          dinp.data_as<T>(), dout.data_as<const T>(), inp.data_as<const T>(), weight.data_as<const T>(),
          mean.data_as<const float>(), rstd.data_as<const float>(), N, static_cast<int>(C));
      CUDA_CHECK_LAUNCH();
      constexpr int V = Pack16<T>::kSize;
      const dim3 grid(ceil_div(C, 32 * V), static_cast<unsigned>(rc.chunks));
      layernorm_backward_partial_vec_kernel<T><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          partial_dw, partial_db, dout.data_as<const T>(), inp.data_as<const T>(), mean.data_as<const float>(),
          rstd.data_as<const float>(), N, static_cast<int>(C), rc.rows_per_chunk);
      CUDA_CHECK_LAUNCH();
    });
  } else {
    dispatch_float(dinp.dtype(), "layernorm_backward: dinp", [&](auto di_tag) {
      dispatch_float(dout.dtype(), "layernorm_backward: dout", [&](auto do_tag) {
        dispatch_float(inp.dtype(), "layernorm_backward: inp", [&](auto i_tag) {
          dispatch_float(weight.dtype(), "layernorm_backward: weight", [&](auto w_tag) {
            using DI = decltype(di_tag);
            using DO = decltype(do_tag);
            using I = decltype(i_tag);
            using W = decltype(w_tag);
            layernorm_backward_dinp_kernel<<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
                dinp.data_as<DI>(), dout.data_as<const DO>(), inp.data_as<const I>(), weight.data_as<const W>(),
                mean.data_as<const float>(), rstd.data_as<const float>(), N, static_cast<int>(C));
            CUDA_CHECK_LAUNCH();
          });
          using DO = decltype(do_tag);
          using I = decltype(i_tag);
          const dim3 grid(ceil_div(C, 32), static_cast<unsigned>(rc.chunks));
          layernorm_backward_partial_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
              partial_dw, partial_db, dout.data_as<const DO>(), inp.data_as<const I>(), mean.data_as<const float>(),
              rstd.data_as<const float>(), N, static_cast<int>(C), rc.rows_per_chunk);
          CUDA_CHECK_LAUNCH();
        });
      });
    });
  }
  const ChunkSums sums[2] = {{dweight.data_as<float>(), partial_dw}, {dbias.data_as<float>(), partial_db}};
  add_chunk_sums(sums, 2, rc.chunks, C, stream);
}

}  // namespace engine::cuda
