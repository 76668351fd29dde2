#include "model/stage_activations.h"

namespace model {

using engine::Shape;

StageActivations allocate_stage_activations(engine::Arena& arena, const GptConfig& config, const StageRange& range,
                                            const ActivationShape& shape, int slots, TensorParallel tp,
                                            Recompute recompute, int weight_stash_sets, int weight_input_sets) {
  const std::int64_t B = shape.batch, T = shape.seq, C = config.n_embd;
  const std::size_t n_blocks = static_cast<std::size_t>(range.last_layer - range.first_layer);
  // The residual stream holds this rank's tokens under sequence parallelism.
  const std::int64_t n = tp.local_tokens(B * T);
  const Shape stream = tp.splits_tokens() ? Shape{n, C} : Shape{B, T, C};
  const engine::DType dt = shape.dtype, st = shape.stat_dtype();
  // The weight passes' inputs live in sets of their own unless full
  // recomputation shares them (then each stash copies its micro-batch's).
  const bool separate_weight_inputs = weight_stash_sets > 0 && recompute != Recompute::kFull;
  StageActivations a;
  a.residuals.resize(slots);
  a.acts.resize(slots);
  a.tokens.resize(slots);
  a.targets.resize(slots);
  a.losses.resize(slots);
  a.head_dres.resize(slots);
  a.output_grads.resize(slots);
  for (int s = 0; s < slots; ++s) {
    for (std::size_t i = 0; i <= n_blocks; ++i) a.residuals[s].push_back(arena.allocate(stream, dt, "residual"));
    if (recompute != Recompute::kFull)
      for (std::size_t i = 0; i < n_blocks; ++i)
        a.acts[s].push_back(allocate_block_activations(arena, config, shape, tp, recompute != Recompute::kSelective,
                                                       !separate_weight_inputs));
    if (range.has_embedding) a.tokens[s] = arena.allocate(Shape{B, T}, engine::DType::kI32, "tokens");
    if (range.has_head) {
      a.targets[s] = arena.allocate(Shape{B, T}, engine::DType::kI32, "targets");
      a.losses[s] = arena.allocate(Shape{B * T}, st, "losses");
      a.head_dres[s] = arena.allocate(stream, dt, "head_dres");
    } else {
      a.output_grads[s] = arena.allocate(stream, dt, "output_grad");
    }
  }
  // The weight passes' stashes own their inputs only under full
  // recomputation (see WeightGradStash).
  if (separate_weight_inputs) {
    a.weight_inputs.resize(weight_input_sets);
    for (int k = 0; k < weight_input_sets; ++k)
      for (std::size_t i = 0; i < n_blocks; ++i) a.weight_inputs[k].push_back(allocate_weight_inputs(arena, config, shape, tp));
  }
  a.weight_stash.resize(weight_stash_sets);
  for (int k = 0; k < weight_stash_sets; ++k) {
    for (std::size_t i = 0; i < n_blocks; ++i)
      a.weight_stash[k].push_back(
          allocate_weight_grad_stash(arena, config, shape, tp, recompute == Recompute::kFull));
    if (range.has_embedding) {
      a.embedding_grad_stash.push_back(arena.allocate(stream, dt, "embedding_grad_stash"));
      a.embedding_token_stash.push_back(arena.allocate(Shape{B, T}, engine::DType::kI32, "embedding_token_stash"));
    }
  }
  a.scratch = allocate_block_scratch(arena, config, shape, tp);
  // What recomputation rebuilds lives once per stage, not per slot and block:
  // only one block's backward runs at a time, and its recompute() refills it
  // right before.
  if (n_blocks > 0) {
    if (recompute == Recompute::kFull) a.shared = allocate_block_activations(arena, config, shape, tp);
    if (recompute == Recompute::kSelective) a.shared.att_saved = allocate_attention_saved(arena, config, shape, tp);
  }
  a.dresidual = arena.allocate(stream, dt, "dresidual");
  if (range.has_head) {
    a.lnf = arena.allocate(Shape{B, T, C}, dt, "lnf");
    if (!config.is_llama()) a.lnf_mean = arena.allocate(Shape{n}, st, "lnf_mean");  // RMSNorm has none
    a.lnf_rstd = arena.allocate(Shape{n}, st, "lnf_rstd");
    a.d_lnf = arena.allocate(Shape{B, T, C}, dt, "d_lnf");
    a.logits = arena.allocate(Shape{B * T, config.padded_vocab() / tp.size}, dt, "logits");
    if (tp.size > 1) {
      a.ce_max = arena.allocate(Shape{B * T}, st, "ce_max");
      a.ce_sums = arena.allocate(Shape{2, B * T}, st, "ce_sums");
    }
  }
  return a;
}

std::size_t stage_activation_bytes(engine::DeviceType device, const GptConfig& config, const StageRange& range,
                                   const ActivationShape& shape, int slots, TensorParallel tp, Recompute recompute,
                                   int weight_stash_sets, int weight_input_sets) {
  engine::Arena plan = engine::Arena::planning(device);
  allocate_stage_activations(plan, config, range, shape, slots, tp, recompute, weight_stash_sets, weight_input_sets);
  return plan.used();
}

}  // namespace model
