// Every activation buffer a pipeline stage allocates, and the one function
// that allocates them. model::GptStage computes in these buffers; the memory
// plan (model/memory_plan.h) runs the same function on a planning arena, so
// the start-up memory line and the planner count exactly what training
// allocates (see model/gpt_stage.h for what each recomputation mode keeps).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/buffer.h"
#include "model/gpt_config.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "model/transformer_block.h"

namespace model {

struct StageActivations {
  // Per slot (micro-batch in flight)
  std::vector<std::vector<engine::Tensor>> residuals;  // [slot][0..n_blocks] (B,T,C), this rank's (n,C) under SP
  std::vector<std::vector<BlockActivations>> acts;     // [slot][block]; empty under full recomputation
  std::vector<engine::Tensor> tokens, targets;         // (B,T) i32 (first / last stage)
  std::vector<engine::Tensor> losses;                  // (B*T) (last stage)
  std::vector<engine::Tensor> head_dres;               // (B,T,C) gradient of the last residual (last stage)
  std::vector<engine::Tensor> output_grads;            // (B,T,C) (non-last stages)
  // A split backward (zero-bubble schedules). Per weight-input set (one per
  // micro-batch between its forward and its weight pass), the matmul inputs
  // the weight pass reads, which the slots then do not hold (none under full
  // recomputation: the stashes copy them from the shared set):
  std::vector<std::vector<BlockActivations>> weight_inputs;  // [set][block] ln1, atty, ln2, fc_gelu only
  // Per weight-gradient stash set (one per micro-batch whose input-gradient
  // pass has run and weight-gradient pass has not):
  std::vector<std::vector<WeightGradStash>> weight_stash;  // [set][block]
  std::vector<engine::Tensor> embedding_grad_stash;        // [set] (first stage) gradient of the embedding's output
  std::vector<engine::Tensor> embedding_token_stash;       // [set] (first stage) its tokens, (B,T) i32
  // Shared by all slots
  BlockScratch scratch;
  BlockActivations shared;  // full: every tensor; selective: att_saved only; none: nothing
  engine::Tensor dresidual;                            // (B,T,C)
  engine::Tensor lnf, lnf_mean, lnf_rstd, d_lnf;       // head temporaries (last stage)
  engine::Tensor logits;                               // (B*T, Vp/tp)
  engine::Tensor ce_max, ce_sums;                      // (B*T), (2, B*T): vocabulary-parallel loss statistics
};

// The activations of the stage running blocks [range.first_layer,
// range.last_layer) with `slots` micro-batches between forward and backward
// and, for a schedule that splits the backward, `weight_input_sets` between
// forward and weight pass and `weight_stash_sets` between input and weight
// pass (the schedule's peak_in_flight, peak_until_weight and
// peak_awaiting_weight).
StageActivations allocate_stage_activations(engine::Arena& arena, const GptConfig& config, const StageRange& range,
                                            const ActivationShape& shape, int slots, TensorParallel tp,
                                            Recompute recompute, int weight_stash_sets = 0,
                                            int weight_input_sets = 0);

// The bytes allocate_stage_activations takes on `device` (a planning
// arena's count: every tensor rounded up to engine::Arena::kAlignment; the
// device decides what attention keeps, engine::ops::attention_saved_shape).
std::size_t stage_activation_bytes(engine::DeviceType device, const GptConfig& config, const StageRange& range,
                                   const ActivationShape& shape, int slots, TensorParallel tp, Recompute recompute,
                                   int weight_stash_sets = 0, int weight_input_sets = 0);

}  // namespace model
