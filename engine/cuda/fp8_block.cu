// Block-scaled E4M3 casts (fp8_block.h). Each tile's amax is an exact max of
// abs bits (e4m3.cuh), its scale 448 / amax by the per-tensor rule, its
// factor 1 / scale, the codes e4m3(x * scale): so every code and factor
// equals engine/cpu/fp8_e4m3.h's e4m3_block_image, bit for bit.
//
// Written without a GPU (2026-11-29); tests/engine/cuda/test_cuda_fp8.cpp
// (CudaFp8Block.*) holds them to the CPU reference at the next lease.
#include <cstdint>

#include "engine/check.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/context.h"
#include "engine/cuda/e4m3.cuh"
#include "engine/cuda/fp8_block.h"

namespace engine::cuda {
namespace {

constexpr int kLanes = 32;
constexpr int kPerLane = kFp8Block / kLanes;  // 4 elements of a 1 x 128 tile per lane

// ---- 1 x 128 tiles along rows ---------------------------------------------------
// One warp per (row, tile): lane l holds elements l, l + 32, l + 64, l + 96 of
// the tile (coalesced), finds the tile's amax by a warp max, casts.
constexpr int kRowWarps = 8;

__global__ void __launch_bounds__(kLanes* kRowWarps)
    cast_rows_kernel(const bf16* __restrict__ x, std::int64_t rows, std::int64_t cols, std::uint8_t* __restrict__ q,
                     float* __restrict__ scales, std::int64_t tiles, std::int64_t scale_ld) {
  const int lane = threadIdx.x % kLanes;
  const std::int64_t unit = static_cast<std::int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / kLanes;
  if (unit >= rows * tiles) return;  // whole warps: the unit is the same on every lane
  const std::int64_t r = unit / tiles, kb = unit % tiles;
  const bf16* row = x + r * cols;
  bf16 v[kPerLane];
  unsigned m = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const std::int64_t c = kb * kFp8Block + lane + kLanes * j;
    v[j] = c < cols ? row[c] : __float2bfloat16(0.0f);
    m = max(m, abs_bits(v[j]));
  }
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  const float scale = scale_from_amax(__uint_as_float(m));
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const std::int64_t c = kb * kFp8Block + lane + kLanes * j;
    if (c < cols) q[r * cols + c] = to_e4m3(v[j], scale);
  }
  if (lane == 0) scales[kb * scale_ld + r] = rcp_rn(scale);
}

// ---- 128 x 1 tiles along columns, transposed ---------------------------------------
// Block (32, 8) threads = 128 rows x 32 columns of x: loaded into shared memory
// (each thread 16 rows of one column), each column's amax by one warp (4 columns
// a warp), then qt's 32 rows x 128 columns written, a warp per qt row at a time.
constexpr int kColTileCols = 32;
constexpr int kColThreadsY = 8;

__global__ void __launch_bounds__(kLanes* kColThreadsY)
    cast_transpose_columns_kernel(const bf16* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                  std::uint8_t* __restrict__ qt, float* __restrict__ scales, std::int64_t scale_ld) {
  __shared__ bf16 tile[kFp8Block][kColTileCols + 1];
  __shared__ float column_scale[kColTileCols];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kFp8Block;  // a 128-row tile of x
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kColTileCols;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = ty; i < kFp8Block; i += kColThreadsY) {
    const std::int64_t r = r0 + i, c = c0 + tx;
    tile[i][tx] = r < rows && c < cols ? x[r * cols + c] : __float2bfloat16(0.0f);
  }
  __syncthreads();
  // Warp ty takes columns ty, ty + 8, ty + 16, ty + 24; lane tx rows tx + 32 j.
  for (int k = ty; k < kColTileCols; k += kColThreadsY) {
    unsigned m = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) m = max(m, abs_bits(tile[tx + kLanes * j][k]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (tx == 0) column_scale[k] = scale_from_amax(__uint_as_float(m));
  }
  __syncthreads();
  for (int k = ty; k < kColTileCols; k += kColThreadsY) {
    const std::int64_t c = c0 + k;
    if (c >= cols) continue;
    const float scale = column_scale[k];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const std::int64_t r = r0 + tx + kLanes * j;
      if (r < rows) qt[c * rows + r] = to_e4m3(tile[tx + kLanes * j][k], scale);
    }
    if (tx == 0) scales[blockIdx.x * scale_ld + c] = rcp_rn(scale);
  }
}

// ---- 128 x 128 weight blocks ----------------------------------------------------------
// One block of 256 threads per weight block: the amax over its elements (block
// reduction on abs bits), then the codes, to q and (a byte at a time) to qt.
constexpr int kWeightThreads = 256;

__global__ void __launch_bounds__(kWeightThreads)
    cast_weight_kernel(const bf16* __restrict__ w, std::int64_t rows, std::int64_t cols, std::uint8_t* __restrict__ q,
                       float* __restrict__ scales, std::int64_t scale_ld, std::uint8_t* __restrict__ qt,
                       float* __restrict__ scales_t, std::int64_t scale_t_ld) {
  __shared__ unsigned warp_max[kWeightThreads / kLanes];
  __shared__ float block_scale;
  const std::int64_t rb = blockIdx.y, kb = blockIdx.x;
  const std::int64_t r0 = rb * kFp8Block, c0 = kb * kFp8Block;
  const int height = static_cast<int>(min(kFp8Block, rows - r0)), width = static_cast<int>(min(kFp8Block, cols - c0));
  unsigned m = 0;
  for (int i = threadIdx.x; i < height * width; i += kWeightThreads) {
    const int tr = i / width, tc = i % width;
    m = max(m, abs_bits(w[(r0 + tr) * cols + c0 + tc]));
  }
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  if (threadIdx.x % kLanes == 0) warp_max[threadIdx.x / kLanes] = m;
  __syncthreads();
  if (threadIdx.x < kLanes) {
    m = threadIdx.x < kWeightThreads / kLanes ? warp_max[threadIdx.x] : 0u;
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (threadIdx.x == 0) block_scale = scale_from_amax(__uint_as_float(m));
  }
  __syncthreads();
  const float scale = block_scale;
  for (int i = threadIdx.x; i < height * width; i += kWeightThreads) {
    const int tr = i / width, tc = i % width;
    const std::int64_t r = r0 + tr, c = c0 + tc;
    const std::uint8_t e = to_e4m3(w[r * cols + c], scale);
    if (q != nullptr) q[r * cols + c] = e;
    if (qt != nullptr) qt[c * rows + r] = e;
  }
  if (threadIdx.x == 0) {
    const float factor = rcp_rn(scale);
    if (scales != nullptr) scales[rb * scale_ld + kb] = factor;
    if (scales_t != nullptr) scales_t[kb * scale_t_ld + rb] = factor;
  }
}

void check_operands(const void* x, const void* q, const float* scales, std::int64_t rows, std::int64_t cols,
                    const char* what) {
  ENGINE_CHECK(rows >= 0 && cols >= 0, what, ": negative shape (", rows, ", ", cols, ")");
  ENGINE_CHECK(rows * cols == 0 || (x != nullptr && q != nullptr && scales != nullptr), what,
               ": x, the codes and the scale factors must not be null");
}

// The padding of a scale array between its rows: zeros, never garbage that a
// GEMM might read (cuBLASLt reads only the valid ones; this keeps any reader honest).
void zero_scales(float* scales, std::int64_t count, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(scales, 0, static_cast<std::size_t>(count) * sizeof(float), stream));
}

}  // namespace

void fp8_block_cast_rows(const bf16* x, std::int64_t rows, std::int64_t cols, __nv_fp8_e4m3* q, float* scales,
                         cudaStream_t stream) {
  check_operands(x, q, scales, rows, cols, "fp8_block_cast_rows");
  if (rows == 0 || cols == 0) return;
  const std::int64_t tiles = fp8_blocks(cols), ld = fp8_pad4(rows);
  if (ld != rows) zero_scales(scales, fp8_vec128_scales(rows, cols), stream);
  const std::int64_t units = rows * tiles;
  const std::int64_t blocks = (units + kRowWarps - 1) / kRowWarps;
  ENGINE_CHECK(blocks <= 0x7FFFFFFF, "fp8_block_cast_rows: ", rows, " x ", cols, " is too large");
  cast_rows_kernel<<<static_cast<unsigned>(blocks), kLanes * kRowWarps, 0, stream>>>(
      x, rows, cols, reinterpret_cast<std::uint8_t*>(q), scales, tiles, ld);
  CUDA_CHECK_LAUNCH();
}

void fp8_block_cast_transpose_columns(const bf16* x, std::int64_t rows, std::int64_t cols, __nv_fp8_e4m3* qt,
                                      float* scales, cudaStream_t stream) {
  check_operands(x, qt, scales, rows, cols, "fp8_block_cast_transpose_columns");
  if (rows == 0 || cols == 0) return;
  const std::int64_t ld = fp8_pad4(cols);  // qt has `cols` rows
  if (ld != cols) zero_scales(scales, fp8_vec128_scales(cols, rows), stream);
  const dim3 grid(static_cast<unsigned>(fp8_blocks(rows)),
                  static_cast<unsigned>((cols + kColTileCols - 1) / kColTileCols));
  ENGINE_CHECK(grid.y <= 65535, "fp8_block_cast_transpose_columns: ", cols, " columns is too many");
  cast_transpose_columns_kernel<<<grid, dim3(kLanes, kColThreadsY), 0, stream>>>(
      x, rows, cols, reinterpret_cast<std::uint8_t*>(qt), scales, ld);
  CUDA_CHECK_LAUNCH();
}

void fp8_block_cast_weight(const bf16* w, std::int64_t rows, std::int64_t cols, __nv_fp8_e4m3* q, float* scales,
                           __nv_fp8_e4m3* qt, float* scales_t, cudaStream_t stream) {
  ENGINE_CHECK((q == nullptr) == (scales == nullptr) && (qt == nullptr) == (scales_t == nullptr),
               "fp8_block_cast_weight: each copy comes with its scale factors");
  ENGINE_CHECK(q != nullptr || qt != nullptr, "fp8_block_cast_weight: neither copy asked for");
  check_operands(w, q != nullptr ? q : qt, q != nullptr ? scales : scales_t, rows, cols, "fp8_block_cast_weight");
  if (rows == 0 || cols == 0) return;
  const std::int64_t ld = fp8_pad4(fp8_blocks(cols)), ld_t = fp8_pad4(fp8_blocks(rows));
  if (scales != nullptr && ld != fp8_blocks(cols)) zero_scales(scales, fp8_blk128_scales(rows, cols), stream);
  if (scales_t != nullptr && ld_t != fp8_blocks(rows)) zero_scales(scales_t, fp8_blk128_scales(cols, rows), stream);
  const dim3 grid(static_cast<unsigned>(fp8_blocks(cols)), static_cast<unsigned>(fp8_blocks(rows)));
  ENGINE_CHECK(grid.y <= 65535, "fp8_block_cast_weight: ", rows, " rows is too many");
  cast_weight_kernel<<<grid, kWeightThreads, 0, stream>>>(w, rows, cols, reinterpret_cast<std::uint8_t*>(q), scales,
                                                          ld, reinterpret_cast<std::uint8_t*>(qt), scales_t, ld_t);
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
