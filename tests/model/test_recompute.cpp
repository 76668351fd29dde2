// Activation recomputation (model/recompute.h; Korthikanti et al. 2023).
//
// 1. Exactness. Recomputation reruns the very ops forward ran, on the very
//    same inputs (the kept qkv, or the kept block input and unchanged
//    weights), into buffers of the same shapes and alignment. The CPU ops are
//    deterministic for a given thread count (static OpenMP schedules, fixed
//    BLAS calls per (batch, head)), and one process keeps one thread count,
//    so the recomputed activations are bit-for-bit those forward made, and so
//    are the losses and gradients: the modes are compared with ==, not a
//    tolerance. fp64 makes the check independent of fp32-only code paths and
//    matches the gradient check's precision.
// 2. Memory. The planning arena's size falls none > selective > full, by
//    exactly what each mode stops keeping, predicted here from the shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "model/recompute.h"

using namespace model;
using engine::DType;
using engine::Tensor;

namespace {

constexpr Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};

// A tiny GPT in fp64 whose stage runs under `mode`, like the gradient check's
// but with T above the CPU attention's 64-row tile and three layers.
struct TinyGpt {
  GptConfig config{80, 200, 3, 2, 16};  // T<=80, V=200 (padded to 256), L=3, H=2, C=16
  std::int64_t B = 2, T = 70;
  ParamRegistry registry = build_gpt_registry(config);
  ParamStore store{registry, engine::DeviceType::kCpu, Precision::kFp64};
  GptStage stage;
  engine::Arena arena;

  TinyGpt(Recompute mode, int slots)
      : stage(config, store, whole_model(config), ActivationShape{B, T, DType::kF64}, slots, {}, nullptr, mode) {
    engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
    stage.allocate(plan);
    arena = engine::Arena(engine::DeviceType::kCpu, plan.used());
    stage.allocate(arena);
    store.initialize(42);
    // Larger-than-GPT-2 weights so the attention is far from uniform.
    auto* w = store.master().data_as<double>();
    std::vector<double> noise(static_cast<std::size_t>(registry.total_numel()));
    engine::fill_normal(noise.data(), registry.total_numel(), engine::rng_key(7, "noise"), 0, 0.0, 0.3);
    for (std::int64_t i = 0; i < registry.total_numel(); ++i) w[i] += noise[i];
  }

  // Tokens and targets of micro-batch `k`.
  std::vector<std::int32_t> tokens(int k) const {
    std::vector<std::int32_t> t;
    for (std::int64_t i = 0; i < B * T; ++i) t.push_back(static_cast<std::int32_t>((i * 37 + 11 + 101 * k) % 200));
    return t;
  }
  std::vector<std::int32_t> targets(int k) const {
    std::vector<std::int32_t> t;
    for (std::int64_t i = 0; i < B * T; ++i) t.push_back(static_cast<std::int32_t>((i * 53 + 5 + 67 * k) % 200));
    return t;
  }

  std::vector<double> grads() const {
    const double* g = store.grads().data_as<double>();
    return std::vector<double>(g, g + registry.total_numel());
  }
};

struct Result {
  std::vector<double> losses;
  std::vector<double> grads;
};

// One micro-batch: forward, backward.
Result one_micro_batch(Recompute mode) {
  TinyGpt gpt(mode, 1);
  const auto tok = gpt.tokens(0), tgt = gpt.targets(0);
  gpt.stage.forward(0, tok.data(), tgt.data(), 1.0 / static_cast<double>(gpt.B * gpt.T));
  Result r;
  r.losses.push_back(gpt.stage.loss_sum(0));
  gpt.stage.backward(0);
  r.grads = gpt.grads();
  return r;
}

// Two micro-batches in flight, as a pipeline schedule runs them: forward slot
// 0, forward slot 1, backward slot 0, backward slot 1. Slot 1's forward
// overwrites every shared tensor slot 0 relied on before slot 0's backward.
Result two_interleaved_micro_batches(Recompute mode) {
  TinyGpt gpt(mode, 2);
  const auto tok0 = gpt.tokens(0), tgt0 = gpt.targets(0), tok1 = gpt.tokens(1), tgt1 = gpt.targets(1);
  const double scale = 1.0 / static_cast<double>(2 * gpt.B * gpt.T);
  gpt.stage.forward(0, tok0.data(), tgt0.data(), scale);
  gpt.stage.forward(1, tok1.data(), tgt1.data(), scale);
  gpt.stage.backward(0);
  gpt.stage.backward(1);
  Result r;
  r.losses = {gpt.stage.loss_sum(0), gpt.stage.loss_sum(1)};
  r.grads = gpt.grads();
  return r;
}

void expect_identical(const Result& a, const Result& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << " loss " << i;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  std::size_t differing = 0, first = 0;
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    if (std::memcmp(&a.grads[i], &b.grads[i], sizeof(double)) != 0 && differing++ == 0) first = i;
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " gradient elements differ, the first at " << first
                           << ": " << a.grads[first] << " vs " << b.grads[first];
}

}  // namespace

TEST(Recompute, ParsesAndNamesModes) {
  for (Recompute m : kModes) EXPECT_EQ(parse_recompute(recompute_name(m)), m);
  EXPECT_THROW(parse_recompute("partial"), engine::Error);
}

TEST(Recompute, SelectiveAndFullGiveBitIdenticalLossAndGradients) {
  const Result none = one_micro_batch(Recompute::kNone);
  ASSERT_GT(none.losses[0], 0.0);
  double norm = 0;
  for (double g : none.grads) norm += g * g;
  ASSERT_GT(norm, 0.0);  // a vacuous comparison of zeros would prove nothing
  expect_identical(one_micro_batch(Recompute::kSelective), none, "selective");
  expect_identical(one_micro_batch(Recompute::kFull), none, "full");
}

TEST(Recompute, InterleavedSlotsGiveBitIdenticalLossAndGradients) {
  const Result none = two_interleaved_micro_batches(Recompute::kNone);
  ASSERT_NE(none.losses[0], none.losses[1]);  // the two micro-batches really differ
  expect_identical(two_interleaved_micro_batches(Recompute::kSelective), none, "selective, 2 slots");
  expect_identical(two_interleaved_micro_batches(Recompute::kFull), none, "full, 2 slots");
}

// ---- memory -------------------------------------------------------------------

namespace {

// Bytes the arena takes for one tensor: every allocation is rounded up to its
// alignment.
std::size_t bytes_of(std::int64_t numel, DType dtype) {
  const std::size_t raw = static_cast<std::size_t>(numel) * engine::dtype_size(dtype);
  const std::size_t a = engine::Arena::kAlignment;
  return (raw + a - 1) / a * a;
}

// The activation bytes a stage should plan, from the shapes alone (CPU, no
// tensor parallelism: att_saved is the (B,H,T,T) probabilities).
std::size_t predicted_bytes(const GptConfig& c, StageRange r, std::int64_t B, std::int64_t T, DType dt, int slots,
                            Recompute mode) {
  const DType st = dt == DType::kF64 ? DType::kF64 : DType::kF32;
  const std::int64_t C = c.n_embd, N = B * T, L = r.last_layer - r.first_layer;
  const std::size_t btc = bytes_of(N * C, dt), stat = bytes_of(N, st);
  const std::size_t att_saved = bytes_of(B * c.n_head * T * T, st);
  // One block's BlockActivations: ln1, residual2, ln2 (B,T,C); four norm
  // statistics; qkv (B,T,3C); atty (B,T,C); fc_pre, fc_gelu (B,T,4C); att_saved.
  const std::size_t block = 3 * btc + 4 * stat + bytes_of(N * 3 * C, dt) + bytes_of(N * C, dt) +
                            2 * bytes_of(N * 4 * C, dt) + att_saved;
  // What every slot keeps whatever the mode: the residual stream (each
  // block's input, and the stage's output), tokens, targets, losses, and the
  // gradient at the stage's output.
  std::size_t slot = (L + 1) * btc;
  if (r.has_embedding) slot += bytes_of(N, DType::kI32);
  slot += r.has_head ? bytes_of(N, DType::kI32) + bytes_of(N, st) + btc : btc;
  // Per slot, per block, by mode; and what the stage keeps once.
  std::size_t kept_per_block = 0, shared_recompute = 0;
  switch (mode) {
    case Recompute::kNone: kept_per_block = block; break;
    case Recompute::kSelective: kept_per_block = block - att_saved, shared_recompute = att_saved; break;
    case Recompute::kFull: shared_recompute = block; break;
  }
  if (L == 0) shared_recompute = 0;
  // Shared by all slots: BlockScratch (branch, d_c, d_atty, d_qkv, d_fc), dresidual,
  // and the head's temporaries (lnf, its statistics, d_lnf, logits).
  std::size_t shared = 2 * btc + btc + bytes_of(N * 3 * C, dt) + bytes_of(N * 4 * C, dt) + btc;
  if (r.has_head) shared += 2 * btc + 2 * stat + bytes_of(N * c.padded_vocab(), dt);
  return slots * (slot + L * kept_per_block) + shared_recompute + shared;
}

std::size_t planned_bytes(const GptConfig& c, const ParamStore& store, StageRange r, std::int64_t B, std::int64_t T,
                          DType dt, int slots, Recompute mode) {
  GptStage stage(c, store, r, ActivationShape{B, T, dt}, slots, {}, nullptr, mode);
  engine::Arena plan = engine::Arena::planning(engine::DeviceType::kCpu);
  stage.allocate(plan);
  return plan.used();
}

}  // namespace

TEST(Recompute, ActivationBytesFallByWhatEachModeStopsKeeping) {
  // A T that makes the (B,H,T,T) probabilities dominate, and sizes that are
  // not multiples of the arena's alignment.
  GptConfig c{160, 200, 4, 4, 24};
  const std::int64_t B = 3, T = 150;
  for (StageRange r : {whole_model(c), pipeline_stage_range(c, 1, 3), pipeline_stage_range(c, 0, 2),
                       pipeline_stage_range(c, 1, 2)}) {
    const ParamRegistry registry = build_gpt_registry(c, r);
    const ParamStore store(registry, engine::DeviceType::kCpu, Precision::kFp32);
    const std::int64_t L = r.last_layer - r.first_layer;
    for (int slots : {1, 3}) {
      std::size_t previous = 0;
      for (Recompute mode : kModes) {
        const std::size_t planned = planned_bytes(c, store, r, B, T, DType::kF32, slots, mode);
        EXPECT_EQ(planned, predicted_bytes(c, r, B, T, DType::kF32, slots, mode))
            << recompute_name(mode) << ", layers [" << r.first_layer << ", " << r.last_layer << "), " << slots
            << " slots";
        // One block and one slot: the shared set replaces the only per-slot
        // set, so recomputation saves nothing (and only costs time).
        if (mode != Recompute::kNone && L * slots > 1) EXPECT_LT(planned, previous) << recompute_name(mode);
        if (mode != Recompute::kNone && L * slots == 1) EXPECT_EQ(planned, previous) << recompute_name(mode);
        previous = planned;
      }
      // Selective drops exactly the probabilities of every block and slot but
      // the one shared copy.
      EXPECT_EQ(planned_bytes(c, store, r, B, T, DType::kF32, slots, Recompute::kNone) -
                    planned_bytes(c, store, r, B, T, DType::kF32, slots, Recompute::kSelective),
                (L * slots - 1) * bytes_of(B * c.n_head * T * T, DType::kF32));
    }
  }
}

TEST(Recompute, ActivationBytesOfGpt2At4x1024) {
  // The numbers the report quotes: gpt2-124m, B=4, T=1024, fp32 on the CPU,
  // one slot (one process, no pipeline).
  const GptConfig c = gpt_preset("gpt2-124m");
  const ParamRegistry registry = build_gpt_registry(c);
  const ParamStore store(registry, engine::DeviceType::kCpu, Precision::kFp32);
  for (Recompute mode : kModes) {
    const std::size_t planned = planned_bytes(c, store, whole_model(c), 4, 1024, DType::kF32, 1, mode);
    EXPECT_EQ(planned, predicted_bytes(c, whole_model(c), 4, 1024, DType::kF32, 1, mode));
    std::cout << "gpt2-124m B=4 T=1024 fp32 cpu, recompute " << recompute_name(mode) << ": " << planned
              << " bytes (" << engine::format_bytes(planned) << ")\n";
  }
}
