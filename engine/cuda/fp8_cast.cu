// E4M3 casts with per-tensor current scaling (fp8_cast.h): amax, cast, and
// the fused cast-transpose.
//
// Bit-exactness with the CPU reference (engine/cpu/fp8_e4m3.cpp): the scale,
// its inverse and the conversion are e4m3.cuh's (IEEE-exact PTX under
// --use_fast_math), and the amax is an unsigned max on the floats' abs bits,
// exact, order-free, and NaN if x holds a NaN (e4m3.cuh).
//
// Indices are 64-bit throughout: N * K exceeds 2^31 at large micro-batches
// (16 x 1024 tokens x 6400 = 1.05e8 here, but B 64 x T 4096 x 6400 does not fit).
#include <cfloat>
#include <cstdint>

#include "engine/check.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/context.h"
#include "engine/cuda/e4m3.cuh"
#include "engine/cuda/fp8_cast.h"

namespace engine::cuda {
namespace {

// Block (0, 0)'s first thread publishes scale and scale_inv. Every thread of
// every block computes the same scale from the same amax, so no thread waits.
__device__ __forceinline__ void publish_scale(float scale, float* scale_out, float* scale_inv_out) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    *scale_out = scale;
    *scale_inv_out = rcp_rn(scale);
  }
}

// ---- amax ----------------------------------------------------------------------
// x: n bf16. Grid-stride over 8-element (16-byte) packs when `packed`, then
// the tail element by element; block max -> atomicMax(amax_bits).
constexpr int kAmaxThreads = 256;

__global__ void __launch_bounds__(kAmaxThreads) amax_kernel(const bf16* __restrict__ x, std::int64_t n, bool packed,
                                                            unsigned* __restrict__ amax_bits) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned m = 0;
  std::int64_t done = 0;
  if (packed) {
    const std::int64_t packs = n / 8;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (std::int64_t i = tid; i < packs; i += stride) {
      const uint4 v = xv[i];
      m = max(m, max(max(abs_bits_pair(v.x), abs_bits_pair(v.y)), max(abs_bits_pair(v.z), abs_bits_pair(v.w))));
    }
    done = packs * 8;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) m = max(m, abs_bits(x[i]));

  m = __reduce_max_sync(0xFFFFFFFFu, m);
  __shared__ unsigned warp_max[kAmaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < kAmaxThreads / 32 ? warp_max[lane] : 0u;
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (lane == 0 && m != 0) atomicMax(amax_bits, m);
  }
}

// ---- cast ------------------------------------------------------------------------
// x: n bf16 -> q: n E4M3. Packs of 8 (16-byte load, 8-byte store) when
// `packed`, then the tail.
__global__ void cast_kernel(const bf16* __restrict__ x, std::int64_t n, bool packed, const float* __restrict__ amax,
                            std::uint8_t* __restrict__ q, float* __restrict__ scale_out,
                            float* __restrict__ scale_inv_out) {
  const float scale = scale_from_amax(*amax);
  publish_scale(scale, scale_out, scale_inv_out);
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (packed) {
    const std::int64_t packs = n / 8;
    for (std::int64_t i = tid; i < packs; i += stride) {
      const Pack16<bf16> v = load16(x + i * 8);
      unsigned lo = 0, hi = 0;
      for (int j = 0; j < 4; ++j) lo |= static_cast<unsigned>(to_e4m3(v.v[j], scale)) << (8 * j);
      for (int j = 0; j < 4; ++j) hi |= static_cast<unsigned>(to_e4m3(v.v[4 + j], scale)) << (8 * j);
      *reinterpret_cast<uint2*>(q + i * 8) = make_uint2(lo, hi);  // little-endian: element j at byte j
    }
    done = packs * 8;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) q[i] = to_e4m3(x[i], scale);
}

// ---- cast-transpose, packed: 64 x 64 tiles ------------------------------------
// Needs rows % 8 == 0, cols % 8 == 0, x 16-byte aligned, q and qt 8-byte
// aligned. Block (256 threads) = tile (rows r0 .. r0+63, cols c0 .. c0+63):
//   load:  64 rows x 8 packs of 8 bf16; pack p -> row p / 8, cols (p % 8) * 8;
//          converted, stored to q (8 bytes) and to the shared tile.
//   store: 64 rows of qt (one per x column) x 8 packs of 8 bytes; pack p ->
//          qt row c0 + p / 8, qt cols r0 + (p % 8) * 8, gathered from a
//          column of the tile.
// A pack is inside the matrix iff its first element is (rows and cols are
// multiples of 8), so one bounds check per pack covers all 8 elements.
constexpr int kTile = 64;
constexpr int kTileThreads = 256;
constexpr int kTilePacks = kTile * kTile / 8;  // 512: two per thread, each way

__global__ void __launch_bounds__(kTileThreads)
    cast_transpose_packed_kernel(const bf16* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                 const float* __restrict__ amax, std::uint8_t* __restrict__ q,
                                 std::uint8_t* __restrict__ qt, float* __restrict__ scale_out,
                                 float* __restrict__ scale_inv_out) {
  // Row pitch 68 bytes (17 words): the store phase gathers one byte from each
  // of 8 rows 8 apart, 136 words apart, so a warp's gathers meet at most 2 to a
  // bank (a 64- or 72-byte pitch puts 4 or 8 on one bank). Rows stay 4-byte
  // aligned for the load phase's 32-bit stores.
  __shared__ alignas(16) std::uint8_t tile[kTile][kTile + 4];
  const float scale = scale_from_amax(*amax);
  publish_scale(scale, scale_out, scale_inv_out);
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kTile;

  for (int p = threadIdx.x; p < kTilePacks; p += kTileThreads) {
    const int tr = p / 8, tc = (p % 8) * 8;
    const std::int64_t r = r0 + tr, c = c0 + tc;
    if (r < rows && c < cols) {
      const Pack16<bf16> v = load16(x + r * cols + c);
      unsigned lo = 0, hi = 0;  // elements 0-3 and 4-7, element j in byte j % 4 (little-endian)
      for (int j = 0; j < 4; ++j) lo |= static_cast<unsigned>(to_e4m3(v.v[j], scale)) << (8 * j);
      for (int j = 0; j < 4; ++j) hi |= static_cast<unsigned>(to_e4m3(v.v[4 + j], scale)) << (8 * j);
      *reinterpret_cast<unsigned*>(&tile[tr][tc]) = lo;  // tr * 68 + tc: a multiple of 4
      *reinterpret_cast<unsigned*>(&tile[tr][tc + 4]) = hi;
      if (q != nullptr) *reinterpret_cast<uint2*>(q + r * cols + c) = make_uint2(lo, hi);
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < kTilePacks; p += kTileThreads) {
    const int tc = p / 8, tr = (p % 8) * 8;  // qt row = x column c0 + tc; qt cols = x rows r0 + tr ..
    const std::int64_t c = c0 + tc, r = r0 + tr;
    if (c < cols && r < rows) {
      unsigned lo = 0, hi = 0;
      for (int j = 0; j < 4; ++j) lo |= static_cast<unsigned>(tile[tr + j][tc]) << (8 * j);
      for (int j = 0; j < 4; ++j) hi |= static_cast<unsigned>(tile[tr + 4 + j][tc]) << (8 * j);
      *reinterpret_cast<uint2*>(qt + c * rows + r) = make_uint2(lo, hi);
    }
  }
}

// ---- cast-transpose, any shape: 32 x 32 tiles, one element per access ------------
// Block (32, 8) threads; tile rows r0 .. r0+31, cols c0 .. c0+31.
constexpr int kSmallTile = 32;

__global__ void cast_transpose_scalar_kernel(const bf16* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                             const float* __restrict__ amax, std::uint8_t* __restrict__ q,
                                             std::uint8_t* __restrict__ qt, float* __restrict__ scale_out,
                                             float* __restrict__ scale_inv_out) {
  __shared__ std::uint8_t tile[kSmallTile][kSmallTile + 1];
  const float scale = scale_from_amax(*amax);
  publish_scale(scale, scale_out, scale_inv_out);
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kSmallTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kSmallTile;
  for (int i = threadIdx.y; i < kSmallTile; i += blockDim.y) {
    const std::int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const std::uint8_t e = to_e4m3(x[r * cols + c], scale);
      tile[i][threadIdx.x] = e;
      if (q != nullptr) q[r * cols + c] = e;
    }
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kSmallTile; i += blockDim.y) {
    const std::int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) qt[c * rows + r] = tile[threadIdx.x][i];
  }
}

void check_scale(const Fp8Scale& s, const char* what) {
  ENGINE_CHECK(s.amax != nullptr && s.scale != nullptr && s.scale_inv != nullptr, what,
               ": the scaling state (amax, scale, scale_inv) needs three device pointers");
}

}  // namespace

void fp8_amax(const bf16* x, std::int64_t n, const Fp8Scale& s, cudaStream_t stream) {
  ENGINE_CHECK(s.amax != nullptr, "fp8_amax: the scaling state has no amax pointer");  // the only one it writes
  ENGINE_CHECK(n >= 0 && (n == 0 || x != nullptr), "fp8_amax: n = ", n, " with x ", static_cast<const void*>(x));
  CUDA_CHECK(cudaMemsetAsync(s.amax, 0, sizeof(float), stream));
  if (n == 0) return;
  const bool packed = aligned(x, 16);
  const std::int64_t work = packed ? n / 8 + n % 8 : n;
  // At most 8 blocks (2048 threads, a full SM) per SM: enough 16-byte loads in
  // flight to cover DRAM latency, and each block ends in one atomic, so the
  // count of atomics stays near a thousand whatever n is.
  const unsigned blocks = grid_for(work, kAmaxThreads, 8 * static_cast<std::int64_t>(context().sm_count()));
  amax_kernel<<<blocks, kAmaxThreads, 0, stream>>>(x, n, packed, reinterpret_cast<unsigned*>(s.amax));
  CUDA_CHECK_LAUNCH();
}

void fp8_cast(const bf16* x, std::int64_t n, const Fp8Scale& s, __nv_fp8_e4m3* q, cudaStream_t stream) {
  check_scale(s, "fp8_cast");
  ENGINE_CHECK(n >= 0 && (n == 0 || (x != nullptr && q != nullptr)), "fp8_cast: n = ", n, " with null pointers");
  const bool packed = aligned(x, 16) && aligned(q, 8);
  const std::int64_t work = packed ? n / 8 + n % 8 : n;
  // n == 0 still launches one block, so that scale and scale_inv are written.
  cast_kernel<<<grid_for(work), kThreads, 0, stream>>>(x, n, packed, s.amax, reinterpret_cast<std::uint8_t*>(q),
                                                       s.scale, s.scale_inv);
  CUDA_CHECK_LAUNCH();
}

void fp8_cast_transpose(const bf16* x, std::int64_t rows, std::int64_t cols, const Fp8Scale& s, __nv_fp8_e4m3* q,
                        __nv_fp8_e4m3* qt, cudaStream_t stream) {
  check_scale(s, "fp8_cast_transpose");
  ENGINE_CHECK(rows > 0 && cols > 0, "fp8_cast_transpose: shape (", rows, ", ", cols, ") must be positive");
  ENGINE_CHECK(x != nullptr && qt != nullptr, "fp8_cast_transpose: x and qt must not be null");
  const bool packed = rows % 8 == 0 && cols % 8 == 0 && aligned(x, 16) && aligned(qt, 8) &&
                      (q == nullptr || aligned(q, 8));
  const int tile = packed ? kTile : kSmallTile;
  const std::int64_t row_tiles = (rows + tile - 1) / tile, col_tiles = (cols + tile - 1) / tile;
  ENGINE_CHECK(row_tiles <= INT32_MAX && col_tiles <= 65535, "fp8_cast_transpose: shape (", rows, ", ", cols,
               ") needs a grid of ", row_tiles, " x ", col_tiles, " tiles, beyond CUDA's limits (2^31-1 x 65535)");
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles));
  auto* q8 = reinterpret_cast<std::uint8_t*>(q);
  auto* qt8 = reinterpret_cast<std::uint8_t*>(qt);
  if (packed)
    cast_transpose_packed_kernel<<<grid, kTileThreads, 0, stream>>>(x, rows, cols, s.amax, q8, qt8, s.scale,
                                                                    s.scale_inv);
  else
    cast_transpose_scalar_kernel<<<grid, dim3(kSmallTile, 8), 0, stream>>>(x, rows, cols, s.amax, q8, qt8, s.scale,
                                                                           s.scale_inv);
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
