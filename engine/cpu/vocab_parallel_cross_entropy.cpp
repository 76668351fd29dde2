// Vocabulary-parallel softmax + cross-entropy (Megatron-LM's
// _VocabParallelCrossEntropy; Shoeybi et al. 2019, sec. 3), the three
// per-rank steps of ops.h. The caller all-reduces between them:
//   partial_max   row max over this slice's valid columns   -> all-reduce MAX
//   partial_sums  sum of exp(x - max), the target's logit     -> all-reduce SUM
//   finish        loss, and the in-place gradient of this slice
// The arithmetic is cross_entropy.cpp's, row for row (max in T, e^(x - max)
// by fast_exp in T, the sum accumulated in double), so with one slice the
// three steps agree with softmax_cross_entropy up to the rounding of the
// sum to the statistics dtype between steps.
//
// A slice holds global columns [vocab_start, vocab_start + V_local); the first
// `valid` = clamp(vocab_size - vocab_start, 0, V_local) of them are classes,
// the rest padding. A target is in [0, vocab_size), so when it falls inside
// the slice it falls inside the valid part.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/vector_math.h"

namespace engine::cpu {
namespace {

// Number of this slice's columns that are classes (not padding).
std::int64_t valid_columns(std::int64_t V_local, std::int64_t vocab_start, std::int64_t vocab_size) {
  return std::clamp<std::int64_t>(vocab_size - vocab_start, 0, V_local);
}

// Targets are data, and a bad one would make every rank's loss wrong (or, on
// the rank holding the column, read outside the row); checked up front
// because an exception must not leave an OpenMP region.
void check_targets(const char* op, const std::int32_t* targets, std::int64_t N, std::int64_t vocab_size) {
  for (std::int64_t n = 0; n < N; ++n)
    ENGINE_CHECK(targets[n] >= 0 && targets[n] < vocab_size, op, ": target ", targets[n], " at position ", n,
                 " is outside the vocabulary [0, ", vocab_size, ")");
}

template <typename T>
void partial_max_impl(const Tensor& row_max_t, const Tensor& logits_t, std::int64_t vocab_start,
                      std::int64_t vocab_size) {
  const std::int64_t V_local = logits_t.dim(-1), N = logits_t.numel() / V_local;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  T* row_max = row_max_t.data_as<T>();             // (N)
  const T* logits = logits_t.data_as<const T>();   // (N, V_local)

#pragma omp parallel for schedule(static) if (N * valid >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V_local;  // (V_local); only [0, valid) are classes
    // -inf for a slice of padding only: the identity of the MAX all-reduce.
    T max_logit = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : max_logit)
    for (std::int64_t i = 0; i < valid; ++i) max_logit = std::max(max_logit, x[i]);
    row_max[n] = max_logit;
  }
}

template <typename T>
void partial_sums_impl(const Tensor& sums_t, const Tensor& logits_t, const Tensor& row_max_t,
                       const Tensor& targets_t, std::int64_t vocab_start, std::int64_t vocab_size) {
  const std::int64_t V_local = logits_t.dim(-1), N = logits_t.numel() / V_local;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  T* sum_exp = sums_t.data_as<T>();                                       // (N): row 0 of sums (2, N)
  T* target_logit = sum_exp + N;                                          // (N): row 1
  const T* logits = logits_t.data_as<const T>();                          // (N, V_local)
  const T* row_max = row_max_t.data_as<const T>();                        // (N)
  const std::int32_t* targets = targets_t.data_as<const std::int32_t>();  // (N)
  check_targets("cross_entropy_partial_sums", targets, N, vocab_size);

#pragma omp parallel for schedule(static) if (N * valid >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V_local;
    const T max_logit = row_max[n];
    // As in cross_entropy.cpp: exp and sum in separate loops, because GCC
    // vectorises fast_exp only in a loop without a reduction.
    T* e = thread_scratch<T>(valid);  // (valid)
    for (std::int64_t i = 0; i < valid; ++i) e[i] = fast_exp(x[i] - max_logit);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < valid; ++i) sum += e[i];
    sum_exp[n] = static_cast<T>(sum);
    // 0 from every rank but the one holding the target: the SUM all-reduce
    // then yields the target's logit exactly.
    const std::int64_t local = targets[n] - vocab_start;
    target_logit[n] = local >= 0 && local < V_local ? x[local] : T(0);
  }
}

template <typename T>
void finish_impl(const Tensor& losses_t, const Tensor& logits_t, const Tensor& row_max_t, const Tensor& sums_t,
                 const Tensor& targets_t, std::int64_t vocab_start, std::int64_t vocab_size, double grad_scale) {
  const std::int64_t V_local = logits_t.dim(-1), N = logits_t.numel() / V_local;
  const std::int64_t valid = valid_columns(V_local, vocab_start, vocab_size);
  T* losses = losses_t.data_as<T>();                                      // (N)
  T* logits = logits_t.data_as<T>();                                      // (N, V_local)
  const T* row_max = row_max_t.data_as<const T>();                        // (N)
  const T* sum_exp = sums_t.data_as<const T>();                           // (N): row 0 of sums (2, N)
  const T* target_logit = sum_exp + N;                                    // (N): row 1
  const std::int32_t* targets = targets_t.data_as<const std::int32_t>();  // (N)
  check_targets("cross_entropy_finish", targets, N, vocab_size);
  const bool write_grad = grad_scale != 0.0;

#pragma omp parallel for schedule(static) if (N * V_local >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const T max_logit = row_max[n];
    const double sum = sum_exp[n];
    // (max - target) + log(sum), in double, as softmax_cross_entropy does.
    losses[n] = static_cast<T>(std::log(sum) + (static_cast<double>(max_logit) - target_logit[n]));
    if (!write_grad) continue;

    // dlogits = grad_scale * (softmax - onehot(target)) on this slice; padding 0.
    T* x = logits + n * V_local;
    const T factor = static_cast<T>(grad_scale / sum);
    for (std::int64_t i = 0; i < valid; ++i) x[i] = fast_exp(x[i] - max_logit) * factor;
    const std::int64_t local = targets[n] - vocab_start;
    if (local >= 0 && local < V_local) x[local] -= static_cast<T>(grad_scale);
    std::fill(x + valid, x + V_local, T(0));
  }
}

}  // namespace

void cross_entropy_partial_max(const Tensor& row_max, const Tensor& logits, std::int64_t vocab_start,
                               std::int64_t vocab_size) {
  expect_dtypes("cross_entropy_partial_max", logits.dtype(), {&row_max});
  dispatch_float(logits.dtype(), "cross_entropy_partial_max", [&](auto tag) {
    partial_max_impl<decltype(tag)>(row_max, logits, vocab_start, vocab_size);
  });
}

void cross_entropy_partial_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size) {
  expect_dtypes("cross_entropy_partial_sums", logits.dtype(), {&sums, &row_max});
  dispatch_float(logits.dtype(), "cross_entropy_partial_sums", [&](auto tag) {
    partial_sums_impl<decltype(tag)>(sums, logits, row_max, targets, vocab_start, vocab_size);
  });
}

void cross_entropy_finish(const Tensor& losses, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size,
                          double grad_scale) {
  expect_dtypes("cross_entropy_finish", logits.dtype(), {&losses, &row_max, &sums});
  dispatch_float(logits.dtype(), "cross_entropy_finish", [&](auto tag) {
    finish_impl<decltype(tag)>(losses, logits, row_max, sums, targets, vocab_start, vocab_size, grad_scale);
  });
}

}  // namespace engine::cpu
