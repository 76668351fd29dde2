// The memory model: the bytes every rank of a layout holds, computed from the
// model and the layout alone, before anything is allocated. One
// implementation serves the trainer's start-up memory line (launch/run/
// memory_report.h) and the planner (launch/plan/planner.h): it runs the same
// functions that size the real buffers (the parameter registry and its
// ZeRO padding, the shard chunks, allocate_stage_activations on a planning
// arena, the ZeRO staging bound), so the prediction is exact, not estimated.
// tests/launch/run/test_memory_plan.cpp checks it against the allocations of real
// runs under many layouts.
//
// What a rank holds (Rajbhandari et al. 2020, "ZeRO", section 3 and 5, for
// Psi parameters on N data-parallel ranks and the engine's precisions):
//   weights     fp32 master (+ bf16 working copy on CUDA);  /N under ZeRO-3
//               (+ the blocks' FP8 copies under --precision fp8: 2 bytes a
//               block parameter on CUDA, a 4-byte image on the CPU; whole)
//   grads       fp32, accumulated over micro-batches;        /N under ZeRO-2/3
//   optimizer   AdamW's two fp32 moments (optim/adamw.h);    /N under ZeRO-1/2/3
//   activations the stage's activation arena (model/stage_activations.h):
//               one slot per micro-batch in flight (1F1B: pp - stage; AFAB:
//               every micro-batch), what the recomputation mode keeps, and
//               under a zero-bubble schedule the weight-gradient stashes
//   staging     ZeRO-2/3 gather and reduce buffers at their bound
//               (parallel/dp_zero_units.h)
//   communication  NCCL's own buffers, one set per communicator of more than
//               one rank this rank belongs to (tp, dp, pp, the tied
//               embedding's pair): an estimate from NCCL's buffer sizes
//               (parallel/nccl_memory.h), the one kind not allocated by the
//               engine and so not exact; 0 without NCCL
// The ZeRO paper's 16 Psi for mixed-precision Adam (2 + 2 + 12) counts fp16
// gradients and an fp32 master inside the optimizer state; here the master
// is under weights and gradients stay fp32 (4 + 2 + 4 + 8 = 18 Psi on CUDA).
// 1-bit Adam's extra error buffers are not planned (the planner does not
// choose it; the memory line adds the optimizer's own count under --onebit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "model/gpt_config.h"
#include "model/param_store.h"
#include "model/recompute.h"
#include "parallel/nccl_memory.h"
#include "parallel/pipeline_schedule.h"

namespace model {

// A parallel layout as the memory (and step-time) model needs it.
struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;
  int zero = 0;  // ZeRO stage 0..3; with dp 1 every stage is stage 0
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  parallel::ScheduleKind schedule = parallel::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;  // chunks of layers per rank (the interleaved schedule)
  std::int64_t micro_batch = 1;    // sequences per micro-batch
  std::int64_t micro_batches = 1;  // per data-parallel replica per step
  std::int64_t seq_len = 1;
  Precision precision = Precision::kFp32;
  engine::DeviceType device = engine::DeviceType::kCpu;
  // --precision fp8 with each block weight's FP8 form kept between optimizer
  // steps (model::GptStage::set_fp8_weight_cache): counted under weights.
  bool fp8_weight_copies = false;
  // --precision fp8 (or fp8-emulated): the blocks' linear layers in E4M3, for
  // the step time (model/step_cost.h: their rate and their casts) and the
  // activations' amax slots (model::ActivationShape::fp8_amax).
  bool fp8_matmuls = false;
  // The ranks talk over NCCL (CUDA, --comm nccl): its buffers are counted
  // under communication, at these sizes.
  bool nccl = false;
  parallel::NcclBufferSizes nccl_buffers;

  int zero_stage() const { return dp > 1 ? zero : 0; }
  int devices() const { return tp * pp * dp; }
};

// Bytes of one rank, by kind.
struct RankMemory {
  std::size_t weights = 0, grads = 0, optimizer = 0, activations = 0, staging = 0, communication = 0;
  std::size_t total() const { return weights + grads + optimizer + activations + staging + communication; }
};

struct MemoryPlan {
  std::vector<RankMemory> stages;  // [pp stage]; every tp and dp rank of a stage holds the same
  RankMemory largest_of_each() const;  // per kind, the largest over stages (the memory line's figures)
  std::size_t largest_total() const;   // the rank that holds most: what must fit on one device
};

// Throws (naming the problem) when the model cannot be cut this way
// (model/partition.h) or the micro-batch does not split under sequence parallelism.
MemoryPlan plan_memory(const GptConfig& config, const ParallelLayout& layout);
RankMemory plan_stage_memory(const GptConfig& config, const ParallelLayout& layout, int pp_rank);

// Activation slots of `pp_rank` under the layout's schedule (summed over its
// chunks of layers), and each chunk's (one entry unless interleaved).
int activation_slots(const ParallelLayout& layout, int pp_rank);
std::vector<int> chunk_activation_slots(const ParallelLayout& layout, int pp_rank);
// For a schedule that splits the backward (zero-bubble), what chunk `chunk`
// of `pp_rank` (its model::GptStage) keeps for its weight passes: stash sets
// for the most micro-batches between their input and weight passes at once,
// weight-input sets for those between forward and weight pass; {0, 0} for
// the others.
struct WeightPassSets {
  int stash = 0, inputs = 0;
};
WeightPassSets weight_pass_sets(const ParallelLayout& layout, int pp_rank, int chunk = 0);
// The same for a rank's own schedule (what the trainer builds its stages with).
WeightPassSets weight_pass_sets(const std::vector<parallel::Action>& schedule, int chunk = 0);

// NCCL's buffers on `pp_rank` (every tp and dp rank of a stage alike): a
// collective set for each of the tp and dp groups of more than one rank and
// for the tied embedding's pair (first and last stage, when they are
// different ranks), a point-to-point set for the pipeline's neighbours.
// 0 unless layout.nccl.
std::size_t nccl_buffer_bytes(const GptConfig& config, const ParallelLayout& layout, int pp_rank);

}  // namespace model
