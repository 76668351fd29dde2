// Causal multi-head self-attention core, forward and backward.
//
//   qkv  (B, T, 3C)  [q | k | v] per position, C = H * D, head h at [h D, (h+1) D)
//   out  (B, T, C)   out = softmax(q k^T / sqrt(D), causal) v, per head
//   lse  (B, H, T)   f32 log-sum-exp of each softmax row: the only saved state
//   dqkv (B, T, 3C)  written (every element)
//
// bf16 activations: FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning"), on tensor cores
// through mma.sync.m16n8k16 (bf16 in, fp32 accumulate), never materialising
// a T x T matrix:
//   forward  (Algorithm 1) one block per (64-query tile, head, batch), four
//            warps of 16 query rows. Q fragments stay in registers; K and V
//            tiles of 64 keys stream through shared memory; each warp keeps
//            the online-softmax running max and sum (Milakov & Gimelshein
//            2018) for its rows, in the log2 domain (exp2 is one MUFU op).
//            Key tiles stop at the diagonal (causal), and the diagonal tile
//            is masked element-wise. Saves lse = m + log(l) per row.
//   backward (Algorithm 2) D_i = rowsum(dO_i o O_i) first (delta kernel).
//            Then one block per (64-key tile, head, batch), four warps of 16
//            keys, loops over the query tiles at or below the diagonal:
//            recomputes P^T = exp(K Q^T * scale - lse), dP^T = V dO^T,
//            dS^T = P^T o (dP^T - D), accumulates dV += P^T dO and
//            dK += dS^T Q in registers, and adds dQ += dS K into an f32
//            scratch with atomics (the paper's choice; dQ's summation order
//            is therefore not deterministic, unlike every other op here). A
//            last kernel scales dQ and writes it into dqkv as bf16.
//   Fragments are read from shared memory with 32-bit loads; the matrices
//   an mma needs "k-contiguous" in the other orientation (V for P V, Q and
//   dO for the dK/dV products, K for dQ) are also stored transposed while
//   loading, so every fragment load is two consecutive bf16. Rows are padded
//   by 8 elements so the 32 lanes of a fragment load hit 32 different banks.
//   Head sizes 32, 64 and 128 are instantiated (64 is every GPT-2 preset);
//   T need not be a multiple of the tile: rows past T load as zeros, are
//   masked, and are never written.
//
// f32 activations (the fp32 mode that is compared with the CPU): a simple,
// exact path, one warp per query row (forward, dQ) or key row (dK, dV),
// lanes over the head dimension, online softmax over keys. Deterministic.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ============================================================================
// Shared by both paths
// ============================================================================

// delta[b, h, t] = sum_d dout[b, t, h D + d] * out[b, t, h D + d]   (FA2's D_i)
// One warp per (b, t, h).
template <typename T>
__global__ void attention_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout,
                                       const T* __restrict__ out, int B, int T_, int H, int D) {
  // delta (B, H, T), dout (B, T, C), out (B, T, C)
  const int lane = threadIdx.x % 32;
  const std::int64_t row = blockIdx.x * std::int64_t{blockDim.x / 32} + threadIdx.x / 32;  // (b T + t) H + h
  if (row >= std::int64_t{B} * T_ * H) return;
  const int h = static_cast<int>(row % H);
  const std::int64_t bt = row / H;
  const int t = static_cast<int>(bt % T_), b = static_cast<int>(bt / T_);
  const T* dy = dout + bt * H * D + std::int64_t{h} * D;
  const T* y = out + bt * H * D + std::int64_t{h} * D;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) sum += to_float(dy[d]) * to_float(y[d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[(std::int64_t{b} * H + h) * T_ + t] = sum;
}

// ============================================================================
// f32 path
// ============================================================================

constexpr int kF32MaxHead = 256;
constexpr int kF32PerLane = kF32MaxHead / 32;
constexpr int kF32Warps = 4;

// Decodes the warp's (b, h, row) and returns false past the end.
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

// One warp per query row i: one pass over keys j <= i with the online softmax.
__global__ void attention_forward_f32_kernel(float* __restrict__ out, float* __restrict__ lse,
                                             const float* __restrict__ qkv, int B, int T_, int H, int D,
                                             float scale) {
  // out (B, T, C), lse (B, H, T), qkv (B, T, 3C)
  int b, h, i;
  if (!f32_warp_row(B, T_, H, b, h, i)) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t C = std::int64_t{H} * D, C3 = 3 * C;
  const float* base = qkv + std::int64_t{b} * T_ * C3 + std::int64_t{h} * D;
  float q[kF32PerLane], acc[kF32PerLane] = {};
  f32_load(q, base + i * C3, D, lane);
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float* kv = base + j * C3;
    const float s = f32_dot(q, kv + C, D, lane) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < kF32PerLane; ++k) {
      const int d = lane + 32 * k;
      acc[k] = acc[k] * corr + (d < D ? p * kv[2 * C + d] : 0.0f);
    }
    m = m_new;
  }
  float* o = out + (std::int64_t{b} * T_ + i) * C + std::int64_t{h} * D;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) o[d] = acc[k] / l;
  }
  if (lane == 0) lse[(std::int64_t{b} * H + h) * T_ + i] = m + logf(l);
}

// One warp per query row i: dq_i = scale * sum_{j<=i} dS_ij k_j,
// dS_ij = P_ij (dout_i . v_j - delta_i), P_ij = exp(scale q_i . k_j - lse_i).
__global__ void attention_backward_dq_f32_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                                 const float* __restrict__ qkv, const float* __restrict__ lse,
                                                 const float* __restrict__ delta, int B, int T_, int H, int D,
                                                 float scale) {
  // dqkv (B, T, 3C): q part written; dout (B, T, C); qkv (B, T, 3C); lse, delta (B, H, T)
  int b, h, i;
  if (!f32_warp_row(B, T_, H, b, h, i)) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t C = std::int64_t{H} * D, C3 = 3 * C;
  const float* base = qkv + std::int64_t{b} * T_ * C3 + std::int64_t{h} * D;
  const std::int64_t stat = (std::int64_t{b} * H + h) * T_ + i;
  float q[kF32PerLane], dy[kF32PerLane], dq[kF32PerLane] = {};
  f32_load(q, base + i * C3, D, lane);
  f32_load(dy, dout + (std::int64_t{b} * T_ + i) * C + std::int64_t{h} * D, D, lane);
  const float lse_i = lse[stat], delta_i = delta[stat];
  for (int j = 0; j <= i; ++j) {
    const float* kv = base + j * C3;
    const float p = expf(f32_dot(q, kv + C, D, lane) * scale - lse_i);
    const float ds = p * (f32_dot(dy, kv + 2 * C, D, lane) - delta_i);
#pragma unroll
    for (int k = 0; k < kF32PerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) dq[k] += ds * kv[C + d];
    }
  }
  float* out = dqkv + (std::int64_t{b} * T_ + i) * C3 + std::int64_t{h} * D;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) out[d] = dq[k] * scale;
  }
}

// One warp per key row j: dv_j = sum_{i>=j} P_ij dout_i, dk_j = scale sum_{i>=j} dS_ij q_i.
__global__ void attention_backward_dkv_f32_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                                  const float* __restrict__ qkv, const float* __restrict__ lse,
                                                  const float* __restrict__ delta, int B, int T_, int H, int D,
                                                  float scale) {
  // dqkv (B, T, 3C): k and v parts written; the rest as above
  int b, h, j;
  if (!f32_warp_row(B, T_, H, b, h, j)) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t C = std::int64_t{H} * D, C3 = 3 * C;
  const float* base = qkv + std::int64_t{b} * T_ * C3 + std::int64_t{h} * D;
  const float* dout_b = dout + std::int64_t{b} * T_ * C + std::int64_t{h} * D;
  const std::int64_t stat0 = (std::int64_t{b} * H + h) * T_;
  float kr[kF32PerLane], vr[kF32PerLane], dk[kF32PerLane] = {}, dv[kF32PerLane] = {};
  f32_load(kr, base + j * C3 + C, D, lane);
  f32_load(vr, base + j * C3 + 2 * C, D, lane);
  for (int i = j; i < T_; ++i) {
    const float* q = base + i * C3;
    const float* dy = dout_b + i * C;
    const float p = expf(f32_dot(kr, q, D, lane) * scale - lse[stat0 + i]);
    const float ds = p * (f32_dot(vr, dy, D, lane) - delta[stat0 + i]);
#pragma unroll
    for (int k = 0; k < kF32PerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) {
        dv[k] += p * dy[d];
        dk[k] += ds * q[d];
      }
    }
  }
  float* out = dqkv + (std::int64_t{b} * T_ + j) * C3 + std::int64_t{h} * D;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) {
      out[C + d] = dk[k] * scale;
      out[2 * C + d] = dv[k];
    }
  }
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

template <int D>
struct FlashForwardSmem {
  static constexpr int kLd = D + kPad;      // q, k: [64][D + 8]
  static constexpr int kLdT = kTile + kPad; // v^T: [D][64 + 8]
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTile * kLd;
  static constexpr int kVt = kK + kTile * kLd;
  static constexpr int kElements = kVt + D * kLdT;
  static constexpr std::size_t kBytes = sizeof(bf16) * kElements;
};

template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T_,
                         int H, float scale_log2) {
  // out (B, T, C), lse (B, H, T), qkv (B, T, 3C); grid (ceil(T/64), H, B)
  static_assert(D % 16 == 0, "head size must be a multiple of 16");
  using S = FlashForwardSmem<D>;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* q_s = reinterpret_cast<bf16*>(flash_smem) + S::kQ;   // (64, D) query tile
  bf16* k_s = reinterpret_cast<bf16*>(flash_smem) + S::kK;   // (64, D) key tile
  bf16* vt_s = reinterpret_cast<bf16*>(flash_smem) + S::kVt; // (D, 64) value tile, transposed

  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest (latest) tiles first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const std::int64_t C = std::int64_t{H} * D, C3 = 3 * C;
  const bf16* qkv_b = qkv + std::int64_t{b} * T_ * C3 + std::int64_t{h} * D;
  const int q0 = q_tile * kTile;

  load_tile<D>(q_s, S::kLd, nullptr, 0, qkv_b, C3, q0, T_, kTile);
  __syncthreads();
  std::uint32_t qf[D / 16][4];  // this warp's 16 query rows as A fragments
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) load_a(qf[ks], q_s, S::kLd, warp * 16, ks * 16, g, t);

  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // this thread's query positions
  float o[D / 8][4] = {};                  // O accumulator (16 x D per warp)
  float m[2] = {-INFINITY, -INFINITY};     // running max (log2 domain)
  float l[2] = {0.0f, 0.0f};               // running sum, this thread's columns only (quad-reduced at the end)

  const int kv_end = min(T_, q0 + kTile);  // causal: keys beyond the tile's last query are never needed
  for (int k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();  // everyone is done with the previous K/V tile
    load_tile<D>(k_s, S::kLd, nullptr, 0, qkv_b + C, C3, k0, T_, kTile);
    load_tile<D>(nullptr, 0, vt_s, S::kLdT, qkv_b + 2 * C, C3, k0, T_, kTile);
    __syncthreads();

    // S = Q K^T for 16 rows x 64 keys.
    float s[kTile / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        std::uint32_t b0, b1;
        load_b(b0, b1, k_s, S::kLd, nt * 8, ks * 16, g, t);
        mma_16816(s[nt], qf[ks], b0, b1);
      }
    }
    // Scale into the log2 domain and mask the future (key > query).
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + nt * 8 + 2 * t + (e & 1);
        s[nt][e] = key <= rows[e / 2] ? s[nt][e] * scale_log2 : -INFINITY;
      }
    // Online softmax per row (r = 0: row g, r = 1: row g + 8).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a quad share the row
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: all p = 0, no NaN
      const float corr = exp2f(m[r] - base);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - base);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - base);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= corr;
        o[dt][2 * r + 1] *= corr;
      }
    }
    // O += P V, P (16 x 64) from registers in bf16, V^T from smem.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      std::uint32_t a[4];
      acc_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, vt_s, S::kLdT, dt * 8, kk * 16, g, t);
        mma_16816(o[dt], a, b0, b1);
      }
    }
  }

  // Normalise and write the rows below T; lse in natural log.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows[r] >= T_) continue;
    const float inv = 1.0f / sum;
    bf16* o_row = out + (std::int64_t{b} * T_ + rows[r]) * C + std::int64_t{h} * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<std::uint32_t*>(o_row + dt * 8 + 2 * t) = pack_bf16(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    if (t == 0) lse[(std::int64_t{b} * H + h) * T_ + rows[r]] = (m[r] + log2f(sum)) * kLn2;
  }
}

// Backward query-tile height: 64, or 32 for D = 128 to keep the dK/dV
// accumulators plus S/dP fragments within the register file.
template <int D>
constexpr int flash_backward_rows() {
  return D >= 128 ? 32 : 64;
}

template <int D>
struct FlashBackwardSmem {
  static constexpr int Br = flash_backward_rows<D>();
  static constexpr int kLd = D + kPad;       // row-major (rows x D) tiles
  static constexpr int kLdK = kTile + kPad;  // K^T: (D x 64)
  static constexpr int kLdQ = Br + kPad;     // Q^T, dO^T: (D x Br); dS: (Br x 64) uses kLdK
  static constexpr int kK = 0;
  static constexpr int kKt = kK + kTile * kLd;
  static constexpr int kV = kKt + D * kLdK;
  static constexpr int kQ = kV + kTile * kLd;
  static constexpr int kQt = kQ + Br * kLd;
  static constexpr int kDo = kQt + D * kLdQ;
  static constexpr int kDot = kDo + Br * kLd;
  static constexpr int kDs = kDot + D * kLdQ;
  static constexpr int kBf16Elements = kDs + Br * kLdK;
  // then lse (Br) and delta (Br) as f32
  static constexpr std::size_t kStatOffset = sizeof(bf16) * kBf16Elements;  // multiple of 16
  static constexpr std::size_t kBytes = kStatOffset + 2 * sizeof(float) * Br;
};

template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kernel(bf16* __restrict__ dqkv, float* __restrict__ dq_acc, const bf16* __restrict__ qkv,
                          const bf16* __restrict__ dout, const float* __restrict__ lse,
                          const float* __restrict__ delta, int T_, int H, float scale) {
  // dqkv (B, T, 3C): k, v parts written here; dq_acc (B, T, C) f32 += unscaled dQ;
  // qkv (B, T, 3C); dout (B, T, C); lse, delta (B, H, T). Grid (ceil(T/64), H, B).
  using S = FlashBackwardSmem<D>;
  constexpr int Br = S::Br;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* sm = reinterpret_cast<bf16*>(flash_smem);
  bf16* k_s = sm + S::kK;     // (64, D) key tile
  bf16* kt_s = sm + S::kKt;   // (D, 64) key tile transposed
  bf16* v_s = sm + S::kV;     // (64, D) value tile
  bf16* q_s = sm + S::kQ;     // (Br, D) query tile
  bf16* qt_s = sm + S::kQt;   // (D, Br) query tile transposed
  bf16* do_s = sm + S::kDo;   // (Br, D) dout tile
  bf16* dot_s = sm + S::kDot; // (D, Br) dout tile transposed
  bf16* ds_s = sm + S::kDs;   // (Br, 64) dS, query-major
  float* lse_s = reinterpret_cast<float*>(flash_smem + S::kStatOffset);  // (Br), log2 domain
  float* delta_s = lse_s + Br;                                           // (Br)

  const int k0 = blockIdx.x * kTile, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const std::int64_t C = std::int64_t{H} * D, C3 = 3 * C;
  const bf16* qkv_b = qkv + std::int64_t{b} * T_ * C3 + std::int64_t{h} * D;
  const bf16* dout_b = dout + std::int64_t{b} * T_ * C + std::int64_t{h} * D;
  const std::int64_t stat0 = (std::int64_t{b} * H + h) * T_;
  const float scale_log2 = scale * kLog2e;

  load_tile<D>(k_s, S::kLd, kt_s, S::kLdK, qkv_b + C, C3, k0, T_, kTile);
  load_tile<D>(v_s, S::kLd, nullptr, 0, qkv_b + 2 * C, C3, k0, T_, kTile);

  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};  // this thread's key positions
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};  // (16 keys x D) per warp

  // Causal: only queries q >= k0 see these keys; k0 is a multiple of Br.
  for (int q0 = k0; q0 < T_; q0 += Br) {
    __syncthreads();  // previous iteration is done with q/dO/dS tiles (and the K/V loads are visible)
    load_tile<D>(q_s, S::kLd, qt_s, S::kLdQ, qkv_b, C3, q0, T_, Br);
    load_tile<D>(do_s, S::kLd, dot_s, S::kLdQ, dout_b, C, q0, T_, Br);
    for (int i = threadIdx.x; i < Br; i += blockDim.x) {
      const bool in = q0 + i < T_;
      lse_s[i] = in ? lse[stat0 + q0 + i] * kLog2e : 0.0f;
      delta_s[i] = in ? delta[stat0 + q0 + i] : 0.0f;
    }
    __syncthreads();

    // S^T = K Q^T and dP^T = V dO^T: 16 keys x Br queries per warp.
    float st[Br / 8][4] = {}, dpt[Br / 8][4] = {};
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      std::uint32_t ka[4], va[4];
      load_a(ka, k_s, S::kLd, warp * 16, ks * 16, g, t);
      load_a(va, v_s, S::kLd, warp * 16, ks * 16, g, t);
#pragma unroll
      for (int nt = 0; nt < Br / 8; ++nt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, q_s, S::kLd, nt * 8, ks * 16, g, t);
        mma_16816(st[nt], ka, b0, b1);
        load_b(b0, b1, do_s, S::kLd, nt * 8, ks * 16, g, t);
        mma_16816(dpt[nt], va, b0, b1);
      }
    }
    // P^T = exp(scale S^T - lse) (0 where masked), dS^T = P^T o (dP^T - delta).
#pragma unroll
    for (int nt = 0; nt < Br / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t + (e & 1), q = q0 + qi;
        const bool valid = q < T_ && keys[e / 2] <= q;
        const float p = valid ? exp2f(st[nt][e] * scale_log2 - lse_s[qi]) : 0.0f;
        st[nt][e] = p;
        dpt[nt][e] = p * (dpt[nt][e] - delta_s[qi]);
      }
    // dV += P^T dO and dK += dS^T Q, reduction over the Br queries.
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
      std::uint32_t pa[4], dsa[4];
      acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
      acc_to_a(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        std::uint32_t b0, b1;
        load_b(b0, b1, dot_s, S::kLdQ, dt * 8, kk * 16, g, t);
        mma_16816(dv[dt], pa, b0, b1);
        load_b(b0, b1, qt_s, S::kLdQ, dt * 8, kk * 16, g, t);
        mma_16816(dk[dt], dsa, b0, b1);
      }
    }
    // dS to shared memory, query-major, for dQ = dS K.
#pragma unroll
    for (int nt = 0; nt < Br / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t + (e & 1), kj = warp * 16 + g + (e / 2) * 8;
        ds_s[qi * S::kLdK + kj] = __float2bfloat16_rn(dpt[nt][e]);
      }
    __syncthreads();
    // dQ (Br x D) += dS (Br x 64) K (64 x D): 16x8 output tiles spread over the warps.
    for (int tile = warp; tile < (Br / 16) * (D / 8); tile += kFlashWarps) {
      const int mt = tile / (D / 8), dt = tile % (D / 8);
      float acc[4] = {};
#pragma unroll
      for (int ks = 0; ks < kTile / 16; ++ks) {
        std::uint32_t a[4], b0, b1;
        load_a(a, ds_s, S::kLdK, mt * 16, ks * 16, g, t);
        load_b(b0, b1, kt_s, S::kLdK, dt * 8, ks * 16, g, t);
        mma_16816(acc, a, b0, b1);
      }
      const int qa = q0 + mt * 16 + g, qb = qa + 8, d = dt * 8 + 2 * t;
      if (qa < T_) {
        float* dst = dq_acc + (std::int64_t{b} * T_ + qa) * C + std::int64_t{h} * D + d;
        atomicAdd(dst, acc[0]);
        atomicAdd(dst + 1, acc[1]);
      }
      if (qb < T_) {
        float* dst = dq_acc + (std::int64_t{b} * T_ + qb) * C + std::int64_t{h} * D + d;
        atomicAdd(dst, acc[2]);
        atomicAdd(dst + 1, acc[3]);
      }
    }
  }

  // dK (scaled) and dV for the keys below T.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= T_) continue;
    bf16* row = dqkv + (std::int64_t{b} * T_ + keys[r]) * C3 + std::int64_t{h} * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + 2 * t;
      *reinterpret_cast<std::uint32_t*>(row + C + d) = pack_bf16(dk[dt][2 * r] * scale, dk[dt][2 * r + 1] * scale);
      *reinterpret_cast<std::uint32_t*>(row + 2 * C + d) = pack_bf16(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

// dqkv[b, t, 0:C] = scale * dq_acc[b, t, :]
__global__ void flash_dq_write_kernel(bf16* __restrict__ dqkv, const float* __restrict__ dq_acc, std::int64_t BT,
                                      std::int64_t C, float scale) {
  // dqkv (B, T, 3C), dq_acc (B, T, C)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < BT * C;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t bt = i / C, c = i % C;
    dqkv[bt * 3 * C + c] = __float2bfloat16_rn(dq_acc[i] * scale);
  }
}

// ---- launchers ---------------------------------------------------------------

template <int D>
void flash_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int B, int T_, int H, float scale) {
  using S = FlashForwardSmem<D>;
  auto kernel = flash_forward_kernel<D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kBytes)));
  const dim3 grid(ceil_div(T_, kTile), static_cast<unsigned>(H), static_cast<unsigned>(B));
  kernel<<<grid, kFlashThreads, S::kBytes, current_stream()>>>(out.data_as<bf16>(), lse.data_as<float>(),
                                                               qkv.data_as<const bf16>(), T_, H, scale * kLog2e);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void flash_backward(const Tensor& dqkv, float* dq_acc, const float* delta, const Tensor& dout, const Tensor& qkv,
                    const Tensor& lse, int B, int T_, int H, float scale) {
  using S = FlashBackwardSmem<D>;
  auto kernel = flash_backward_kernel<D>;
  ENGINE_CHECK(S::kBytes <= context().max_shared_memory_per_block(), "attention_backward: head size ", D, " needs ",
               S::kBytes, " bytes of shared memory per block, the GPU allows ", context().max_shared_memory_per_block());
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kBytes)));
  const dim3 grid(ceil_div(T_, kTile), static_cast<unsigned>(H), static_cast<unsigned>(B));
  kernel<<<grid, kFlashThreads, S::kBytes, current_stream()>>>(dqkv.data_as<bf16>(), dq_acc,
                                                               qkv.data_as<const bf16>(), dout.data_as<const bf16>(),
                                                               lse.data_as<const float>(), delta, T_, H, scale);
  CUDA_CHECK_LAUNCH();
}

struct AttentionDims {
  int B, T, H, D;
  float scale;
};

AttentionDims attention_dims(const Tensor& qkv, int n_head, const char* op) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3, D = C / n_head;
  ENGINE_CHECK(B < 65536 && n_head < 65536 && T < (std::int64_t{1} << 30), op, ": B = ", B, ", n_head = ", n_head,
               ", T = ", T, " exceed the launch grid");
  return {static_cast<int>(B), static_cast<int>(T), n_head, static_cast<int>(D),
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

unsigned f32_blocks(const AttentionDims& a) {
  return ceil_div(std::int64_t{a.B} * a.H * a.T, kF32Warps);
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head) {
  for (const Tensor* t : {&out, &saved, &qkv}) expect_cuda(*t, "attention_forward: operand");
  expect_f32(saved, "attention_forward: saved (log-sum-exp)");
  const AttentionDims a = attention_dims(qkv, n_head, "attention_forward");
  if (std::int64_t{a.B} * a.T * a.H == 0) return;
  if (qkv.dtype() == DType::kF32) {
    check_f32_operands(a, {&out}, "attention_forward");
    attention_forward_f32_kernel<<<f32_blocks(a), 32 * kF32Warps, 0, current_stream()>>>(
        out.data_as<float>(), saved.data_as<float>(), qkv.data_as<const float>(), a.B, a.T, a.H, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  check_bf16_operands({&qkv, &out}, "attention_forward");
  if (cudnn_attention_forward(out.data_as<bf16>(), saved.data_as<float>(), qkv.data_as<const bf16>(), a.B, a.T, a.H,
                              a.D, a.scale))
    return;
  check_flash_head_size(a, "attention_forward");
  switch (a.D) {
    case 32: return flash_forward<32>(out, saved, qkv, a.B, a.T, a.H, a.scale);
    case 64: return flash_forward<64>(out, saved, qkv, a.B, a.T, a.H, a.scale);
    case 128: return flash_forward<128>(out, saved, qkv, a.B, a.T, a.H, a.scale);
  }
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head) {
  for (const Tensor* t : {&dqkv, &dout, &qkv, &out, &saved}) expect_cuda(*t, "attention_backward: operand");
  expect_f32(saved, "attention_backward: saved (log-sum-exp)");
  const AttentionDims a = attention_dims(qkv, n_head, "attention_backward");
  const std::int64_t BT = std::int64_t{a.B} * a.T, C = std::int64_t{a.H} * a.D, rows = BT * a.H;
  if (rows == 0) return;
  const bool f32 = qkv.dtype() == DType::kF32;
  if (f32) check_f32_operands(a, {&dqkv, &dout, &out}, "attention_backward");
  else check_bf16_operands({&qkv, &dqkv, &dout, &out}, "attention_backward");
  if (!f32 && cudnn_attention_backward(dqkv.data_as<bf16>(), dout.data_as<const bf16>(), qkv.data_as<const bf16>(),
                                       out.data_as<const bf16>(), saved.data_as<const float>(), a.B, a.T, a.H, a.D,
                                       a.scale))
    return;
  if (!f32) check_flash_head_size(a, "attention_backward");

  // Scratch (grown on the first step only): delta (B, H, T) f32, and for the
  // flash path the f32 dQ accumulator (B, T, C).
  ScratchPlan plan;
  const std::size_t at_delta = plan.add(sizeof(float) * rows);
  const std::size_t at_dq = plan.add(f32 ? 0 : sizeof(float) * BT * C);
  char* base = plan.allocate();
  float* delta = reinterpret_cast<float*>(base + at_delta);
  float* dq_acc = reinterpret_cast<float*>(base + at_dq);
  cudaStream_t stream = current_stream();

  constexpr int kDeltaWarps = 8;
  dispatch_float(qkv.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    attention_delta_kernel<<<ceil_div(rows, kDeltaWarps), 32 * kDeltaWarps, 0, stream>>>(
        delta, dout.data_as<const T>(), out.data_as<const T>(), a.B, a.T, a.H, a.D);
    CUDA_CHECK_LAUNCH();
  });

  if (f32) {
    attention_backward_dq_f32_kernel<<<f32_blocks(a), 32 * kF32Warps, 0, stream>>>(
        dqkv.data_as<float>(), dout.data_as<const float>(), qkv.data_as<const float>(), saved.data_as<const float>(),
        delta, a.B, a.T, a.H, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    attention_backward_dkv_f32_kernel<<<f32_blocks(a), 32 * kF32Warps, 0, stream>>>(
        dqkv.data_as<float>(), dout.data_as<const float>(), qkv.data_as<const float>(), saved.data_as<const float>(),
        delta, a.B, a.T, a.H, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }

  CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, sizeof(float) * BT * C, stream));
  switch (a.D) {
    case 32: flash_backward<32>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.scale); break;
    case 64: flash_backward<64>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.scale); break;
    case 128: flash_backward<128>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.scale); break;
  }
  flash_dq_write_kernel<<<grid_for(BT * C, kThreads, 65536), kThreads, 0, stream>>>(dqkv.data_as<bf16>(), dq_acc, BT,
                                                                                      C, a.scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
