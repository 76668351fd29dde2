// The FLOP count (model/flops.h) against an independent count: every matmul
// the model runs, found from its parameter registry (each 2-D weight is one
// matmul over the tokens, the tied wte also the LM head) and the attention
// core's two products counted score by score, 2*m*n*k each; backward = 2x
// forward. Also what recomputation reruns, and the convention line.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/check.h"
#include "model/flops.h"
#include "model/gpt_params.h"

using namespace model;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Forward FLOPs of the attention core of one layer: per sequence and head,
// q k^T and P v, 2*head_size FLOPs per (query, key) pair the convention
// counts. `exact_causal`: only the keys up to the query (the triangle with
// its diagonal, s(s+1)/2 pairs); otherwise all s keys.
double counted_attention_core(const GptConfig& c, double B, std::int64_t s, bool exact_causal) {
  double pairs = 0;
  for (std::int64_t query = 0; query < s; ++query) pairs += exact_causal ? query + 1 : s;
  const double per_pair = 2.0 * static_cast<double>(c.head_size()) * 2.0;  // scores and values
  return B * static_cast<double>(c.n_head) * pairs * per_pair;
}

struct Counted {
  double weights = 0;     // forward, every block's weight matmuls
  double rerun_full = 0;  // forward, the block matmuls full recomputation reruns (not mlp.proj)
  double lm_head = 0;     // forward
};

Counted counted_matmuls(const GptConfig& c, double B, std::int64_t s) {
  const double N = B * static_cast<double>(s);  // tokens
  Counted out;
  int lm_heads = 0;
  const ParamRegistry registry = build_gpt_registry(c);
  for (const ParamInfo& p : registry.entries()) {
    if (p.global_shape.ndim() != 2 || p.name == "wpe") continue;  // biases, norms; wpe is a lookup
    const double m_n_k = 2.0 * N * static_cast<double>(p.global_shape[0]) * static_cast<double>(p.global_shape[1]);
    if (p.name == "wte" && !c.tied_embeddings) continue;  // a lookup, no matmul
    if (p.name == "wte" || p.name == "lm_head.weight") {  // the LM head (N,C) x (C,Vp), tied or not
      out.lm_head += m_n_k;
      ++lm_heads;
      continue;
    }
    EXPECT_TRUE(ends_with(p.name, ".weight")) << p.name;
    out.weights += m_n_k;
    if (!ends_with(p.name, "mlp.proj.weight")) out.rerun_full += m_n_k;
  }
  EXPECT_EQ(lm_heads, 1);
  return out;
}

// A small config with an odd shape, so no term hides behind another.
GptConfig small_config() {
  GptConfig c;
  c.max_seq_len = 48;
  c.vocab_size = 100;  // padded to 128
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 40;
  c.validate();
  return c;
}

// The Llama family's shapes: grouped-query qkv (5 query heads, 1 key/value
// head), SwiGLU's gate, up and down, an untied head.
GptConfig small_llama_config(bool tied) {
  GptConfig c = small_config();
  c.arch = Architecture::kLlama;
  c.n_head = 5;
  c.n_kv_head = 1;
  c.ffn_hidden = 72;
  c.tied_embeddings = tied;
  c.validate();
  return c;
}

}  // namespace

TEST(Flops, LlamaEqualsEveryCountedMatmul) {
  for (bool tied : {false, true}) {
    const GptConfig c = small_llama_config(tied);
    const double B = 5, L = static_cast<double>(c.n_layer);
    const std::int64_t s = 48;
    const Counted m = counted_matmuls(c, B, s);
    for (AttentionFlops a : {AttentionFlops::kFull, AttentionFlops::kCausal}) {
      const double core = counted_attention_core(c, B, s, false) * (a == AttentionFlops::kCausal ? 0.5 : 1.0);
      const double forward = m.weights + L * core + m.lm_head;
      EXPECT_NEAR(training_flops_per_step(c, 5, s, a), 3 * forward, 1e-9 * forward) << tied;
      const double full = m.rerun_full + L * core;
      EXPECT_NEAR(recompute_flops_per_step(c, 5, s, Recompute::kFull, a), full, 1e-9 * full) << tied;
    }
  }
  EXPECT_NE(flops_convention(AttentionFlops::kCausal, small_llama_config(false)).find("3*h*F"), std::string::npos);
}

TEST(Flops, FullAttentionEqualsEveryCountedMatmul) {
  const GptConfig c = small_config();
  const double B = 5;
  const std::int64_t s = 48;
  const Counted m = counted_matmuls(c, B, s);
  const double L = static_cast<double>(c.n_layer);
  const double forward = m.weights + L * counted_attention_core(c, B, s, false) + m.lm_head;
  const double formula = training_flops_per_step(c, 5, s, AttentionFlops::kFull);
  EXPECT_NEAR(formula, 3 * forward, 1e-9 * forward);
}

TEST(Flops, CausalAttentionCountsHalfTheSquare) {
  const GptConfig c = small_config();
  const double B = 5, L = static_cast<double>(c.n_layer);
  const std::int64_t s = 48;
  const Counted m = counted_matmuls(c, B, s);
  // The convention counts s^2/2 (query, key) pairs; the exact triangle has
  // s(s+1)/2, the diagonal's half more.
  const double triangle = counted_attention_core(c, B, s, true);
  const double diagonal_half = B * static_cast<double>(c.n_head) * (s / 2.0) * 2.0 * 2.0 * c.head_size();
  const double forward = m.weights + L * (triangle - diagonal_half) + m.lm_head;
  const double formula = training_flops_per_step(c, 5, s, AttentionFlops::kCausal);
  EXPECT_NEAR(formula, 3 * forward, 1e-9 * forward);
  // The default is causal, and the attention term is exactly half of full's.
  EXPECT_EQ(training_flops_per_step(c, 5, s), formula);
  const double full_attention = L * 3 * counted_attention_core(c, B, s, false);
  EXPECT_NEAR(training_flops_per_step(c, 5, s, AttentionFlops::kFull) - formula, full_attention / 2,
              1e-9 * full_attention);
}

TEST(Flops, RecomputationAddsWhatTheBlocksRerun) {
  const GptConfig c = small_config();
  const double B = 3, L = static_cast<double>(c.n_layer);
  const std::int64_t s = 32;
  const Counted m = counted_matmuls(c, B, s);
  for (AttentionFlops a : {AttentionFlops::kFull, AttentionFlops::kCausal}) {
    SCOPED_TRACE(attention_flops_name(a));
    const double core = counted_attention_core(c, B, s, false) * (a == AttentionFlops::kCausal ? 0.5 : 1.0);
    EXPECT_EQ(recompute_flops_per_step(c, 3, s, Recompute::kNone, a), 0.0);
    // selective: each block's attention core forward (q k^T and P v) again.
    EXPECT_NEAR(recompute_flops_per_step(c, 3, s, Recompute::kSelective, a), L * core, 1e-9 * L * core);
    // full: each block's forward up to, not including, the MLP's output
    // projection (qkv, attention core, attention projection, fc); no LM head.
    const double full = m.rerun_full + L * core;
    EXPECT_NEAR(recompute_flops_per_step(c, 3, s, Recompute::kFull, a), full, 1e-9 * full);
    EXPECT_LT(full, m.weights + L * core);  // less than a whole forward of the blocks
  }
}

TEST(Flops, MegatronFormulaAtGpt2Small) {
  const GptConfig c = gpt_preset("gpt2-124m");
  const double B = 4, s = 1024, h = c.n_embd, V = c.padded_vocab(), L = c.n_layer, N = B * s;
  // Forward: per layer qkv 3h^2, proj h^2, fc 4h^2, fc-proj 4h^2 (2 FLOPs per MAC),
  // attention q.k^T and att.v at full s x s; then the LM head. Backward = 2x forward.
  const double forward = L * (2 * N * 12 * h * h + 2 * 2 * B * s * s * h) + 2 * N * h * V;
  EXPECT_NEAR(training_flops_per_step(c, 4, 1024, AttentionFlops::kFull), 3 * forward, 1e-6 * forward);
  const double causal_forward = L * (2 * N * 12 * h * h + 2 * B * s * s * h) + 2 * N * h * V;
  EXPECT_NEAR(training_flops_per_step(c, 4, 1024, AttentionFlops::kCausal), 3 * causal_forward,
              1e-6 * causal_forward);
}

TEST(Flops, ConventionNamesAndLine) {
  EXPECT_EQ(parse_attention_flops("causal"), AttentionFlops::kCausal);
  EXPECT_EQ(parse_attention_flops("full"), AttentionFlops::kFull);
  EXPECT_STREQ(attention_flops_name(AttentionFlops::kCausal), "causal");
  EXPECT_STREQ(attention_flops_name(AttentionFlops::kFull), "full");
  EXPECT_THROW(parse_attention_flops("half"), engine::Error);
  const std::string causal = flops_convention(AttentionFlops::kCausal);
  EXPECT_NE(causal.find("s/(12h)"), std::string::npos) << causal;
  EXPECT_NE(causal.find("causal"), std::string::npos) << causal;
  EXPECT_NE(causal.find("HFU"), std::string::npos) << causal;
  EXPECT_NE(flops_convention(AttentionFlops::kFull).find("s/(6h)"), std::string::npos);
}
