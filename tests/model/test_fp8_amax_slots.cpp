// The FP8 amax slots (model::ActivationShape::fp8_amax; issue 35): under
// --precision fp8 each block keeps the amax every linear layer's input was
// scaled by, made by the norm or GELU that wrote the input where it can be,
// and its backward reads them instead of reading those inputs again. They
// must change no number: a stage with the slots computes, bit for bit, what
// a stage without them computes (where every FP8 op finds each amax itself),
// whatever the recomputation mode (full recomputation reruns the forward into
// activations every micro-batch shares), with micro-batches interleaved as a
// pipeline runs them, and with the backward split into input and weight
// passes (the weight pass reads the slots from its set or stash). A stale or
// misplaced slot shifts an E4M3 grid, which changes the gradients.
//
// The CPU runs the quantise-dequantise reference (engine/cpu/fp8_matmul.cpp)
// in f32; tests/engine/cpu/test_fp8_matmul.cpp checks that the ops really read
// a ready slot (a wrong one changes the result) and fill the ones asked for.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "model/recompute.h"

using namespace model;
using engine::DType;

namespace {

struct Fp8Model {
  GptConfig config;
  std::int64_t B = 2, T = 16;
  ParamRegistry registry;
  ParamStore store;
  GptStage stage;
  engine::Arena arena;

  Fp8Model(const GptConfig& c, bool amax_slots, Recompute mode, int slots, int stash_sets, int input_sets)
      : config(c), registry(build_gpt_registry(config)), store(registry, engine::DeviceType::kCpu, Precision::kFp32),
        stage(config, store, whole_model(config), ActivationShape{B, T, DType::kF32, amax_slots}, slots, {}, nullptr,
              mode, nullptr, stash_sets, input_sets) {
    stage.set_matmul_format(engine::ops::MatmulFormat::kFp8E4M3);
    engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
    stage.allocate(plan);
    arena = engine::Arena(engine::DeviceType::kCpu, plan.used());
    stage.allocate(arena);
    store.initialize(42);
    // Weights far from GPT-2's small initialisation, so the activations'
    // amaxes differ from layer to layer and micro-batch to micro-batch.
    auto* w = store.master().data_as<float>();
    std::vector<float> noise(static_cast<std::size_t>(registry.total_numel()));
    engine::fill_normal(noise.data(), registry.total_numel(), engine::rng_key(7, "noise"), 0, 0.0f, 0.3f);
    for (std::int64_t i = 0; i < registry.total_numel(); ++i) w[i] += noise[i];
  }

  std::vector<std::int32_t> ids(int micro, int salt) const {
    std::vector<std::int32_t> t;
    for (std::int64_t i = 0; i < B * T; ++i)
      t.push_back(static_cast<std::int32_t>((i * 37 + salt + 101 * micro) % config.vocab_size));
    return t;
  }
};

struct Run {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Runs `order` ("F0 F1 B0 W0 ..."; no W: fused backward), micro-batch i in
// slot i % slots, stash set i % stash_sets, weight-input set i % input_sets.
Run run(const GptConfig& c, bool amax_slots, Recompute mode, const std::string& order, int micro_batches, int slots,
        int stash_sets = 0, int input_sets = 0) {
  Fp8Model m(c, amax_slots, mode, slots, stash_sets, input_sets);
  const double scale = 1.0 / static_cast<double>(micro_batches * m.B * m.T);
  Run r;
  for (std::size_t i = 0; i < order.size(); i += 3) {
    const int micro = order[i + 1] - '0';
    const int inputs = input_sets > 0 ? micro % input_sets : -1;
    switch (order[i]) {
      case 'F': {
        const auto tok = m.ids(micro, 11), tgt = m.ids(micro, 5);
        m.stage.forward(micro % slots, tok.data(), tgt.data(), scale, inputs);
        r.losses.push_back(m.stage.loss_sum(micro % slots));
        break;
      }
      case 'B':
        if (stash_sets == 0) m.stage.backward(micro % slots);
        else m.stage.backward_input(micro % slots, micro % stash_sets, inputs);
        break;
      case 'W': m.stage.backward_weight(micro % stash_sets, inputs); break;
    }
  }
  const float* g = m.store.grads().data_as<float>();
  r.grads.assign(g, g + m.registry.total_numel());
  return r;
}

void expect_identical(const Run& with_slots, const Run& without, const std::string& what) {
  ASSERT_EQ(with_slots.losses, without.losses) << what;
  ASSERT_EQ(with_slots.grads.size(), without.grads.size());
  double norm = 0;
  for (float g : without.grads) norm += static_cast<double>(g) * g;
  ASSERT_GT(norm, 0.0) << what;  // a comparison of zeros would prove nothing
  std::size_t differing = 0, first = 0;
  for (std::size_t i = 0; i < without.grads.size(); ++i)
    if (std::memcmp(&with_slots.grads[i], &without.grads[i], sizeof(float)) != 0 && differing++ == 0) first = i;
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " gradient elements differ, the first at " << first
                           << ": " << with_slots.grads[first] << " vs " << without.grads[first];
}

GptConfig gpt2_tiny() { return GptConfig{32, 200, 2, 2, 16}; }  // T <= 32, V 200, L 2, H 2, C 16

}  // namespace

TEST(Fp8AmaxSlots, ChangeNoNumberInAnyModeOrSchedule) {
  for (const GptConfig& c : {gpt2_tiny(), gpt_preset("llama-micro")}) {
    const std::string arch = c.is_llama() ? "llama-micro" : "gpt2";
    for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      const std::string what = arch + ", recompute " + recompute_name(mode);
      // Two micro-batches in flight: the second forward overwrites whatever
      // the slots share before the first backward.
      const std::string fused = "F0 F1 B0 B1 ";
      expect_identical(run(c, true, mode, fused, 2, 2), run(c, false, mode, fused, 2, 2), what + ", fused backward");
      // Split: the weight passes read their inputs' slots from weight-input
      // sets (or, under full recomputation, from the stash's own copies).
      const std::string split = "F0 F1 B0 B1 W0 F2 W1 B2 W2 ";
      expect_identical(run(c, true, mode, split, 3, 2, 2, 2), run(c, false, mode, split, 3, 2, 2, 2),
                       what + ", split backward");
    }
  }
}

TEST(Fp8AmaxSlots, AreAllocatedOnlyForFp8) {
  // The slots are one arena allocation per block (and per weight-input set),
  // and one of scratch: the memory plan counts them under fp8 alone.
  const GptConfig c = gpt2_tiny();
  const auto planned = [&](bool slots) {
    const ParamRegistry registry = build_gpt_registry(c);
    const ParamStore store(registry, engine::DeviceType::kCpu, Precision::kFp32);
    GptStage stage(c, store, whole_model(c), ActivationShape{2, 16, DType::kF32, slots}, 1);
    engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
    stage.allocate(plan);
    return plan.used();
  };
  EXPECT_EQ(planned(true) - planned(false),
            static_cast<std::size_t>(c.n_layer + 1) * engine::Arena::kAlignment);
}
