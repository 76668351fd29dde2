// Token + position embedding (GPT-2's wte and wpe), forward and backward.
//
// A token outside [vocab_start, vocab_start + V) selects no row of this wte:
// that is how a vocabulary-parallel shard of wte sees tokens another rank
// holds (Megatron-LM, section 3). The loader has already checked the tokens
// against the full vocabulary, so here they are not errors.
#include <algorithm>
#include <cstdint>

#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/dtype_dispatch.h"

namespace engine::cpu {
namespace {

// Channels per task in the backward pass (see embedding_backward_impl).
constexpr std::int64_t kChannelBlock = 64;

template <typename T>
void embedding_forward_impl(const Tensor& out_t, const Tensor& tokens_t, const Tensor& wte_t, const Tensor& wpe_t,
                            std::int64_t vocab_start, std::int64_t position_start) {
  const std::int64_t B = out_t.dim(0), T_ = out_t.dim(1), C = out_t.dim(2), V = wte_t.dim(0);
  T* out = out_t.data_as<T>();                               // (B, T, C)
  const std::int32_t* tokens = tokens_t.data_as<const std::int32_t>();  // (B, T)
  const T* wte = wte_t.data_as<const T>();                   // (V, C)
  const T* wpe = wpe_t.empty() ? nullptr : wpe_t.data_as<const T>();  // (maxT, C) or none
#pragma omp parallel for schedule(static) if (B * T_ * C >= kParallelMinElements)
  for (std::int64_t bt = 0; bt < B * T_; ++bt) {
    const std::int64_t t = bt % T_;
    const std::int64_t row = static_cast<std::int64_t>(tokens[bt]) - vocab_start;
    T* o = out + bt * C;  // (C)
    if (row >= 0 && row < V) {
      std::copy_n(wte + row * C, C, o);
    } else {
      std::fill_n(o, C, T(0));
    }
    if (wpe) {
      const T* p = wpe + (position_start + t) * C;  // (C)
      for (std::int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

// dwte[token - vocab_start] += dout[b, t] and dwpe[position_start + t] +=
// dout[b, t]. Many positions can hit one wte row, so instead of atomics the
// work is split by channel blocks: each task walks all positions in order for
// its own channels, which is deterministic for any thread count.
template <typename T>
void embedding_backward_impl(const Tensor& dwte_t, const Tensor& dwpe_t, const Tensor& dout_t,
                             const Tensor& tokens_t, std::int64_t vocab_start, std::int64_t position_start) {
  const std::int64_t B = dout_t.dim(0), T_ = dout_t.dim(1), C = dout_t.dim(2), V = dwte_t.dim(0);
  T* dwte = dwte_t.data_as<T>();                             // (V, C)
  const T* dout = dout_t.data_as<const T>();                 // (B, T, C)
  const std::int32_t* tokens = tokens_t.data_as<const std::int32_t>();  // (B, T)
  const bool parallel = B * T_ * C >= kParallelMinElements;

  const std::int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (std::int64_t bt = 0; bt < B * T_; ++bt) {
      const std::int64_t row = static_cast<std::int64_t>(tokens[bt]) - vocab_start;
      if (row < 0 || row >= V) continue;
      T* d = dwte + row * C;         // (C)
      const T* g = dout + bt * C;    // (C)
      for (std::int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }

  if (dwpe_t.empty()) return;
  T* dwpe = dwpe_t.data_as<T>();  // (maxT, C)
  // Each position's row is owned by one task; batch entries are added in order.
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t t = 0; t < T_; ++t) {
    T* d = dwpe + (position_start + t) * C;  // (C)
    for (std::int64_t b = 0; b < B; ++b) {
      const T* g = dout + (b * T_ + t) * C;  // (C)
      for (std::int64_t c = 0; c < C; ++c) d[c] += g[c];
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       std::int64_t vocab_start, std::int64_t position_start) {
  expect_dtypes("embedding_forward", out.dtype(), {&wte, &wpe});
  dispatch_float(out.dtype(), "embedding_forward", [&](auto tag) {
    embedding_forward_impl<decltype(tag)>(out, tokens, wte, wpe, vocab_start, position_start);
  });
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        std::int64_t vocab_start, std::int64_t position_start) {
  expect_dtypes("embedding_backward", dout.dtype(), {&dwte, &dwpe});
  expect_dtype(tokens, DType::kI32, "embedding_backward: tokens");
  dispatch_float(dout.dtype(), "embedding_backward", [&](auto tag) {
    embedding_backward_impl<decltype(tag)>(dwte, dwpe, dout, tokens, vocab_start, position_start);
  });
}

}  // namespace engine::cpu
