// Rotary position embedding (Su et al. 2021, "RoFormer", sec. 3.4) in the
// rotate-half layout of Hugging Face's LlamaForCausalLM, applied IN PLACE to
// the q and k heads of qkv; v is never touched. Forward and backward:
//   qkv (B, T, (H + 2 KV) D)   q heads [0, H), k heads [H, H + KV), v after
//   inv_freq (D/2) f32         the frequencies, any scaling already applied
// For position p = position_start + t and pair i < D/2, a = p * inv_freq[i]:
//   forward   x'[i] = x[i] cos a - x[i + D/2] sin a,  x'[i + D/2] = x[i + D/2] cos a + x[i] sin a
//   backward  the same with -a (the rotation's transpose, i.e. its inverse)
//
// Numbers, chosen to match transformers and the CPU backend:
// - The angle is the f32 product float(p) * inv_freq[i] (transformers forms it
//   as an f32 matmul of frequencies and positions), rounded once; it is not
//   formed in double.
// - cos and sin of that angle are taken in DOUBLE, then rounded to f32. This
//   file is compiled with --use_fast_math, which turns sinf/cosf/sincosf into
//   the __sinf/__cosf intrinsics: their error is fine near 0 but they do no
//   proper argument reduction, and RoPE's angles reach p (tens of thousands of
//   radians) for the highest frequency, where __sinf is wrong in the first
//   digits. Fast-math leaves double precision alone, so sincos(double) keeps
//   full range reduction; the result equals the CPU's (libm cos/sin in double,
//   rounded to f32) up to the last bit of a rare tie, and transformers' f32
//   cos/sin to within an f32 ulp.
// - The rotation itself is f32 arithmetic on f32 or bf16 elements.
// One thread per (b, t, i): it computes sincos once and rotates pair i of
// every q and k head of that position (H + KV of them), so the double-precision
// work is 1 / (H + KV) of the elements touched; consecutive threads take
// consecutive i, so a warp reads and writes contiguous runs of a head.
#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"

namespace engine::cuda {
namespace {

template <typename T>
__global__ void rope_kernel(T* __restrict__ qkv, const float* __restrict__ inv_freq, std::int64_t BT, int T_,
                            int rotated_heads, int D, std::int64_t width, std::int64_t position_start,
                            float direction) {
  // qkv (B, T, width) rotated in place, width = (H + 2 KV) D; inv_freq (D/2);
  // rotated_heads = H + KV (q then k heads, contiguous from column 0)
  const int half = D / 2;
  for (std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; idx < BT * half;
       idx += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t bt = idx / half;
    const int i = static_cast<int>(idx % half);
    const std::int64_t p = position_start + bt % T_;
    const float angle = __fmul_rn(static_cast<float>(p), inv_freq[i]);  // the f32 product, never contracted
    double sin_d, cos_d;
    sincos(static_cast<double>(angle), &sin_d, &cos_d);  // double: full range reduction (see above)
    const float c = static_cast<float>(cos_d), s = direction * static_cast<float>(sin_d);
    T* row = qkv + bt * width;  // (width)
    for (int h = 0; h < rotated_heads; ++h) {
      T* x = row + std::int64_t{h} * D;  // (D)
      const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
      x[i] = from_float<T>(x1 * c - x2 * s);
      x[i + half] = from_float<T>(x2 * c + x1 * s);
    }
  }
}

void rope_apply(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head, std::int64_t position_start,
                float direction, const char* op) {
  expect_cuda(qkv, op);
  expect_cuda(inv_freq, op);
  expect_f32(inv_freq, op);
  const std::int64_t B = qkv.dim(0), T_ = qkv.dim(1), width = qkv.dim(2);
  const int D = static_cast<int>(width / (n_head + 2 * n_kv_head));
  const std::int64_t BT = B * T_;
  if (BT * D == 0) return;
  ENGINE_CHECK(T_ < (std::int64_t{1} << 31), op, ": T = ", T_, " exceeds the kernel's int range");
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<<<grid_for(BT * (D / 2)), kThreads, 0, current_stream()>>>(
        qkv.data_as<T>(), inv_freq.data_as<const float>(), BT, static_cast<int>(T_), n_head + n_kv_head, D, width,
        position_start, direction);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rope_forward(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head, std::int64_t position_start) {
  rope_apply(qkv, inv_freq, n_head, n_kv_head, position_start, 1.0f, "rope_forward");
}

void rope_backward(const Tensor& dqkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                   std::int64_t position_start) {
  rope_apply(dqkv, inv_freq, n_head, n_kv_head, position_start, -1.0f, "rope_backward");
}

}  // namespace engine::cuda
