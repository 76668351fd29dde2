// Rotary position embedding (Su et al. 2021, "RoFormer"), in the rotate-half
// layout of Hugging Face's LlamaForCausalLM: dimension i of a head is paired
// with i + D/2 (not with its neighbour as in the paper), and the angle of
// pair i at position p is p * inv_freq[i] rounded to f32, as transformers
// computes it (an f32 product of positions and frequencies), then its cos and
// sin are taken in double. Applied in place to the q and k heads of each
// qkv row; backward applies the transposed rotation to their gradients.
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

// direction +1: the rotation; -1: its transpose (the backward).
void rope_apply(const Tensor& qkv, const Tensor& inv_freq_t, int n_head, int n_kv_head, std::int64_t position_start,
                int direction, const char* op) {
  expect_dtypes(op, qkv.dtype(), {&qkv});
  const std::int64_t B = qkv.dim(0), T_ = qkv.dim(1), width = qkv.dim(2);
  const std::int64_t D = width / (n_head + 2 * n_kv_head), half = D / 2;
  const std::int64_t rotated_heads = n_head + n_kv_head;  // q heads, then k heads, are contiguous
  const float* inv_freq = inv_freq_t.data_as<const float>();  // (D/2)
  // cos and sin per (position, pair), shared by every head and sequence.
  std::vector<double> cos_table(static_cast<std::size_t>(T_ * half)), sin_table(cos_table.size());
  for (std::int64_t t = 0; t < T_; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(position_start + t) * inv_freq[i];
      cos_table[t * half + i] = std::cos(static_cast<double>(angle));
      sin_table[t * half + i] = direction * std::sin(static_cast<double>(angle));
    }
  dispatch_float(qkv.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* data = qkv.data_as<T>();  // (B, T, (H+2KV)D)
#pragma omp parallel for schedule(static) if (B * T_ * width >= kParallelMinElements)
    for (std::int64_t bt = 0; bt < B * T_; ++bt) {
      const std::int64_t t = bt % T_;
      const double* c = &cos_table[t * half];
      const double* s = &sin_table[t * half];
      for (std::int64_t h = 0; h < rotated_heads; ++h) {
        T* x = data + bt * width + h * D;  // (D)
        for (std::int64_t i = 0; i < half; ++i) {
          const T x1 = x[i], x2 = x[i + half];
          const T ci = static_cast<T>(c[i]), si = static_cast<T>(s[i]);
          x[i] = x1 * ci - x2 * si;
          x[i + half] = x2 * ci + x1 * si;
        }
      }
    }
  });
}

}  // namespace

void rope_forward(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head, std::int64_t position_start) {
  rope_apply(qkv, inv_freq, n_head, n_kv_head, position_start, +1, "rope_forward");
}

void rope_backward(const Tensor& dqkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                   std::int64_t position_start) {
  rope_apply(dqkv, inv_freq, n_head, n_kv_head, position_start, -1, "rope_backward");
}

}  // namespace engine::cpu
