#include "engine/cuda/column_sums.h"

#include <algorithm>

#include "engine/cuda/common.cuh"

namespace engine::cuda {
namespace {

constexpr int kSumWarps = 8;

struct ChunkSumsPair {
  ChunkSums sums[2];
};

// blockIdx.y picks the reduction; blockIdx.x covers columns 32 bx .. 32 bx + 31.
__global__ void add_chunk_sums_kernel(ChunkSumsPair pair, int chunks, int C) {
  __shared__ float warp_sums[kSumWarps][32];
  const ChunkSums s = blockIdx.y == 0 ? pair.sums[0] : pair.sums[1];  // no run-time index: no local copy
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane;
  float sum = 0.0f;
  if (c < C) {
    // Unrolled so that several loads are in flight; the adds stay in order.
#pragma unroll 8
    for (int k = w; k < chunks; k += kSumWarps) sum += s.partial[std::int64_t{k} * C + c];
  }
  warp_sums[w][lane] = sum;
  __syncthreads();
  if (w == 0 && c < C) {
    float total = 0.0f;
    for (int k = 0; k < kSumWarps; ++k) total += warp_sums[k][lane];
    s.out[c] += total;
  }
}

// partial[chunk, c] = sum of x[n, c] over the chunk's rows. Block (32 x
// kSumWarps): lane l of warp w covers the V columns of pack 32 bx + l (V = 1
// for the scalar form) over rows w, w + kSumWarps, ... of chunk blockIdx.y;
// the warps' sums are then added in w order.
template <typename T, int V>
__global__ void column_partial_sums_kernel(float* __restrict__ partial, const T* __restrict__ x, std::int64_t N,
                                           int C, std::int64_t rows_per_chunk) {
  // partial (chunks, C), x (N, C)
  __shared__ float warp_sums[kSumWarps][V * 32];  // [warp][k * 32 + lane]: conflict-free
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c0 = (blockIdx.x * 32 + lane) * V;
  const std::int64_t row0 = blockIdx.y * rows_per_chunk;
  const std::int64_t row1 = min(N, row0 + rows_per_chunk);
  float sum[V];
#pragma unroll
  for (int k = 0; k < V; ++k) sum[k] = 0.0f;
  if (c0 < C) {
#pragma unroll 4
    for (std::int64_t n = row0 + w; n < row1; n += kSumWarps) {
      if constexpr (V == 1) {
        sum[0] += to_float(x[n * C + c0]);
      } else {
        const Pack16<T> v = load16(x + n * C + c0);
#pragma unroll
        for (int k = 0; k < V; ++k) sum[k] += to_float(v.v[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) warp_sums[w][k * 32 + lane] = sum[k];
  __syncthreads();
  for (int i = threadIdx.x; i < V * 32; i += blockDim.x) {
    const int c = (blockIdx.x * 32 + i % 32) * V + i / 32;
    if (c >= C) continue;
    float total = 0.0f;
    for (int k = 0; k < kSumWarps; ++k) total += warp_sums[k][i];
    partial[blockIdx.y * std::int64_t{C} + c] = total;
  }
}

}  // namespace

void add_chunk_sums(const ChunkSums* sums, int count, std::int64_t chunks, std::int64_t C, cudaStream_t stream) {
  ENGINE_CHECK(count == 1 || count == 2, "add_chunk_sums: 1 or 2 reductions, got ", count);
  if (C == 0 || chunks == 0) return;
  ChunkSumsPair pair;
  for (int i = 0; i < count; ++i) pair.sums[i] = sums[i];
  const dim3 grid(ceil_div(C, 32), static_cast<unsigned>(count));
  add_chunk_sums_kernel<<<grid, 32 * kSumWarps, 0, stream>>>(pair, static_cast<int>(chunks), static_cast<int>(C));
  CUDA_CHECK_LAUNCH();
}

RowChunks row_chunks(std::int64_t N, std::int64_t min_rows, std::int64_t max_chunks) {
  RowChunks r;
  r.chunks = std::max<std::int64_t>(1, std::min<std::int64_t>(max_chunks, (N + min_rows - 1) / min_rows));
  r.rows_per_chunk = (N + r.chunks - 1) / r.chunks;
  return r;
}

void add_column_sums(float* out, const Tensor& x, std::int64_t N, std::int64_t C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  const RowChunks rc = row_chunks(N);
  float* partial = static_cast<float*>(context().scratch(sizeof(float) * rc.chunks * C));  // (chunks, C)
  dispatch_float(x.dtype(), "add_column_sums: x", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = Pack16<T>::kSize;
    if (C % V == 0 && aligned(x.data(), 16)) {
      const dim3 grid(ceil_div(C, 32 * V), static_cast<unsigned>(rc.chunks));
      column_partial_sums_kernel<T, V><<<grid, 32 * kSumWarps, 0, stream>>>(
          partial, x.data_as<const T>(), N, static_cast<int>(C), rc.rows_per_chunk);
    } else {
      const dim3 grid(ceil_div(C, 32), static_cast<unsigned>(rc.chunks));
      column_partial_sums_kernel<T, 1><<<grid, 32 * kSumWarps, 0, stream>>>(
          partial, x.data_as<const T>(), N, static_cast<int>(C), rc.rows_per_chunk);
    }
    CUDA_CHECK_LAUNCH();
  });
  const ChunkSums sums{out, partial};
  add_chunk_sums(&sums, 1, rc.chunks, C, stream);
}

}  // namespace engine::cuda
