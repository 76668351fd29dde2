// Causal multi-head self-attention core: out = softmax(q k^T / sqrt(D)) v per
// head (Vaswani et al. 2017, section 3.2.1), with the probabilities kept in
// `saved` (B, H, T, T) for backward.
//
// Work is parallelised over (batch, head) pairs with OpenMP; inside a pair
// the matrix products are BLAS calls on the calling thread only (the OpenMP
// OpenBLAS runs single-threaded inside a parallel region). q, k and v of head
// h are read straight out of qkv (B, T, (H+2KV)D) as strided matrices: row t
// of q is qkv[b, t, h*D : (h+1)*D], so the leading dimension is (H+2KV)D and
// nothing is gathered.
//
// Grouped-query attention (Ainslie et al. 2023): query head h reads key/value
// head h / (H/KV). Backward runs the query heads of one group one after the
// other on one thread, the first writing the group's dk and dv and the others
// adding to them, so the sum over the group needs no atomics and is the same
// for any thread count.
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
  std::int64_t ld_qkv; // (H + 2KV) D
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
// dq is written; dk and dv are written (kv_beta 0) or added to (kv_beta 1, the
// later query heads of a key/value group).
template <typename T>
void attention_backward_head(T* dq, T* dk, T* dv, const T* dout, std::int64_t ld_out, const T* att, T* dS,
                             const HeadView<T>& h, std::int64_t T_, std::int64_t D, T kv_beta) {
  // dq, dk, dv (T, D) leading dim ld = (H+2KV)D;  dout (T, D) leading dim ld_out = HD;
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
         kv_beta, dv + c0 * ld, ld);
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
    gemm(Trans::kYes, Trans::kNo, r1 - r0, D, T_ - r0, T(1), dS + r0 * T_ + r0, T_, h.q + r0 * ld, ld, kv_beta,
         dk + r0 * ld, ld);
  }
}

// Head counts and widths of one qkv tensor.
struct HeadLayout {
  std::int64_t H, KV, D;
  std::int64_t group() const { return H / KV; }      // query heads per key/value head
  std::int64_t ld_qkv() const { return (H + 2 * KV) * D; }
  std::int64_t ld_out() const { return H * D; }
  // Offsets of query head h's q, and of key/value head g's k and v, in a row.
  std::int64_t q(std::int64_t h) const { return h * D; }
  std::int64_t k(std::int64_t g) const { return (H + g) * D; }
  std::int64_t v(std::int64_t g) const { return (H + KV + g) * D; }
};

HeadLayout head_layout(const Tensor& qkv, int n_head, int n_kv_head) {
  const std::int64_t H = n_head, KV = n_kv_head;
  return HeadLayout{H, KV, qkv.dim(2) / (H + 2 * KV)};
}

template <typename T>
HeadView<T> head_view(const T* qkv, std::int64_t b, std::int64_t h, std::int64_t T_, const HeadLayout& l) {
  const T* row0 = qkv + b * T_ * l.ld_qkv();
  const std::int64_t g = h / l.group();
  return HeadView<T>{row0 + l.q(h), row0 + l.k(g), row0 + l.v(g), l.ld_qkv()};
}

template <typename T>
void attention_forward_impl(const Tensor& out_t, const Tensor& saved_t, const Tensor& qkv_t, const HeadLayout& l) {
  const std::int64_t B = qkv_t.dim(0), T_ = qkv_t.dim(1), H = l.H;
  T* out = out_t.data_as<T>();              // (B, T, HD)
  T* saved = saved_t.data_as<T>();          // (B, H, T, T)
  const T* qkv = qkv_t.data_as<const T>();  // (B, T, (H+2KV)D)
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int64_t b = bh / H, h = bh % H;
    T* att = saved + bh * T_ * T_;                          // (T, T)
    T* out_head = out + b * T_ * l.ld_out() + l.q(h);       // (T, D), leading dim HD
    attention_forward_head(out_head, l.ld_out(), att, head_view(qkv, b, h, T_, l), T_, l.D);
  }
}

template <typename T>
void attention_backward_impl(const Tensor& dqkv_t, const Tensor& dout_t, const Tensor& qkv_t,
                             const Tensor& saved_t, const HeadLayout& l) {
  const std::int64_t B = qkv_t.dim(0), T_ = qkv_t.dim(1), H = l.H, KV = l.KV;
  T* dqkv = dqkv_t.data_as<T>();               // (B, T, (H+2KV)D), written
  const T* dout = dout_t.data_as<const T>();   // (B, T, HD)
  const T* qkv = qkv_t.data_as<const T>();     // (B, T, (H+2KV)D)
  const T* saved = saved_t.data_as<const T>(); // (B, H, T, T)
  // One task per (batch, key/value head): its query heads in order.
#pragma omp parallel for schedule(static)
  for (std::int64_t bg = 0; bg < B * KV; ++bg) {
    const std::int64_t b = bg / KV, g = bg % KV;
    T* dS = thread_scratch<T>(T_ * T_);           // (T, T)
    T* drow0 = dqkv + b * T_ * l.ld_qkv();
    for (std::int64_t i = 0; i < l.group(); ++i) {
      const std::int64_t h = g * l.group() + i;
      const T* dout_head = dout + b * T_ * l.ld_out() + l.q(h);  // (T, D), leading dim HD
      attention_backward_head(drow0 + l.q(h), drow0 + l.k(g), drow0 + l.v(g), dout_head, l.ld_out(),
                              saved + (b * H + h) * T_ * T_, dS, head_view(qkv, b, h, T_, l), T_, l.D,
                              i == 0 ? T(0) : T(1));
    }
  }
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head) {
  expect_dtypes("attention_forward", qkv.dtype(), {&out, &saved});
  dispatch_float(qkv.dtype(), "attention_forward", [&](auto tag) {
    attention_forward_impl<decltype(tag)>(out, saved, qkv, head_layout(qkv, n_head, n_kv_head));
  });
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head, int n_kv_head) {
  // `out` is not needed on the CPU: the saved probabilities carry everything.
  expect_dtypes("attention_backward", qkv.dtype(), {&dqkv, &dout, &out, &saved});
  dispatch_float(qkv.dtype(), "attention_backward", [&](auto tag) {
    attention_backward_impl<decltype(tag)>(dqkv, dout, qkv, saved, head_layout(qkv, n_head, n_kv_head));
  });
}

}  // namespace engine::cpu
