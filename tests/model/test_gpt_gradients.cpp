// Whole-model gradient check: the hand-written backward of a tiny GPT, run in
// fp64 on the CPU, against central finite differences of its loss.
//
// In fp64 the loss is accurate to ~1e-16 relative, so with h = 1e-5 the
// central difference has truncation error O(h^2 * f''') ~ 1e-10 and rounding
// error ~ 1e-16 / 1e-5 = 1e-11: a relative tolerance of 1e-6 leaves orders of
// magnitude of margin while any real mistake in a backward shows up at 1e-2
// or worse.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/buffer.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"

using namespace model;
using engine::Tensor;

namespace {

GptConfig tiny_gpt2() {
  GptConfig c;  // T=16, V=200 (padded to 256), L=2, H=2, C=8
  c.max_seq_len = 16;
  c.vocab_size = 200;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// Every Llama-family feature at once: grouped-query attention (4 query heads
// on 2 key/value heads), SwiGLU, RMSNorm, Qwen2's q/k/v bias, an untied head,
// and RoPE with Llama 3's scaling set so that its three frequency bands
// (kept, interpolated, slowed) all occur among the D/2 = 4 frequencies.
GptConfig tiny_llama() {
  GptConfig c = tiny_gpt2();
  c.arch = Architecture::kLlama;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;  // head size 8
  c.ffn_hidden = 24;
  c.norm_eps = 1e-6;
  c.rope_theta = 100;  // wavelengths 6.3, 21, 66, 210
  c.rope_scaling = RopeScaling{4, 1, 4, 128};  // kept below 32, slowed above 128
  c.qkv_bias = true;
  c.tied_embeddings = false;
  return c;
}

struct TinyGpt {
  GptConfig config;
  std::int64_t B = 2, T = 7;           // a T that is not a power of two
  ParamRegistry registry = build_gpt_registry(config);
  ParamStore store{registry, engine::DeviceType::kCpu, Precision::kFp64};
  GptStage stage{config, store, whole_model(config), ActivationShape{B, T, engine::DType::kF64}, 1};
  engine::Arena arena;
  std::vector<std::int32_t> tokens, targets;

  explicit TinyGpt(GptConfig c = tiny_gpt2()) : config(c) {
    engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
    stage.allocate(plan);
    arena = engine::Arena(engine::DeviceType::kCpu, plan.used());
    stage.allocate(arena);
    store.initialize(42);
    // Larger-than-GPT-2 init so every path carries signal (0.02 would make the
    // attention almost uniform and its gradient tiny).
    auto* w = store.master().data_as<double>();
    std::vector<double> noise(static_cast<std::size_t>(registry.total_numel()));
    engine::fill_normal(noise.data(), registry.total_numel(), engine::rng_key(7, "noise"), 0, 0.0, 0.3);
    for (std::int64_t i = 0; i < registry.total_numel(); ++i) w[i] += noise[i];
    for (std::int64_t i = 0; i < B * T; ++i) {
      tokens.push_back(static_cast<std::int32_t>((i * 37 + 11) % config.vocab_size));
      targets.push_back(static_cast<std::int32_t>((i * 53 + 5) % config.vocab_size));
    }
  }

  double loss() {
    stage.forward(0, tokens.data(), targets.data(), 0.0);
    return stage.loss_sum(0) / static_cast<double>(B * T);
  }

  void gradients() {
    store.zero_grads();
    stage.forward(0, tokens.data(), targets.data(), 1.0 / static_cast<double>(B * T));
    stage.backward(0);
  }
};

void expect_gradients_match_finite_differences(TinyGpt& gpt) {
  gpt.gradients();
  const double* grads = gpt.store.grads().data_as<double>();
  double* w = gpt.store.master().data_as<double>();
  const double h = 1e-5;
  int checked = 0;
  for (const ParamInfo& p : gpt.registry.entries()) {
    // Up to 12 elements per tensor, spread over it (wte: rows that are used).
    const bool vocab_rows = p.name == "wte" || p.name == "lm_head.weight";
    const std::int64_t n = vocab_rows ? gpt.config.vocab_size * gpt.config.n_embd : p.numel();
    for (int k = 0; k < 12; ++k) {
      const std::int64_t i = p.offset + (k * 7919) % n;
      const double saved = w[i];
      w[i] = saved + h;
      const double up = gpt.loss();
      w[i] = saved - h;
      const double down = gpt.loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = grads[i];
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::fabs(numeric)) + 1e-9)
          << p.name << " element " << i - p.offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace

TEST(GptGradients, MatchCentralFiniteDifferencesInFp64) {
  TinyGpt gpt;
  expect_gradients_match_finite_differences(gpt);
}

TEST(GptGradients, LlamaMatchesCentralFiniteDifferencesInFp64) {
  TinyGpt gpt(tiny_llama());
  ASSERT_TRUE(gpt.registry.contains("lm_head.weight"));
  ASSERT_TRUE(gpt.registry.contains("h.0.attn.qkv.bias"));
  ASSERT_FALSE(gpt.registry.contains("wpe"));
  ASSERT_FALSE(gpt.registry.contains("h.0.mlp.fc.bias"));
  expect_gradients_match_finite_differences(gpt);
}

TEST(GptGradients, LlamaTiedHeadAndMultiHeadAttention) {
  GptConfig c = tiny_llama();
  c.tied_embeddings = true;
  c.n_kv_head = 4;  // KV = H
  c.qkv_bias = false;
  c.rope_scaling = {};
  TinyGpt gpt(c);
  ASSERT_FALSE(gpt.registry.contains("lm_head.weight"));
  expect_gradients_match_finite_differences(gpt);
}

TEST(GptGradients, PaddedVocabularyRowsGetNoGradient) {
  TinyGpt gpt;
  gpt.gradients();
  const Tensor dwte = gpt.store.grad("wte");
  const double* g = dwte.data_as<double>();
  for (std::int64_t v = gpt.config.vocab_size; v < gpt.config.padded_vocab(); ++v)
    for (std::int64_t c = 0; c < gpt.config.n_embd; ++c) ASSERT_EQ(g[v * gpt.config.n_embd + c], 0.0);
}

TEST(GptGradients, AccumulateOverMicroBatches) {
  // Two backward passes of the same micro-batch give twice the gradient.
  TinyGpt gpt(tiny_llama());
  gpt.gradients();
  const std::int64_t n = gpt.registry.total_numel();
  std::vector<double> once(gpt.store.grads().data_as<double>(), gpt.store.grads().data_as<double>() + n);
  gpt.stage.forward(0, gpt.tokens.data(), gpt.targets.data(), 1.0 / static_cast<double>(gpt.B * gpt.T));
  gpt.stage.backward(0);
  const double* twice = gpt.store.grads().data_as<double>();
  for (std::int64_t i = 0; i < n; ++i) ASSERT_NEAR(twice[i], 2 * once[i], 1e-12 * (1 + std::fabs(once[i])));
}
