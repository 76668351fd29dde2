// Layer normalisation (Ba, Kiros & Hinton 2016) over the last dim, eps = 1e-5,
// biased variance, as GPT-2 uses; forward and backward after llm.c.
//
// Statistics (mean, rstd) are f32 and computed in f32 from a two-pass
// variance (no cancellation when |mean| >> std). Activations may be f32 or
// bf16, weights f32 or bf16; the parameter gradients are f32.
//
// Backward runs three kernels, all deterministic:
//   1. dinp (one warp per row): dinp += rstd * (g - mean_c(g) - norm * mean_c(g * norm)),
//      with norm = (x - mean) * rstd and g = weight * dout.
//   2. dweight/dbias partials: a block sums 32 channels over one fixed chunk
//      of rows, in a fixed order, into a partial row of a scratch table.
//   3. the partial rows are summed in order and added to dweight, dbias.
// llm.c's single fused kernel uses a scratch and a second pass the same way;
// separating the dinp pass keeps each kernel simple at the cost of reading
// dout and inp twice.
//
// Each kernel has a vectorised form for the common case (activations,
// weights and dinp of one dtype, C a multiple of 8 bf16 or 4 f32, 16-byte
// aligned rows): 16-byte loads and stores, and in the row kernels the warp
// keeps its row in registers, so inp (and dout) are read from memory once.
// On the H100 (2026-11-23, gpt2-1558m, 8192 rows of 1600 bf16) the scalar
// kernels took 42 us forward and 124 us backward per call, where the bytes
// they must move take about 17 and 35 us at 3 TB/s. The scalar kernels remain
// for every other case (odd C, mixed dtypes, rows too long for registers).
// Both forms sum in the same order within a lane's elements, not across
// forms: results may differ between them by f32 rounding.
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kWarpsPerBlock = 8;

// One warp per row.
template <typename O, typename I, typename W>
__global__ void layernorm_forward_kernel(O* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const I* __restrict__ inp, const W* __restrict__ weight,
                                         const W* __restrict__ bias, std::int64_t N, int C) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C)
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
  const float s = rsqrtf(warp_sum(sq) / C + kLayerNormEps);
  O* o = out + n * C;  // (C)
  for (int c = lane; c < C; c += 32)
    o[c] = from_float<O>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

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

// Kernel 3: dweight[c] += sum over chunks (in order) of the partials; same for dbias.
__global__ void layernorm_backward_finish_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                                 const float* __restrict__ partial_dweight,
                                                 const float* __restrict__ partial_dbias, int chunks, int C) {
  // dweight, dbias (C); partial_* (chunks, C)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sdw = 0.0f, sdb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    sdw += partial_dweight[std::int64_t{k} * C + c];
    sdb += partial_dbias[std::int64_t{k} * C + c];
  }
  dweight[c] += sdw;
  dbias[c] += sdb;
}


// ---- vectorised kernels --------------------------------------------------------
// A warp's row is C / V packs of V = Pack16<T>::kSize elements; lane l holds
// packs l, l + 32, ..., at most K of them (K a compile-time constant, so the
// array stays in registers).

template <typename T, int K>
__global__ void layernorm_forward_vec_kernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                             const T* __restrict__ inp, const T* __restrict__ weight,
                                             const T* __restrict__ bias, std::int64_t N, int C) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C)
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
  const float s = rsqrtf(warp_sum(sq) / C + kLayerNormEps);
  T* o = out + n * C;  // (C)
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      const Pack16<T> w = load16(weight + p * V), b = load16(bias + p * V);
      Pack16<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k)
        r.v[k] = from_float<T>((to_float(row[j].v[k]) - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
      store16(o + p * V, r);
    }
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T, int K>
__global__ void layernorm_backward_dinp_vec_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                                   const T* __restrict__ inp, const T* __restrict__ weight,
                                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                                   std::int64_t N, int C) {
  // dinp (N, C) accumulated, dout (N, C), inp (N, C), weight (C), mean (N), rstd (N)
  constexpr int V = Pack16<T>::kSize;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = blockIdx.x * std::int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const int packs = C / V;
  const float m = mean[n], s = rstd[n];
  Pack16<T> dy[K], x[K];
  float sum_g = 0.0f, sum_g_norm = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      dy[j] = load16(dout + n * C + p * V);
      x[j] = load16(inp + n * C + p * V);
      const Pack16<T> w = load16(weight + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float norm = (to_float(x[j].v[k]) - m) * s;
        const float g = to_float(w.v[k]) * to_float(dy[j].v[k]);
        sum_g += g;
        sum_g_norm += g * norm;
      }
    }
  }
  const float mean_g = warp_sum(sum_g) / C;
  const float mean_g_norm = warp_sum(sum_g_norm) / C;
  T* dx = dinp + n * C;  // (C)
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const int p = lane + 32 * j;
    if (p < packs) {
      const Pack16<T> w = load16(weight + p * V);
      Pack16<T> d = load16(dx + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float norm = (to_float(x[j].v[k]) - m) * s;
        const float g = to_float(w.v[k]) * to_float(dy[j].v[k]);
        d.v[k] = from_float<T>(to_float(d.v[k]) + s * (g - mean_g - norm * mean_g_norm));
      }
      store16(dx + p * V, d);
    }
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

// The packs per lane (1, 2, 4, ... up to max_k) that hold a row of C elements
// of `dtype` in one warp's registers; 0 when C is not a whole number of packs
// or the row is longer than 32 * max_k packs.
int packs_per_lane(std::int64_t C, DType dtype, int max_k) {
  const std::int64_t v = pack16_elements(dtype);
  if (C % v != 0) return 0;
  for (int k = 1; k <= max_k; k *= 2)
    if (C / v <= 32 * k) return k;
  return 0;
}

// Calls f(std::integral_constant<int, K>{}) for k = K, a power of two up to
// MaxK (only those kernels are instantiated).
template <int MaxK, int K = 1, typename F>
void with_packs(int k, F&& f) {
  if (k == K) {
    f(std::integral_constant<int, K>{});
    return;
  }
  if constexpr (K < MaxK) {
    with_packs<MaxK, 2 * K>(k, std::forward<F>(f));
  } else {
    ENGINE_FAIL("layernorm: no vectorised kernel for ", k, " packs per lane");
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

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias) {
  for (const Tensor* t : {&out, &mean, &rstd, &inp, &weight, &bias}) expect_cuda(*t, "layernorm_forward: operand");
  expect_f32(mean, "layernorm_forward: mean");
  expect_f32(rstd, "layernorm_forward: rstd");
  ENGINE_CHECK(weight.dtype() == bias.dtype(), "layernorm_forward: weight ", weight.describe(), " and bias ",
               bias.describe(), " must share a dtype");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  if (N == 0) return;
  // Rows of up to 16 packs per lane (4096 bf16, 2048 f32) in registers.
  constexpr int kMaxForwardPacks = 16;
  const int k = packs_per_lane(C, inp.dtype(), kMaxForwardPacks);
  if (k > 0 && all_vectorisable(inp.dtype(), {&out, &inp, &weight, &bias})) {
    dispatch_float(inp.dtype(), "layernorm_forward: inp", [&](auto tag) {
      using T = decltype(tag);
      with_packs<kMaxForwardPacks>(k, [&](auto packs) {
        layernorm_forward_vec_kernel<T, decltype(packs)::value>
            <<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, current_stream()>>>(
                out.data_as<T>(), mean.data_as<float>(), rstd.data_as<float>(), inp.data_as<const T>(),
                weight.data_as<const T>(), bias.data_as<const T>(), N, static_cast<int>(C));
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
            weight.data_as<const W>(), bias.data_as<const W>(), N, static_cast<int>(C));
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

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

  // Row chunks for the weight-gradient reduction: a function of N only, so
  // the summation order (and the result) never depends on the GPU.
  constexpr std::int64_t kMinRowsPerChunk = 64, kMaxChunks = 64;
  const std::int64_t chunks = std::min<std::int64_t>(kMaxChunks, (N + kMinRowsPerChunk - 1) / kMinRowsPerChunk);
  const std::int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  ScratchPlan plan;
  const std::size_t at_dw = plan.add(sizeof(float) * chunks * C), at_db = plan.add(sizeof(float) * chunks * C);
  char* base = plan.allocate();
  float* partial_dw = reinterpret_cast<float*>(base + at_dw);  // (chunks, C)
  float* partial_db = reinterpret_cast<float*>(base + at_db);  // (chunks, C)

  // Vectorised: dout and inp of up to 8 packs per lane (2048 bf16, 1024 f32)
  // in registers for dinp; the partial sums need only C % V == 0.
  const bool same = all_vectorisable(inp.dtype(), {&dinp, &dout, &inp, &weight});
  constexpr int kMaxBackwardPacks = 8;
  const int k = packs_per_lane(C, inp.dtype(), kMaxBackwardPacks);
  const bool vec_partial = same && C % pack16_elements(inp.dtype()) == 0;
  if (vec_partial) {
    dispatch_float(inp.dtype(), "layernorm_backward: inp", [&](auto tag) {
      using T = decltype(tag);
      if (k > 0) {
        with_packs<kMaxBackwardPacks>(k, [&](auto packs) {
          layernorm_backward_dinp_vec_kernel<T, decltype(packs)::value>
              <<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
                  dinp.data_as<T>(), dout.data_as<const T>(), inp.data_as<const T>(), weight.data_as<const T>(),
                  mean.data_as<const float>(), rstd.data_as<const float>(), N, static_cast<int>(C));
          CUDA_CHECK_LAUNCH();
        });
      } else {
        layernorm_backward_dinp_kernel<T, T, T, T><<<ceil_div(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
            dinp.data_as<T>(), dout.data_as<const T>(), inp.data_as<const T>(), weight.data_as<const T>(),
            mean.data_as<const float>(), rstd.data_as<const float>(), N, static_cast<int>(C));
        CUDA_CHECK_LAUNCH();
      }
      constexpr int V = Pack16<T>::kSize;
      const dim3 grid(ceil_div(C, 32 * V), static_cast<unsigned>(chunks));
      layernorm_backward_partial_vec_kernel<T><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
          partial_dw, partial_db, dout.data_as<const T>(), inp.data_as<const T>(), mean.data_as<const float>(),
          rstd.data_as<const float>(), N, static_cast<int>(C), rows_per_chunk);
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
          const dim3 grid(ceil_div(C, 32), static_cast<unsigned>(chunks));
          layernorm_backward_partial_kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
              partial_dw, partial_db, dout.data_as<const DO>(), inp.data_as<const I>(), mean.data_as<const float>(),
              rstd.data_as<const float>(), N, static_cast<int>(C), rows_per_chunk);
          CUDA_CHECK_LAUNCH();
        });
      });
    });
  }
  layernorm_backward_finish_kernel<<<ceil_div(C, kThreads), kThreads, 0, stream>>>(
      dweight.data_as<float>(), dbias.data_as<float>(), partial_dw, partial_db, static_cast<int>(chunks),
      static_cast<int>(C));
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
