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

  Model(const GptConfig& c, Recompute mode, int slots, int stash_sets, int input_sets)
      : config(c), registry(build_gpt_registry(config)), store(registry, engine::DeviceType::kCpu, Precision::kFp64),
        stage(config, store, whole_model(config), ActivationShape{B, T, DType::kF64}, slots, {}, nullptr, mode,
              nullptr, stash_sets, input_sets) {
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
  void forward(int micro, int slot, double scale, int inputs) {
    const auto tok = ids(micro, 11), tgt = ids(micro, 5);
    stage.forward(slot, tok.data(), tgt.data(), scale, inputs);
  }
  std::vector<double> grads() const {
    const double* g = store.grads().data_as<double>();
    return std::vector<double>(g, g + registry.total_numel());
  }
};

// Runs `order` ("F0 F1 B0 W0 ..."); with no W in it, the backward is fused.
// Micro-batch i takes slot i % slots, stash set i % stash_sets and
// weight-input set i % input_sets, as the trainer assigns them.
std::vector<double> run(const GptConfig& c, Recompute mode, const std::string& order, int micro_batches,
                        int slots, int stash_sets = 0, int input_sets = 0) {
  Model m(c, mode, slots, stash_sets, input_sets);
  const double scale = 1.0 / static_cast<double>(micro_batches * m.B * m.T);
  for (std::size_t i = 0; i < order.size(); i += 3) {
    const int micro = order[i + 1] - '0';
    const int inputs = input_sets > 0 ? micro % input_sets : -1;
    switch (order[i]) {
      case 'F': m.forward(micro, micro % slots, scale, inputs); break;
      case 'B':
        if (stash_sets == 0) m.stage.backward(micro % slots);
        else m.stage.backward_input(micro % slots, micro % stash_sets, inputs);
        break;
      case 'W': m.stage.backward_weight(micro % stash_sets, inputs); break;
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
      // Three micro-batches: the third forward reuses micro-batch 0's slot
      // and weight-input set after its weight pass, and its input pass
      // reuses stash set 0. The fused run is ordered so that the tied token
      // embedding's terms (the head's in each forward, the embedding's in
      // each weight pass) add up in the same order.
      expect_identical(run(c, mode, "F0 F1 B0 B1 W0 F2 W1 B2 W2 ", 3, 2, 2, 2), run(c, mode, "F0 F1 B0 F2 B1 B2 ", 3, 2),
                       what + ", weight passes late");
      expect_identical(run(c, mode, "F0 F1 B0 W0 B1 W1 F2 B2 W2 ", 3, 2, 1, 2), run(c, mode, "F0 F1 B0 B1 F2 B2 ", 3, 2),
                       what + ", one stash set");
      // One slot: each forward overwrites the slot of a micro-batch whose
      // weight pass has not run, which keeps its inputs in its own set.
      expect_identical(run(c, mode, "F0 B0 F1 B1 W0 F2 B2 W1 W2 ", 3, 1, 2, 2), run(c, mode, "F0 F1 B0 F2 B1 B2 ", 3, 2),
                       what + ", one slot");
    }
  }
}

TEST(SplitBackward, RefusesSetsItDoesNotHave) {
  Model m(gpt2_tiny(), Recompute::kNone, 1, 1, 1);
  EXPECT_THROW(m.stage.backward_input(0, 1, 0), engine::Error);  // only stash set 0 exists
  EXPECT_THROW(m.stage.backward_weight(0, 1), engine::Error);    // only weight-input set 0
  EXPECT_THROW(m.stage.backward(0), engine::Error);              // built for a split backward
  EXPECT_THROW(Model(gpt2_tiny(), Recompute::kNone, 2, 1, 1), engine::Error);  // fewer input sets than slots
  EXPECT_THROW(Model(gpt2_tiny(), Recompute::kNone, 1, 2, 1), engine::Error);  // ... than stash sets
}

TEST(SplitBackward, KeepsOnlyWhatTheWeightPassesRead) {
  // A stash set holds, per block, the four matmuls' output gradients and the
  // norms' parameter gradients (plus the matmuls' inputs under full
  // recomputation, whose activations are shared), and on the first stage the
  // embedding's output gradient and tokens. A weight-input set holds the
  // four matmul inputs, which the slots then do not: a slot is free after
  // the input pass.
  const GptConfig c = gpt2_tiny();
  const std::int64_t N = 2 * 24, C = c.n_embd, L = c.n_layer;
  const auto rounded = [](std::int64_t elements, std::int64_t bytes_each) {
    const std::size_t a = engine::Arena::kAlignment, raw = static_cast<std::size_t>(elements * bytes_each);
    return (raw + a - 1) / a * a;
  };
  const std::size_t inputs_per_block = 3 * rounded(N * C, 4) + rounded(N * 4 * C, 4);  // ln1, atty, ln2, fc_gelu
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    const auto bytes = [&](int slots, int stash_sets, int input_sets) {
      const ParamRegistry registry = build_gpt_registry(c);
      const ParamStore store(registry, engine::DeviceType::kCpu, Precision::kFp32);
      GptStage stage(c, store, whole_model(c), ActivationShape{2, 24, DType::kF32}, slots, {}, nullptr, mode, nullptr,
                     stash_sets, input_sets);
      engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
      stage.allocate(plan);
      return plan.used();
    };
    // d_qkv (N,3C), d_proj_out (N,C), d_fc (N,4C), d_fcproj_out (N,C), the norms' gradients (4C)
    std::size_t stash_per_block = rounded(N * 3 * C, 4) + 2 * rounded(N * C, 4) + rounded(N * 4 * C, 4) + rounded(4 * C, 4);
    if (mode == Recompute::kFull) stash_per_block += inputs_per_block;
    const std::size_t per_stash = L * stash_per_block + rounded(N * C, 4) + rounded(N, 4);  // + embedding's grad, tokens
    EXPECT_EQ(bytes(2, 2, 3) - bytes(2, 1, 3), per_stash) << recompute_name(mode);
    // Full recomputation keeps no inputs per micro-batch (its stashes copy them).
    EXPECT_EQ(bytes(2, 1, 3) - bytes(2, 1, 2), mode == Recompute::kFull ? 0 : L * inputs_per_block)
        << recompute_name(mode);
    if (mode == Recompute::kNone) {
      // The slots of a split stage lack exactly the inputs.
      EXPECT_EQ((bytes(2, 1, 2) - bytes(1, 1, 2)) + L * inputs_per_block, bytes(2, 0, 0) - bytes(1, 0, 0));
    }
  }
}

TEST(SplitBackward, LayersAreDoneAfterTheirWeightPass) {
  // The data-parallel strategy starts a bucket's reduction when the backward
  // hook says its layers are done: with a split backward that is the weight
  // pass (the input pass writes no parameter gradient), in the same order
  // as the fused backward (last layer first, the embedding last).
  const GptConfig c = gpt2_tiny();
  Model m(c, Recompute::kNone, 1, 1, 1);
  std::vector<std::int64_t> done;
  m.stage.set_backward_hook([&](std::int64_t layer) { done.push_back(layer); });
  m.forward(0, 0, 1.0, 0);
  m.stage.backward_input(0, 0, 0);
  EXPECT_TRUE(done.empty()) << "a layer reported done by its input pass";
  m.stage.backward_weight(0, 0);
  EXPECT_EQ(done, (std::vector<std::int64_t>{1, 0, -1}));
}
