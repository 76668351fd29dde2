// Causal multi-head self-attention core: out = softmax(q k^T / sqrt(D)) v per
// head (Vaswani et al. 2017, section 3.2.1), with the probabilities kept in
// `saved` (B, H, T, T) for backward.
//
// Work is parallelised over (batch, head) pairs with OpenMP; inside a pair
// the matrix products are BLAS calls on the calling thread only (the OpenMP
// OpenBLAS runs single-threaded inside a parallel region). q, k and v of head
// h are read straight out of qkv (B, T, 3C) as strided matrices: row t of q is
// qkv[b, t, h*D : (h+1)*D], so the leading dimension is 3C and nothing is
// gathered.
//
// Causality is exploited by tiling rows into blocks of kRowBlock: block
// [r0, r1) only needs keys [0, r1), so the score and value products cost about
// half of the full T x T ones. Every entry that any product reads is written
// first: probabilities above the diagonal are 0 in `saved`, and the backward's
// dS scratch is zeroed above the diagonal up to the end of each row's block.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/vector_math.h"

namespace engine::cpu {
namespace {

constexpr std::int64_t kRowBlock = 64;

// Strided views of one (b, h) pair.
template <typename T>
struct HeadView {
  const T* q;          // (T, D), leading dim ld_qkv
  const T* k;          // (T, D), leading dim ld_qkv
  const T* v;          // (T, D), leading dim ld_qkv
  std::int64_t ld_qkv; // 3C
};

// softmax over att[t, 0..t] in place, zero above the diagonal.  att (T, T)
template <typename T>
void causal_softmax_rows(T* att, std::int64_t T_) {
  for (std::int64_t t = 0; t < T_; ++t) {
    T* row = att + t * T_;  // (T)
    T max_score = row[0];
#pragma omp simd reduction(max : max_score)
    for (std::int64_t j = 1; j <= t; ++j) max_score = std::max(max_score, row[j]);
    // Exponentiate, then sum: kept as two loops because GCC vectorises the
    // exp loop only without a reduction in it.
    for (std::int64_t j = 0; j <= t; ++j) row[j] = fast_exp(row[j] - max_score);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j <= t; ++j) sum += row[j];
    const T inv_sum = static_cast<T>(1.0 / sum);
    for (std::int64_t j = 0; j <= t; ++j) row[j] *= inv_sum;
    std::fill(row + t + 1, row + T_, T(0));
  }
}

template <typename T>
void attention_forward_head(T* out, std::int64_t ld_out, T* att, const HeadView<T>& h, std::int64_t T_,
                            std::int64_t D) {
  // out (T, D) leading dim ld_out = C;  att (T, T)
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const std::int64_t ld = h.ld_qkv;
  for (std::int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
    const std::int64_t r1 = std::min(T_, r0 + kRowBlock);
    // att[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T      (r1-r0, r1)
    gemm(Trans::kNo, Trans::kYes, r1 - r0, r1, D, scale, h.q + r0 * ld, ld, h.k, ld, T(0), att + r0 * T_, T_);
  }
  causal_softmax_rows(att, T_);
  for (std::int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
    const std::int64_t r1 = std::min(T_, r0 + kRowBlock);
    // out[r0:r1] = att[r0:r1, 0:r1] @ v[0:r1]              (r1-r0, D)
    gemm(Trans::kNo, Trans::kNo, r1 - r0, D, r1, T(1), att + r0 * T_, T_, h.v, ld, T(0), out + r0 * ld_out,
         ld_out);
  }
}

// With P = softmax(S), S = scale * q k^T, and dP = dout v^T:
//   dv = P^T dout,  dS = P * (dP - rowsum(P * dP)),  dq = scale dS k,  dk = scale dS^T q
template <typename T>
void attention_backward_head(T* dq, T* dk, T* dv, const T* dout, std::int64_t ld_out, const T* att, T* dS,
                             const HeadView<T>& h, std::int64_t T_, std::int64_t D) {
  // dq, dk, dv (T, D) leading dim ld = 3C;  dout (T, D) leading dim ld_out = C;
  // att (T, T) probabilities;  dS (T, T) scratch
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const std::int64_t ld = h.ld_qkv;

  // dP[r0:r1, 0:r1] = dout[r0:r1] @ v[0:r1]^T   (written into dS, overwritten below)
  for (std::int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
    const std::int64_t r1 = std::min(T_, r0 + kRowBlock);
    gemm(Trans::kNo, Trans::kYes, r1 - r0, r1, D, T(1), dout + r0 * ld_out, ld_out, h.v, ld, T(0), dS + r0 * T_,
         T_);
  }
  // dv[c0:c1] = att[c0:T, c0:c1]^T @ dout[c0:T]: only rows >= c0 attend to keys in [c0, c1).
  for (std::int64_t c0 = 0; c0 < T_; c0 += kRowBlock) {
    const std::int64_t c1 = std::min(T_, c0 + kRowBlock);
    gemm(Trans::kYes, Trans::kNo, c1 - c0, D, T_ - c0, T(1), att + c0 * T_ + c0, T_, dout + c0 * ld_out, ld_out,
         T(0), dv + c0 * ld, ld);
  }
  // Softmax backward, scale folded in; zero above the diagonal to the block end.
  for (std::int64_t t = 0; t < T_; ++t) {
    const T* p = att + t * T_;  // (T)
    T* row = dS + t * T_;       // (T): dP in, scale * dS out
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j <= t; ++j) dot += p[j] * row[j];
    const T dot_t = static_cast<T>(dot);
    for (std::int64_t j = 0; j <= t; ++j) row[j] = scale * p[j] * (row[j] - dot_t);
    const std::int64_t block_end = std::min(T_, (t / kRowBlock + 1) * kRowBlock);
    std::fill(row + t + 1, row + block_end, T(0));
  }
  for (std::int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
    const std::int64_t r1 = std::min(T_, r0 + kRowBlock);
    // dq[r0:r1] = dS[r0:r1, 0:r1] @ k[0:r1]          (r1-r0, D)
    gemm(Trans::kNo, Trans::kNo, r1 - r0, D, r1, T(1), dS + r0 * T_, T_, h.k, ld, T(0), dq + r0 * ld, ld);
    // dk[r0:r1] = dS[r0:T, r0:r1]^T @ q[r0:T]        (r1-r0, D)
    gemm(Trans::kYes, Trans::kNo, r1 - r0, D, T_ - r0, T(1), dS + r0 * T_ + r0, T_, h.q + r0 * ld, ld, T(0),
         dk + r0 * ld, ld);
  }
}

template <typename T>
HeadView<T> head_view(const T* qkv, std::int64_t b, std::int64_t h, std::int64_t T_, std::int64_t C,
                      std::int64_t D) {
  const T* base = qkv + b * T_ * 3 * C + h * D;
  return HeadView<T>{base, base + C, base + 2 * C, 3 * C};
}

template <typename T>
void attention_forward_impl(const Tensor& out_t, const Tensor& saved_t, const Tensor& qkv_t, int n_head) {
  const std::int64_t B = qkv_t.dim(0), T_ = qkv_t.dim(1), C = qkv_t.dim(2) / 3, H = n_head, D = C / H;
  T* out = out_t.data_as<T>();              // (B, T, C)
  T* saved = saved_t.data_as<T>();          // (B, H, T, T)
  const T* qkv = qkv_t.data_as<const T>();  // (B, T, 3C)
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int64_t b = bh / H, h = bh % H;
    T* att = saved + bh * T_ * T_;              // (T, T)
    T* out_head = out + b * T_ * C + h * D;     // (T, D), leading dim C
    attention_forward_head(out_head, C, att, head_view(qkv, b, h, T_, C, D), T_, D);
  }
}

template <typename T>
void attention_backward_impl(const Tensor& dqkv_t, const Tensor& dout_t, const Tensor& qkv_t,
                             const Tensor& saved_t, int n_head) {
  const std::int64_t B = qkv_t.dim(0), T_ = qkv_t.dim(1), C = qkv_t.dim(2) / 3, H = n_head, D = C / H;
  T* dqkv = dqkv_t.data_as<T>();               // (B, T, 3C), written
  const T* dout = dout_t.data_as<const T>();   // (B, T, C)
  const T* qkv = qkv_t.data_as<const T>();     // (B, T, 3C)
  const T* saved = saved_t.data_as<const T>(); // (B, H, T, T)
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int64_t b = bh / H, h = bh % H;
    T* dS = thread_scratch<T>(T_ * T_);                   // (T, T)
    T* dq = dqkv + b * T_ * 3 * C + h * D;                // (T, D), leading dim 3C
    const T* dout_head = dout + b * T_ * C + h * D;       // (T, D), leading dim C
    attention_backward_head(dq, dq + C, dq + 2 * C, dout_head, C, saved + bh * T_ * T_, dS,
                            head_view(qkv, b, h, T_, C, D), T_, D);
  }
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head) {
  expect_dtypes("attention_forward", qkv.dtype(), {&out, &saved});
  dispatch_float(qkv.dtype(), "attention_forward", [&](auto tag) {
    attention_forward_impl<decltype(tag)>(out, saved, qkv, n_head);
  });
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head) {
  // `out` is not needed on the CPU: the saved probabilities carry everything.
  expect_dtypes("attention_backward", qkv.dtype(), {&dqkv, &dout, &out, &saved});
  dispatch_float(qkv.dtype(), "attention_backward", [&](auto tag) {
    attention_backward_impl<decltype(tag)>(dqkv, dout, qkv, saved, n_head);
  });
}

}  // namespace engine::cpu
