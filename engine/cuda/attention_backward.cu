// Causal multi-head self-attention core, backward pass (the forward, which saves
// lse, is in attention_forward.cu; the helpers both use in attention_common.cuh).
//
//   qkv  (B, T, W)   [q | k | v] per position, W = (H + 2 KV) D: H query
//                    heads, then KV key heads and KV value heads, each of D
//   out  (B, T, C)   C = H D; out = softmax(q k^T / sqrt(D), causal) v, per query head
//   lse  (B, H, T)   f32 log-sum-exp of each softmax row: the only saved state
//   dqkv (B, T, W)   written (every element)
//
// Grouped-query attention (Ainslie et al. 2023): query head h attends with
// key/value head h / (H / KV), so the gradient of key/value head g is the sum
// over the H / KV query heads of its group. Both paths form that sum inside
// one block or warp that owns the key/value head, looping over the group's
// query heads in order: no atomics and no scratch for dK/dV, and the result
// is deterministic (KV = H is multi-head attention, a group of one).
//
// bf16 activations: FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning"), on tensor cores
// through mma.sync.m16n8k16 (bf16 in, fp32 accumulate), never materialising
// a T x T matrix:
//   backward (Algorithm 2) D_i = rowsum(dO_i o O_i) first (delta kernel).
//            Then one block per (64-key tile, key/value head, batch), four
//            warps of 16 keys, loops over the query heads of the group and,
//            for each, over the query tiles at or below the diagonal:
//            recomputes P^T = exp(K Q^T * scale - lse), dP^T = V dO^T,
//            dS^T = P^T o (dP^T - D), accumulates dV += P^T dO and
//            dK += dS^T Q in registers (summing the group), and adds dQ += dS K into an f32
//            scratch with atomics (the paper's choice; dQ's summation order
//            is therefore not deterministic, unlike every other op here). A
//            last kernel scales dQ and writes it into dqkv as bf16.
//   Head sizes 32, 64 and 128 are instantiated (64 is every GPT-2 preset);
//   T need not be a multiple of the tile: rows past T load as zeros, are
//   masked, and are never written.
//
// f32 activations (the fp32 mode that is compared with the CPU): an exact path,
// one warp per query row (dQ) or per key row of a key/value head (dK, dV,
// summed over the group's query heads), lanes over D. Deterministic.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/attention_common.cuh"
#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

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

// One warp per query row i: dq_i = scale * sum_{j<=i} dS_ij k_j,
// dS_ij = P_ij (dout_i . v_j - delta_i), P_ij = exp(scale q_i . k_j - lse_i).
__global__ void attention_backward_dq_f32_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                                 const float* __restrict__ qkv, const float* __restrict__ lse,
                                                 const float* __restrict__ delta, int B, int T_, int H, int KV, int D,
                                                 float scale) {
  // dqkv (B, T, W): q part written; dout (B, T, C); qkv (B, T, W); lse, delta (B, H, T)
  int b, h, i;
  if (!f32_warp_row(B, T_, H, b, h, i)) return;
  const int lane = threadIdx.x % 32;
  const int g = h / (H / KV);  // this query head's key/value head
  const std::int64_t C = std::int64_t{H} * D, W = std::int64_t{H + 2 * KV} * D;
  const float* row0 = qkv + std::int64_t{b} * T_ * W;
  const float* k_base = row0 + std::int64_t{H + g} * D;       // row j at k_base + j W
  const float* v_base = row0 + std::int64_t{H + KV + g} * D;  // row j at v_base + j W
  const std::int64_t stat = (std::int64_t{b} * H + h) * T_ + i;
  float q[kF32PerLane], dy[kF32PerLane], dq[kF32PerLane] = {};
  f32_load(q, row0 + i * W + std::int64_t{h} * D, D, lane);
  f32_load(dy, dout + (std::int64_t{b} * T_ + i) * C + std::int64_t{h} * D, D, lane);
  const float lse_i = lse[stat], delta_i = delta[stat];
  for (int j = 0; j <= i; ++j) {
    const float* k = k_base + j * W;
    const float p = expf(f32_dot(q, k, D, lane) * scale - lse_i);
    const float ds = p * (f32_dot(dy, v_base + j * W, D, lane) - delta_i);
#pragma unroll
    for (int r = 0; r < kF32PerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < D) dq[r] += ds * k[d];
    }
  }
  float* out = dqkv + (std::int64_t{b} * T_ + i) * W + std::int64_t{h} * D;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) out[d] = dq[k] * scale;
  }
}

// One warp per key row j of key/value head g, summing over the group's query
// heads h (in order) and rows i >= j:
//   dv_j = sum_h sum_{i>=j} P_ij dout_i,  dk_j = scale sum_h sum_{i>=j} dS_ij q_i.
__global__ void attention_backward_dkv_f32_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
                                                  const float* __restrict__ qkv, const float* __restrict__ lse,
                                                  const float* __restrict__ delta, int B, int T_, int H, int KV, int D,
                                                  float scale) {
  // dqkv (B, T, W): k and v parts written; the rest as above. One warp per (b, g, j).
  int b, g, j;
  if (!f32_warp_row(B, T_, KV, b, g, j)) return;
  const int lane = threadIdx.x % 32;
  const int group = H / KV;
  const std::int64_t C = std::int64_t{H} * D, W = std::int64_t{H + 2 * KV} * D;
  const float* row0 = qkv + std::int64_t{b} * T_ * W;
  float kr[kF32PerLane], vr[kF32PerLane], dk[kF32PerLane] = {}, dv[kF32PerLane] = {};
  f32_load(kr, row0 + j * W + std::int64_t{H + g} * D, D, lane);
  f32_load(vr, row0 + j * W + std::int64_t{H + KV + g} * D, D, lane);
  for (int r = 0; r < group; ++r) {
    const int h = g * group + r;
    const float* q_base = row0 + std::int64_t{h} * D;  // row i at q_base + i W
    const float* dout_b = dout + std::int64_t{b} * T_ * C + std::int64_t{h} * D;
    const std::int64_t stat0 = (std::int64_t{b} * H + h) * T_;
    for (int i = j; i < T_; ++i) {
      const float* q = q_base + i * W;
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
  }
  float* out = dqkv + (std::int64_t{b} * T_ + j) * W;
#pragma unroll
  for (int k = 0; k < kF32PerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) {
      out[std::int64_t{H + g} * D + d] = dk[k] * scale;
      out[std::int64_t{H + KV + g} * D + d] = dv[k];
    }
  }
}

// ============================================================================
// bf16 path: FlashAttention-2 on tensor cores
// ============================================================================

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
                          const float* __restrict__ delta, int T_, int H, int KV, float scale) {
  // dqkv (B, T, W): k, v parts written here; dq_acc (B, T, C) f32 += unscaled dQ;
  // qkv (B, T, W); dout (B, T, C); lse, delta (B, H, T). Grid (ceil(T/64), KV, B).
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

  const int k0 = blockIdx.x * kTile, kv_head = blockIdx.y, b = blockIdx.z, group = H / KV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const std::int64_t C = std::int64_t{H} * D, W = std::int64_t{H + 2 * KV} * D;
  const bf16* row0 = qkv + std::int64_t{b} * T_ * W;
  const float scale_log2 = scale * kLog2e;

  // This block's key/value head: its K and V tiles stay in shared memory for
  // every query head of the group.
  load_tile<D>(k_s, S::kLd, kt_s, S::kLdK, row0 + std::int64_t{H + kv_head} * D, W, k0, T_, kTile);
  load_tile<D>(v_s, S::kLd, nullptr, 0, row0 + std::int64_t{H + KV + kv_head} * D, W, k0, T_, kTile);

  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};  // this thread's key positions
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};  // (16 keys x D) per warp, summed over the group

  for (int member = 0; member < group; ++member) {
    const int h = kv_head * group + member;  // the query head
    const bf16* q_b = row0 + std::int64_t{h} * D;  // (T, D), row stride W
    const bf16* dout_b = dout + std::int64_t{b} * T_ * C + std::int64_t{h} * D;
    const std::int64_t stat0 = (std::int64_t{b} * H + h) * T_;
    // Causal: only queries q >= k0 see these keys; k0 is a multiple of Br.
    for (int q0 = k0; q0 < T_; q0 += Br) {
      __syncthreads();  // previous iteration is done with q/dO/dS tiles (and the K/V loads are visible)
      load_tile<D>(q_s, S::kLd, qt_s, S::kLdQ, q_b, W, q0, T_, Br);
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
  }  // query heads of the group

  // dK (scaled) and dV of the key/value head for the keys below T.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= T_) continue;
    bf16* row = dqkv + (std::int64_t{b} * T_ + keys[r]) * W;
    bf16* dk_row = row + std::int64_t{H + kv_head} * D;
    bf16* dv_row = row + std::int64_t{H + KV + kv_head} * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + 2 * t;
      *reinterpret_cast<std::uint32_t*>(dk_row + d) = pack_bf16(dk[dt][2 * r] * scale, dk[dt][2 * r + 1] * scale);
      *reinterpret_cast<std::uint32_t*>(dv_row + d) = pack_bf16(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

// dqkv[b, t, 0:C] = scale * dq_acc[b, t, :]
__global__ void flash_dq_write_kernel(bf16* __restrict__ dqkv, const float* __restrict__ dq_acc, std::int64_t BT,
                                      std::int64_t C, std::int64_t W, float scale) {
  // dqkv (B, T, W), dq_acc (B, T, C)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < BT * C;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t bt = i / C, c = i % C;
    dqkv[bt * W + c] = __float2bfloat16_rn(dq_acc[i] * scale);
  }
}

// ---- launcher ----------------------------------------------------------------

template <int D>
void flash_backward(const Tensor& dqkv, float* dq_acc, const float* delta, const Tensor& dout, const Tensor& qkv,
                    const Tensor& lse, int B, int T_, int H, int KV, float scale) {
  using S = FlashBackwardSmem<D>;
  auto kernel = flash_backward_kernel<D>;
  ENGINE_CHECK(S::kBytes <= context().max_shared_memory_per_block(), "attention_backward: head size ", D, " needs ",
               S::kBytes, " bytes of shared memory per block, the GPU allows ", context().max_shared_memory_per_block());
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kBytes)));
  const dim3 grid(ceil_div(T_, kTile), static_cast<unsigned>(KV), static_cast<unsigned>(B));
  kernel<<<grid, kFlashThreads, S::kBytes, current_stream()>>>(dqkv.data_as<bf16>(), dq_acc,
                                                               qkv.data_as<const bf16>(), dout.data_as<const bf16>(),
                                                               lse.data_as<const float>(), delta, T_, H, KV, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head, int n_kv_head) {
  for (const Tensor* t : {&dqkv, &dout, &qkv, &out, &saved}) expect_cuda(*t, "attention_backward: operand");
  expect_f32(saved, "attention_backward: saved (log-sum-exp)");
  const AttentionDims a = attention_dims(qkv, n_head, n_kv_head, "attention_backward");
  const std::int64_t BT = std::int64_t{a.B} * a.T, C = a.out_width(), rows = BT * a.H;
  if (rows == 0) return;
  const bool f32 = qkv.dtype() == DType::kF32;
  if (f32) check_f32_operands(a, {&dqkv, &dout, &out}, "attention_backward");
  else check_bf16_operands({&qkv, &dqkv, &dout, &out}, "attention_backward");
  if (!f32 && cudnn_attention_backward(dqkv.data_as<bf16>(), dout.data_as<const bf16>(), qkv.data_as<const bf16>(),
                                       out.data_as<const bf16>(), saved.data_as<const float>(), a.B, a.T, a.H, a.KV,
                                       a.D, a.scale))
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
        delta, a.B, a.T, a.H, a.KV, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    attention_backward_dkv_f32_kernel<<<f32_kv_blocks(a), 32 * kF32Warps, 0, stream>>>(
        dqkv.data_as<float>(), dout.data_as<const float>(), qkv.data_as<const float>(), saved.data_as<const float>(),
        delta, a.B, a.T, a.H, a.KV, a.D, a.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }

  CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, sizeof(float) * BT * C, stream));
  switch (a.D) {
    case 32: flash_backward<32>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.KV, a.scale); break;
    case 64: flash_backward<64>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.KV, a.scale); break;
    case 128: flash_backward<128>(dqkv, dq_acc, delta, dout, qkv, saved, a.B, a.T, a.H, a.KV, a.scale); break;
  }
  flash_dq_write_kernel<<<grid_for(BT * C, kThreads, 65536), kThreads, 0, stream>>>(dqkv.data_as<bf16>(), dq_acc, BT,
                                                                                      C, a.width(), a.scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace engine::cuda
