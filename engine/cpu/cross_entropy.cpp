// Fused softmax + cross-entropy over the classifier logits (llm.c's
// crossentropy_softmax_backward fused with the forward, as in its CUDA
// fused_classifier): the probabilities are never stored; with grad_scale != 0
// the logits are overwritten by their gradient in the same pass.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/vector_math.h"

namespace engine::cpu {
namespace {

// Targets are data, and a bad one would read outside the row; checked up
// front because an exception must not leave an OpenMP region.
void check_targets(const std::int32_t* targets, std::int64_t N, std::int64_t vocab_size) {
  for (std::int64_t n = 0; n < N; ++n)
    ENGINE_CHECK(targets[n] >= 0 && targets[n] < vocab_size, "softmax_cross_entropy: target ", targets[n],
                 " at position ", n, " is outside the vocabulary [0, ", vocab_size, ")");
}

template <typename T>
void softmax_cross_entropy_impl(const Tensor& losses_t, const Tensor& logits_t, const Tensor& targets_t,
                                std::int64_t V, double grad_scale) {
  const std::int64_t Vp = logits_t.dim(-1), N = logits_t.numel() / Vp;
  T* losses = losses_t.data_as<T>();                                     // (N)
  T* logits = logits_t.data_as<T>();                                     // (N, Vp)
  const std::int32_t* targets = targets_t.data_as<const std::int32_t>(); // (N)
  check_targets(targets, N, V);
  const bool write_grad = grad_scale != 0.0;

#pragma omp parallel for schedule(static) if (N * Vp >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    T* x = logits + n * Vp;  // (Vp); only [0, V) are real classes
    const std::int64_t target = targets[n];
    const T target_logit = x[target];
    T max_logit = x[0];
#pragma omp simd reduction(max : max_logit)
    for (std::int64_t i = 1; i < V; ++i) max_logit = std::max(max_logit, x[i]);

    // log-sum-exp shifted by the max, summed in double. The exp and the sum
    // are separate loops because GCC vectorises fast_exp only in a loop
    // without a reduction.
    // e^(x - max) goes over the logits when they become the gradient anyway,
    // else to scratch so the logits stay intact.
    T* e = write_grad ? x : thread_scratch<T>(V);  // (V)
    for (std::int64_t i = 0; i < V; ++i) e[i] = fast_exp(x[i] - max_logit);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < V; ++i) sum += e[i];
    losses[n] = static_cast<T>(std::log(sum) + (static_cast<double>(max_logit) - target_logit));

    if (write_grad) {
      // dlogits = grad_scale * (softmax - onehot(target)); padding gets 0.
      const T factor = static_cast<T>(grad_scale / sum);
      for (std::int64_t i = 0; i < V; ++i) x[i] *= factor;
      x[target] -= static_cast<T>(grad_scale);
      std::fill(x + V, x + Vp, T(0));
    }
  }
}

}  // namespace

void softmax_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           std::int64_t vocab_size, double grad_scale) {
  expect_dtypes("softmax_cross_entropy", logits.dtype(), {&losses});
  dispatch_float(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    softmax_cross_entropy_impl<decltype(tag)>(losses, logits, targets, vocab_size, grad_scale);
  });
}

}  // namespace engine::cpu
