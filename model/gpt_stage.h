// GptStage: the part of a GPT that one pipeline stage runs: blocks
// [first_layer, last_layer), plus the embedding on the first stage and the
// final LayerNorm, tied LM head and loss on the last. One process without
// pipeline parallelism runs a single stage holding everything.
//
// Activations are kept per micro-batch "slot" so a pipeline schedule can have
// several micro-batches in flight (1F1B holds at most pp - stage of them).
// The recomputation mode (model/recompute.h) decides how much of each block's
// activations a slot keeps:
//   none       every block's BlockActivations, per slot;
//   selective  the same without att_saved: one att_saved for the whole stage,
//              written by every forward and refilled by each block's
//              recompute() before its backward;
//   full       no BlockActivations per slot: the residual stream (the input
//              of every block, which the slot keeps anyway) is enough, and one
//              BlockActivations set for the whole stage is written by forward
//              and by each block's recompute() before its backward.
//
// The last stage runs the head's backward inside forward (the fused classifier
// of llm.c): it turns logits into their gradient in place and keeps only the
// (B,T,C) gradient of the final residual per slot, never probabilities or
// per-slot logits.
//
// Under tensor parallelism the embedding and the tied LM head are split by
// vocabulary (Megatron-LM): each rank looks up the tokens it holds and the
// partial embeddings are all-reduced; each rank scores its vocabulary slice
// and the cross-entropy is assembled from three small all-reduces (row max,
// then sum of exponentials and target logit) without gathering logits.
//
// Parameters are reached unit by unit through a ParamAccess
// (model/param_access.h): each block's weights are acquired for its forward,
// its recompute + backward, and released after; the next unit in the pass's
// order is prefetched first. Under ZeRO-3 that is the gather/release cycle
// of section 5.3 of the ZeRO paper; otherwise these calls cost nothing. The
// tied token embedding's gradient is held from the head's backward (inside
// the last forward) until the embedding's backward when one stage has both,
// so under ZeRO-2/3 each micro-batch reduces it once (once per step under
// AFAB, whose forwards all come before the backwards). On the last stage the
// head's units are released, and so reduced, during forward.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "model/gpt_config.h"
#include "model/param_store.h"
#include "model/param_access.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "model/transformer_block.h"
#include "parallel/communicator.h"

namespace model {

// Bytes of one block's FP8 weight copies on `device` (GptStage::set_fp8_weight_cache):
// its four weights as a tensor-parallel rank holds them.
std::size_t fp8_weight_copy_bytes_per_block(const GptConfig& config, TensorParallel tp, engine::DeviceType device);

class GptStage {
 public:
  // tp_comm: the tensor-parallel group, or nullptr without tensor parallelism.
  // weight_stash_sets > 0: the backward runs as two passes, backward_input
  // and backward_weight, with at most weight_stash_sets micro-batches
  // between the two and weight_input_sets between forward and weight pass
  // (a zero-bubble schedule's peak_awaiting_weight and peak_until_weight;
  // `slots` is then its peak_in_flight, forward to input pass).
  GptStage(const GptConfig& config, const ParamStore& store, StageRange range, ActivationShape shape, int slots,
           TensorParallel tp = {}, parallel::Communicator* tp_comm = nullptr,
           Recompute recompute = Recompute::kNone, parallel::ZeroUnits* zero = nullptr, int weight_stash_sets = 0,
           int weight_input_sets = 0);

  // Called during backward after each block's parameter gradients are final
  // for this micro-batch (with the block's global layer index), and with -1
  // after the embedding's. The trainer starts data-parallel reductions here.
  void set_backward_hook(std::function<void(std::int64_t layer)> hook) { backward_hook_ = std::move(hook); }

  // How the blocks' linear layers multiply (TransformerBlock::set_matmul_format;
  // --precision fp8). The embedding and the LM head stay native, as
  // torchtitan's float8 converter leaves out its `output` layer and Megatron's
  // FP8 recipes keep embedding and output layer in bf16 (issue 35 asks the same).
  void set_matmul_format(engine::ops::MatmulFormat format) {
    matmul_format_ = format;
    for (TransformerBlock& block : blocks_) block.set_matmul_format(format);
  }
  // In FP8, keep each block weight's FP8 form from one use to the next
  // (engine::ops::Fp8WeightCache; default on): made on first use after each
  // weights_changed(), in a buffer allocated by allocate() on a real arena
  // (the memory plan counts it under weights). Off: cast at every use (the
  // tests compare the two). Set both this and the format before allocate().
  void set_fp8_weight_cache(bool keep) { keeps_fp8_weights_ = keep; }
  // Per-tensor or block scaling of the FP8 operands (engine::ops::Fp8Scaling).
  void set_fp8_scaling(engine::ops::Fp8Scaling scaling) {
    for (TransformerBlock& block : blocks_) block.set_fp8_scaling(scaling);
  }
  std::size_t fp8_weight_copy_bytes() const { return fp8_weight_buffer_.bytes(); }
  // The weights changed (an optimizer step): every cached FP8 weight is stale.
  void weights_changed() {
    for (auto& layer : fp8_weights_)
      for (engine::ops::Fp8WeightCache& cache : layer) cache.invalidate();
  }

  // Allocates every activation from `arena`; call it on a planning arena to
  // size a real one, then on the real one (engine/buffer.h).
  void allocate(engine::Arena& arena);

  // Forward of one micro-batch into `slot`.
  //  tokens (B,T) i32 host: read by the first stage.
  //  targets (B,T) i32 host: read by the last stage; nullptr = no loss (sampling).
  //  grad_scale: d(objective)/d(loss of each token); 0 = evaluation (no gradient).
  //  weight_inputs: with a split backward, the weight-input set that keeps
  //  this micro-batch's matmul inputs until its weight pass (-1: set 0, for
  //  forwards without a backward between steps; ignored otherwise).
  // Other stages take their input from input(slot).
  void forward(int slot, const std::int32_t* tokens, const std::int32_t* targets, double grad_scale,
               int weight_inputs = -1);
  // Backward of the micro-batch in `slot`; other stages than the last read the
  // output's gradient from output_grad(slot). Parameter gradients accumulate.
  void backward(int slot);
  // The same backward as two passes (zero-bubble pipelines, Qi et al. 2024):
  // backward_input computes every input gradient (what the previous stage
  // waits for) and the norms' parameter gradients, keeping what the matmuls'
  // weight gradients need in stash set `stash`; backward_weight computes
  // those later, in the blocks' backward order, then the embedding's. A
  // block's gradients are final, and the backward hook is called, after
  // its weight pass. Each micro-batch's weight pass runs after its input pass and
  // the weight passes run in the order of the input passes (the stash set of
  // micro-batch i is i % weight_stash_sets, its weight-input set i %
  // weight_input_sets, the one its forward was given). The input pass
  // writes no parameter gradient (the norms' wait in the stash too), so
  // under ZeRO-2/3 only the weight pass takes a block's gradient unit: one
  // reduction per unit and micro-batch, as with the fused backward. After
  // the input pass the slot is free for another forward.
  void backward_input(int slot, int stash, int weight_inputs);
  void backward_weight(int stash, int weight_inputs);
  int weight_stash_sets() const { return static_cast<int>(weight_stash_.size()); }
  int weight_input_sets() const { return weight_input_sets_; }

  // Under sequence parallelism, sums the layer norms' partial gradients over
  // the tensor-parallel group; call once per step after the last backward.
  // (With staged gradients, ZeRO-2/3, each unit's are summed before it is
  // released and this does nothing.)
  void reduce_sequence_parallel_grads();

  // Sum of the per-token losses of the last forward in `slot` (last stage):
  // of every sequence, or of the first `sequences` (the rest padding).
  double loss_sum(int slot) const { return loss_sum(slot, shape_.batch); }
  double loss_sum(int slot, std::int64_t sequences) const;

  // Pipeline boundaries, (B,T,C) each, or this rank's (B*T/tp, C) tokens
  // under sequence parallelism.
  engine::Tensor input(int slot) const { return residuals_[slot].front(); }   // received by non-first stages
  engine::Tensor output(int slot) const { return residuals_[slot].back(); }   // sent by non-last stages
  engine::Tensor output_grad(int slot) const { return output_grads_[slot]; }  // received by non-last stages
  engine::Tensor input_grad() const { return dresidual_; }  // sent by non-first stages; valid until next backward

  // Logits (B*T, Vp/tp) of the last forward (last stage; overwritten by their
  // gradient when that forward had a gradient).
  engine::Tensor logits() const { return logits_; }

  const StageRange& range() const { return range_; }
  const ActivationShape& shape() const { return shape_; }
  int slots() const { return static_cast<int>(residuals_.size()); }
  Recompute recompute() const { return recompute_; }

 private:
  // The activations block i works in for the micro-batch in `slot`: the
  // slot's own, the shared set, or a mix of the two (see the class comment).
  // weight_inputs: the micro-batch's weight-input set (split backward).
  BlockActivations block_activations(int slot, std::size_t i, int weight_inputs) const;
  void head_forward(int slot, double grad_scale, bool with_loss);
  // The final norm (LayerNorm or RMSNorm) of `in` into `out`, statistics in lnf_mean_/lnf_rstd_.
  void norm_forward(const engine::Tensor& out, const engine::Tensor& in, const UnitView& lnf) const;
  // The norm parameters whose gradients are partial sums under sequence parallelism.
  std::vector<std::string> block_norm_names(std::int64_t layer) const;
  std::vector<std::string> head_norm_names() const;
  // The embedding's forward into res0 (first stage).
  void embedding_forward(int slot, const engine::Tensor& res0);
  // The embedding's backward from the gradient of its output, and the release
  // of the tied head's gradient held since this micro-batch's head (first stage).
  void embedding_backward(const engine::Tensor& tokens, const engine::Tensor& d_embedding_out);
  // Block i's backward: recompute, then the whole backward, or with `defer`
  // the input pass alone.
  void block_backward(int slot, std::size_t i, int weight_inputs, const WeightGradStash* defer);
  // After block i's parameter gradients of a micro-batch are in g: the
  // sequence-parallel sums (ZeRO-2/3), the release, the hook.
  void grads_done(std::size_t i, const UnitView& g);
  WeightGradStash stash_of(int stash, int weight_inputs, std::size_t i) const;
  // Whether the weight passes' inputs live in weight_inputs_ (split backward without full recomputation).
  bool separate_weight_inputs() const { return !weight_inputs_.empty(); }
  // Sums the sequence-parallel partial gradients of these layer-norm
  // parameters over the tensor-parallel group.
  void sum_layernorm_grads(const UnitView& grads, const std::vector<std::string>& names) const;
  void cross_entropy(int slot, double grad_scale);
  void tp_all_reduce(const engine::Tensor& t, parallel::ReduceOp op = parallel::ReduceOp::kSum) const;
  std::int64_t vocab_start() const { return config_.padded_vocab() / tp_.size * tp_.rank; }

  const GptConfig& config_;
  const ParamStore& store_;
  ParamAccess params_;
  int wte_unit_ = -1, wpe_unit_ = -1, lnf_unit_ = -1;  // -1 where this stage has no such unit
  int head_unit_ = -1;  // the LM head's weight: wte_unit_ when tied, else "lm_head"
  std::vector<int> block_units_;                      // [block]
  StageRange range_;
  ActivationShape shape_;
  TensorParallel tp_;
  parallel::Communicator* tp_comm_;
  Recompute recompute_;
  // The FP8 weight caches (set_fp8_weight_cache), on a real arena's device.
  void allocate_fp8_weight_caches(engine::DeviceType device);

  std::vector<TransformerBlock> blocks_;
  engine::ops::MatmulFormat matmul_format_ = engine::ops::MatmulFormat::kNative;
  bool keeps_fp8_weights_ = true;
  // Per block: the FP8 forms of qkv, attn.proj, mlp.fc and mlp.proj (TransformerBlock::Linear order).
  std::vector<std::array<engine::ops::Fp8WeightCache, 4>> fp8_weights_;
  engine::Buffer fp8_weight_buffer_;
  std::function<void(std::int64_t)> backward_hook_;

  // Per slot
  std::vector<std::vector<engine::Tensor>> residuals_;  // [slot][0..n_blocks] (B,T,C)
  std::vector<std::vector<BlockActivations>> acts_;    // [slot][block]; empty under full recomputation
  std::vector<engine::Tensor> tokens_, targets_;        // (B,T) i32 on the device
  std::vector<engine::Tensor> losses_;                  // (B*T)
  std::vector<engine::Tensor> head_dres_;               // (B,T,C) gradient of the last residual (last stage)
  std::vector<engine::Tensor> output_grads_;            // (B,T,C) (non-last stages)
  // Per weight-gradient stash set (split backward only)
  std::vector<std::vector<WeightGradStash>> weight_stash_;  // [set][block]
  std::vector<engine::Tensor> embedding_grad_stash_;        // [set] (first stage)
  std::vector<engine::Tensor> embedding_token_stash_;       // [set] (first stage)
  int weight_input_sets_ = 0;
  std::vector<std::vector<BlockActivations>> weight_inputs_;  // [weight-input set][block]
  // Shared by all slots
  BlockScratch scratch_;
  BlockActivations shared_acts_;  // full: every tensor; selective: att_saved only; none: nothing
  engine::Tensor dresidual_;                         // (B,T,C)
  engine::Tensor lnf_, lnf_mean_, lnf_rstd_, d_lnf_;  // head temporaries
  engine::Tensor logits_;                            // (B*T, Vp/tp)
  engine::Tensor ce_max_, ce_sums_;                  // (B*T), (2, B*T): vocabulary-parallel loss statistics
};

}  // namespace model
