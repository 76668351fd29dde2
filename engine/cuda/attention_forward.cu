// Causal multi-head self-attention core, forward pass (the backward is in
// attention_backward.cu; the helpers both use in attention_common.cuh).
//
//   qkv  (B, T, W)   [q | k | v] per position, W = (H + 2 KV) D: H query
//                    heads, then KV key heads and KV value heads, each of D
//   out  (B, T, C)   C = H D; out = softmax(q k^T / sqrt(D), causal) v, per query head
//   lse  (B, H, T)   f32 log-sum-exp of each softmax row: the only saved state
//
// Grouped-query attention (Ainslie et al. 2023): query head h attends with
// key/value head h / (H / KV); the kernels below simply read that head's k
// and v (KV = H is multi-head attention, KV = 1 multi-query).
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
//   Head sizes 32, 64 and 128 are instantiated (64 is every GPT-2 preset);
//   T need not be a multiple of the tile: rows past T load as zeros, are
//   masked, and are never written.
//
// f32 activations (the fp32 mode that is compared with the CPU): a simple,
// exact path, one warp per query row, lanes over the head dimension, online
// softmax over keys. Deterministic.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/attention_common.cuh"
#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

constexpr float kLn2 = 0.6931471805599453f;

// ============================================================================
// f32 path
// ============================================================================

// One warp per query row i: one pass over keys j <= i with the online softmax.
__global__ void attention_forward_f32_kernel(float* __restrict__ out, float* __restrict__ lse,
                                             const float* __restrict__ qkv, int B, int T_, int H, int KV, int D,
                                             float scale) {
  // out (B, T, C), lse (B, H, T), qkv (B, T, W)
  int b, h, i;
  if (!f32_warp_row(B, T_, H, b, h, i)) return;
  const int lane = threadIdx.x % 32;
  const int g = h / (H / KV);  // this query head's key/value head
  const std::int64_t C = std::int64_t{H} * D, W = std::int64_t{H + 2 * KV} * D;
  const float* row0 = qkv + std::int64_t{b} * T_ * W;
  const float* k_base = row0 + std::int64_t{H + g} * D;       // row j at k_base + j W
  const float* v_base = row0 + std::int64_t{H + KV + g} * D;  // row j at v_base + j W
  float q[kF32PerLane], acc[kF32PerLane] = {};
  f32_load(q, row0 + i * W + std::int64_t{h} * D, D, lane);
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float* v = v_base + j * W;
    const float s = f32_dot(q, k_base + j * W, D, lane) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < kF32PerLane; ++k) {
      const int d = lane + 32 * k;
      acc[k] = acc[k] * corr + (d < D ? p * v[d] : 0.0f);
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

// ============================================================================
// bf16 path: FlashAttention-2 on tensor cores
// ============================================================================

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
                         int H, int KV, float scale_log2) {
  // out (B, T, C), lse (B, H, T), qkv (B, T, W); grid (ceil(T/64), H, B)
  static_assert(D % 16 == 0, "head size must be a multiple of 16");
  using S = FlashForwardSmem<D>;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* q_s = reinterpret_cast<bf16*>(flash_smem) + S::kQ;   // (64, D) query tile
  bf16* k_s = reinterpret_cast<bf16*>(flash_smem) + S::kK;   // (64, D) key tile
  bf16* vt_s = reinterpret_cast<bf16*>(flash_smem) + S::kVt; // (D, 64) value tile, transposed

  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest (latest) tiles first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, kv_head = h / (H / KV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const std::int64_t C = std::int64_t{H} * D, W = std::int64_t{H + 2 * KV} * D;
  const bf16* row0 = qkv + std::int64_t{b} * T_ * W;
  const bf16* q_b = row0 + std::int64_t{h} * D;             // (T, D), row stride W
  const bf16* k_b = row0 + std::int64_t{H + kv_head} * D;   // the group's key head
  const bf16* v_b = row0 + std::int64_t{H + KV + kv_head} * D;
  const int q0 = q_tile * kTile;

  load_tile<D>(q_s, S::kLd, nullptr, 0, q_b, W, q0, T_, kTile);
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
    load_tile<D>(k_s, S::kLd, nullptr, 0, k_b, W, k0, T_, kTile);
    load_tile<D>(nullptr, 0, vt_s, S::kLdT, v_b, W, k0, T_, kTile);
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

// ---- launcher ----------------------------------------------------------------

template <int D>
void flash_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int B, int T_, int H, int KV,
                   float scale) {
  using S = FlashForwardSmem<D>;
  auto kernel = flash_forward_kernel<D>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kBytes)));
  const dim3 grid(ceil_div(T_, kTile), static_cast<unsigned>(H), static_cast<unsigned>(B));
  kernel<<<grid, kFlashThreads, S::kBytes, current_stream()>>>(out.data_as<bf16>(), lse.data_as<float>(),
                                                               qkv.data_as<const bf16>(), T_, H, KV, scale * kLog2e);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head) {
  for (const Tensor* t : {&out, &saved, &qkv}) expect_cuda(*t, "attention_forward: operand");
  expect_f32(saved, "attention_forward: saved (log-sum-exp)");
  const AttentionDims a = attention_dims(qkv, n_head, n_kv_head, "attention_forward");
  if (std::int64_t{a.B} * a.T * a.H == 0) return;
  if (qkv.dtype() == DType::kF32) {
    check_f32_operands(a, {&out}, "attention_forward");
    attention_forward_f32_kernel<<<f32_blocks(a), 32 * kF32Warps, 0, current_stream()>>>(
        out.data_as<float>(), saved.data_as<float>(), qkv.data_as<const float>(), a.B, a.T, a.H, a.KV, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  check_bf16_operands({&qkv, &out}, "attention_forward");
  if (cudnn_attention_forward(out.data_as<bf16>(), saved.data_as<float>(), qkv.data_as<const bf16>(), a.B, a.T, a.H,
                              a.KV, a.D, a.scale))
    return;
  check_flash_head_size(a, "attention_forward");
  switch (a.D) {
    case 32: return flash_forward<32>(out, saved, qkv, a.B, a.T, a.H, a.KV, a.scale);
    case 64: return flash_forward<64>(out, saved, qkv, a.B, a.T, a.H, a.KV, a.scale);
    case 128: return flash_forward<128>(out, saved, qkv, a.B, a.T, a.H, a.KV, a.scale);
  }
}

}  // namespace engine::cuda
