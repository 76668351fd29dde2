// Pieces shared by the two passes of the causal attention core,
// attention_forward.cu and attention_backward.cu (shapes and algorithms are
// described there): the f32 path's per-warp row helpers, the bf16
// FlashAttention-2 (Dao 2023) tile sizes and tensor-core fragment helpers,
// and the host-side shape and operand checks of both entry points.
//
// Fragments are read from shared memory with 32-bit loads; the matrices an
// mma needs "k-contiguous" in the other orientation (V for P V, Q and dO for
// the dK/dV products, K for dQ) are also stored transposed while loading, so
// every fragment load is two consecutive bf16. Rows are padded by 8 elements
// so the 32 lanes of a fragment load hit 32 different banks.
//
// Everything here is in an unnamed namespace: each of the two .cu files
// compiles its own internal copy, so no symbol is defined in both.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/common.cuh"

namespace engine::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ============================================================================
// f32 path
// ============================================================================

constexpr int kF32MaxHead = 256;
constexpr int kF32PerLane = kF32MaxHead / 32;
constexpr int kF32Warps = 4;

// Decodes the warp's (b, h, row) and returns false past the end (H: the heads
// the grid runs over, query or key/value heads).
__device__ __forceinline__ bool f32_warp_row(int B, int T_, int H, int& b, int& h, int& row) {
  const std::int64_t w = blockIdx.x * std::int64_t{kF32Warps} + threadIdx.x / 32;  // (b H + h) T + row
  if (w >= std::int64_t{B} * H * T_) return false;
  row = static_cast<int>(w % T_);
  const std::int64_t bh = w / T_;
  h = static_cast<int>(bh % H);
  b = static_cast<int>(bh / H);
  return true;
}

// Loads x[d] for d = lane + 32 k into r[k] (0 past D).
__device__ __forceinline__ void f32_load(float (&r)[kF32PerLane], const float* x, int D, int lane) {
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    r[k] = d < D ? x[d] : 0.0f;
  }
}
__device__ __forceinline__ float f32_dot(const float (&r)[kF32PerLane], const float* x, int D, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) s += r[k] * x[d];
  }
  return warp_sum(s);
}

// ============================================================================
// bf16 path: FlashAttention-2 on tensor cores
// ============================================================================

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kTile = 64;  // forward query tile, and key tile of both passes
constexpr int kPad = 8;    // shared-memory row padding (elements): conflict-free fragment loads

// Two bf16 at p (p 4-byte aligned) as one mma operand register.
__device__ __forceinline__ std::uint32_t ld_pair(const bf16* p) { return *reinterpret_cast<const std::uint32_t*>(p); }

// Two floats as a bf16x2 register: lo in the low half (the lower column index).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// D (16x8, f32) += A (16x16, bf16, row-major) B (16x8, bf16, "col": k-major).
// Fragment layout (PTX ISA, mma.m16n8k16), g = lane / 4, t = lane % 4:
//   a[0] = A[g][2t..2t+1]      a[1] = A[g+8][2t..2t+1]
//   a[2] = A[g][2t+8..2t+9]    a[3] = A[g+8][2t+8..2t+9]
//   b0   = B[2t..2t+1][g]      b1   = B[2t+8..2t+9][g]
//   d[0..1] = D[g][2t..2t+1]   d[2..3] = D[g+8][2t..2t+1]
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A fragment of rows [r0, r0+16), columns [c0, c0+16) of a row-major smem matrix.
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const bf16* s, int ld, int r0, int c0, int g, int t) {
  a[0] = ld_pair(s + (r0 + g) * ld + c0 + 2 * t);
  a[1] = ld_pair(s + (r0 + g + 8) * ld + c0 + 2 * t);
  a[2] = ld_pair(s + (r0 + g) * ld + c0 + 2 * t + 8);
  a[3] = ld_pair(s + (r0 + g + 8) * ld + c0 + 2 * t + 8);
}
// B fragment (k = [c0, c0+16), n = [r0, r0+8)) read from smem stored n-major:
// B[k][n] = s[n][k], so the pairs along k are contiguous.
__device__ __forceinline__ void load_b(std::uint32_t& b0, std::uint32_t& b1, const bf16* s, int ld, int r0, int c0,
                                       int g, int t) {
  b0 = ld_pair(s + (r0 + g) * ld + c0 + 2 * t);
  b1 = ld_pair(s + (r0 + g) * ld + c0 + 2 * t + 8);
}
// The accumulators of two adjacent n-tiles (16 columns) as the A fragment of
// the next product (FA2's register reuse of P).
__device__ __forceinline__ void acc_to_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Loads rows [row0, row0 + rows) (D bf16 each, 16-byte chunks) of a global
// matrix with row stride `stride` into smem, zero past T. Optionally also
// stores the tile transposed (dst_t[d][r]).
template <int D>
__device__ __forceinline__ void load_tile(bf16* __restrict__ dst, int ld, bf16* __restrict__ dst_t, int ld_t,
                                          const bf16* __restrict__ src, std::int64_t stride, int row0, int T_,
                                          int rows) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < T_) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + c);
    if (dst != nullptr) *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
    if (dst_t != nullptr) {
      const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
      for (int k = 0; k < 8; ++k) dst_t[(c + k) * ld_t + r] = e[k];
    }
  }
}

// ============================================================================
// Host side: shapes and operand checks
// ============================================================================

// qkv (B, T, W) with W = (H + 2 KV) D: query head h at columns [h D, (h+1) D),
// key head g at [(H + g) D, ...), value head g at [(H + KV + g) D, ...); query
// head h reads key/value head h / group (grouped-query attention, Ainslie et
// al. 2023; KV = H is multi-head attention).
struct AttentionDims {
  int B, T, H, KV, D;
  float scale;
  int group() const { return H / KV; }                     // query heads per key/value head
  std::int64_t width() const { return std::int64_t{H + 2 * KV} * D; }  // W, qkv's row
  std::int64_t out_width() const { return std::int64_t{H} * D; }       // C, out's row
};

AttentionDims attention_dims(const Tensor& qkv, int n_head, int n_kv_head, const char* op) {
  ENGINE_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0, op, ": ", n_head,
               " query heads are not a multiple of ", n_kv_head, " key/value heads");
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), D = qkv.dim(2) / (n_head + 2 * n_kv_head);
  ENGINE_CHECK(B < 65536 && n_head < 65536 && T < (std::int64_t{1} << 30), op, ": B = ", B, ", n_head = ", n_head,
               ", T = ", T, " exceed the launch grid");
  return {static_cast<int>(B), static_cast<int>(T), n_head, n_kv_head, static_cast<int>(D),
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
}

void check_bf16_operands(std::initializer_list<const Tensor*> tensors, const char* op) {
  for (const Tensor* t : tensors) {
    ENGINE_CHECK(t->dtype() == DType::kBF16, op, ": ", t->describe(), " must be bf16 like qkv");
    ENGINE_CHECK(aligned(t->data(), 16), op, ": ", t->describe(), " must be 16-byte aligned (vector loads)");
  }
}

void check_flash_head_size(const AttentionDims& a, const char* op) {
  ENGINE_CHECK(a.D == 32 || a.D == 64 || a.D == 128, op, ": head size ", a.D,
               " is not supported by the bf16 flash-attention kernels (32, 64 or 128; f32 activations take any "
               "head size up to ", kF32MaxHead, ")");
}

void check_f32_operands(const AttentionDims& a, std::initializer_list<const Tensor*> tensors, const char* op) {
  ENGINE_CHECK(a.D <= kF32MaxHead, op, ": head size ", a.D, " exceeds the f32 path's limit of ", kF32MaxHead);
  for (const Tensor* t : tensors)
    ENGINE_CHECK(t->dtype() == DType::kF32, op, ": ", t->describe(), " must be f32 like qkv");
}

// Blocks of the f32 kernels: one warp per (b, query head, row), or per
// (b, key/value head, row) for the dK/dV kernel.
unsigned f32_blocks(const AttentionDims& a) {
  return ceil_div(std::int64_t{a.B} * a.H * a.T, kF32Warps);
}
unsigned f32_kv_blocks(const AttentionDims& a) {
  return ceil_div(std::int64_t{a.B} * a.KV * a.T, kF32Warps);
}

}  // namespace
}  // namespace engine::cuda
