// The backward split into an input-gradient pass and a weight-gradient pass
// (model::GptStage::backward_input / backward_weight; zero-bubble pipelines,
// Qi et al. 2024) against today's fused backward (GptStage::backward), which
// the gradient check (test_gpt_gradients.cpp) holds to finite differences.
//
// Every parameter's gradient accumulates the same terms in the same order
// whichever way the backward runs, as long as the forwards run in the same
// order (the tied head adds its part during the last stage's forward): each
// matmul's weight gradient is the same GEMM on the same operands, only later.
// So on the CPU, in fp64, the two are compared with ==, for GPT-2 and a
// Llama-shaped model (GQA, SwiGLU, RoPE, untied head, qkv bias) under every
// recomputation mode, with micro-batches' passes interleaved as a pipeline
// runs them (the next forward overwrites every shared tensor, and the
// stashes are reused round-robin).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/rng.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "model/recompute.h"

using namespace model;
using engine::DType;

namespace {

struct Model {
  GptConfig config;
  std::int64_t B = 2, T = 24;
  ParamRegistry registry;
  ParamStore store;
  GptStage stage;
  engine::Arena arena;

  Model(const GptConfig& c, Recompute mode, int slots, int stash_sets)
      : config(c), registry(build_gpt_registry(config)), store(registry, engine::DeviceType::kCpu, Precision::kFp64),
        stage(config, store, whole_model(config), ActivationShape{B, T, DType::kF64}, slots, {}, nullptr, mode,
              nullptr, stash_sets) {
    engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
    stage.allocate(plan);
    arena = engine::Arena(engine::DeviceType::kCpu, plan.used());
    stage.allocate(arena);
    store.initialize(42);
    auto* w = store.master().data_as<double>();  // weights far from GPT-2's small initialisation
    std::vector<double> noise(static_cast<std::size_t>(registry.total_numel()));
    engine::fill_normal(noise.data(), registry.total_numel(), engine::rng_key(7, "noise"), 0, 0.0, 0.2);
    for (std::int64_t i = 0; i < registry.total_numel(); ++i) w[i] += noise[i];
  }

  std::vector<std::int32_t> ids(int k, int salt) const {
    std::vector<std::int32_t> t;
    for (std::int64_t i = 0; i < B * T; ++i)
      t.push_back(static_cast<std::int32_t>((i * 37 + salt + 101 * k) % config.vocab_size));
    return t;
  }
  void forward(int micro, int slot, double scale) {
    const auto tok = ids(micro, 11), tgt = ids(micro, 5);
    stage.forward(slot, tok.data(), tgt.data(), scale);
  }
  std::vector<double> grads() const {
    const double* g = store.grads().data_as<double>();
    return std::vector<double>(g, g + registry.total_numel());
  }
};

// Runs `order` ("F0 F1 B0 W0 ..."); with no W in it, the backward is fused.
std::vector<double> run(const GptConfig& c, Recompute mode, const std::string& order, int micro_batches,
                        int slots, int stash_sets) {
  Model m(c, mode, slots, stash_sets);
  const double scale = 1.0 / static_cast<double>(micro_batches * m.B * m.T);
  for (std::size_t i = 0; i < order.size(); i += 3) {
    const int micro = order[i + 1] - '0';
    switch (order[i]) {
      case 'F': m.forward(micro, micro % slots, scale); break;
      case 'B':
        if (stash_sets == 0) m.stage.backward(micro % slots);
        else m.stage.backward_input(micro % slots, micro % stash_sets);
        break;
      case 'W': m.stage.backward_weight(micro % slots, micro % stash_sets); break;
    }
  }
  return m.grads();
}

void expect_identical(const std::vector<double>& split, const std::vector<double>& fused, const std::string& what) {
  ASSERT_EQ(split.size(), fused.size());
  double norm = 0;
  for (double g : fused) norm += g * g;
  ASSERT_GT(norm, 0.0) << what;  // a comparison of zeros would prove nothing
  std::size_t differing = 0, first = 0;
  for (std::size_t i = 0; i < fused.size(); ++i)
    if (std::memcmp(&split[i], &fused[i], sizeof(double)) != 0 && differing++ == 0) first = i;
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " gradient elements differ, the first at " << first
                           << ": " << split[first] << " vs " << fused[first];
}

GptConfig gpt2_tiny() { return GptConfig{32, 200, 2, 2, 16}; }  // T <= 32, V 200, L 2, H 2, C 16

}  // namespace

TEST(SplitBackward, InputThenWeightPassesEqualTheFusedBackward) {
  for (const GptConfig& c : {gpt2_tiny(), gpt_preset("llama-micro")}) {
    const std::string arch = c.is_llama() ? "llama-micro" : "gpt2";
    for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const std::string what = arch + ", recompute " + recompute_name(mode);
      // Three micro-batches, two slots and two stash sets: the third forward
      // reuses micro-batch 0's slot after its weight pass, and its input pass
      // reuses stash set 0. The fused run is ordered so that the tied token
      // embedding's terms (the head's in each forward, the embedding's in
      // each weight pass) add up in the same order.
      expect_identical(run(c, mode, "F0 F1 B0 B1 W0 F2 W1 B2 W2 ", 3, 2, 2), run(c, mode, "F0 F1 B0 F2 B1 B2 ", 3, 2, 0),
                       what + ", weight passes late");
      expect_identical(run(c, mode, "F0 F1 B0 W0 B1 W1 F2 B2 W2 ", 3, 2, 1), run(c, mode, "F0 F1 B0 B1 F2 B2 ", 3, 2, 0),
                       what + ", one stash set");
    }
  }
}

TEST(SplitBackward, RefusesStashSetsItDoesNotHave) {
  Model m(gpt2_tiny(), Recompute::kNone, 1, 1);
  EXPECT_THROW(m.stage.backward_input(0, 1), engine::Error);  // only stash set 0 exists
  EXPECT_THROW(m.stage.backward_weight(0, -1), engine::Error);
  EXPECT_THROW(Model(gpt2_tiny(), Recompute::kNone, 1, 2), engine::Error);  // more stash sets than slots
}

TEST(SplitBackward, StashBytesAreWhatTheWeightPassesRead) {
  // Per stash set and block: the four matmuls' output gradients and the
  // norms' parameter gradients, plus the matmuls' inputs under full recomputation (the shared activations are gone by the
  // weight pass); the first stage also keeps its embedding's output gradient.
  const GptConfig c = gpt2_tiny();
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    const auto bytes = [&](int stash_sets) {
      const ParamRegistry registry = build_gpt_registry(c);
      const ParamStore store(registry, engine::DeviceType::kCpu, Precision::kFp32);
      GptStage stage(c, store, whole_model(c), ActivationShape{2, 24, DType::kF32}, 2, {}, nullptr, mode, nullptr,
                     stash_sets);
      engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
      stage.allocate(plan);
      return plan.used();
    };
    const auto rounded = [](std::int64_t floats) {
      const std::size_t a = engine::Arena::kAlignment, raw = static_cast<std::size_t>(floats) * 4;
      return (raw + a - 1) / a * a;
    };
    const std::int64_t N = 2 * 24, C = c.n_embd;
    // d_qkv (N,3C), d_proj_out (N,C), d_fc (N,4C), d_fcproj_out (N,C), the norms' gradients (4C)
    std::size_t per_block = rounded(N * 3 * C) + 2 * rounded(N * C) + rounded(N * 4 * C) + rounded(4 * C);
    // ln1 (N,C), atty (N,C), ln2 (N,C), fc_gelu (N,4C)
    if (mode == Recompute::kFull) per_block += 3 * rounded(N * C) + rounded(N * 4 * C);
    const std::size_t per_set = c.n_layer * per_block + rounded(N * C);
    EXPECT_EQ(bytes(1) - bytes(0), per_set) << recompute_name(mode);
    EXPECT_EQ(bytes(2) - bytes(0), 2 * per_set) << recompute_name(mode);
  }
}
