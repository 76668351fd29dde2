// One GPT-2 transformer block, pre-LayerNorm (Radford et al. 2019, section 2.3):
//
//   r = x + proj(attention(qkv(ln_1(x))))
//   y = r + mlp.proj(gelu(mlp.fc(ln_2(r))))
//
// or a Llama-family block (Touvron et al. 2023; model/gpt_config.h), the same
// dataflow with RMSNorm for both norms, rotary embeddings applied to q and k
// between the qkv matmul and attention, grouped-query attention, and SwiGLU
// in place of GELU (mlp.fc makes [gate | up], 2F wide):
//
//   r = x + proj(attention(rope(qkv(rmsnorm_1(x)))))
//   y = r + mlp.proj(silu(gate) * up),  [gate | up] = mlp.fc(rmsnorm_2(r))
//
// forward() saves what backward() needs in a BlockActivations slot (one per
// micro-batch in flight); backward() turns the gradient of y into the gradient
// of x in place, accumulating parameter gradients. Under activation
// recomputation (model/recompute.h) some of those activations are not kept
// from forward to backward: recompute() rebuilds them from the block's input
// just before backward().
//
// Under tensor parallelism (Shoeybi et al. 2019, section 3) the block holds
// H/tp heads and 4C/tp MLP columns. Megatron's conjugate operators f and g
// are the four all-reduces over the tensor-parallel group: g after each
// row-parallel projection in forward (the bias is added on tp rank 0 only, so
// the sum holds it once), f before each layer norm's backward (the
// column-parallel layer's input gradient is a partial sum).
#pragma once

#include <array>
#include <cstdint>

#include "engine/buffer.h"
#include "engine/ops.h"
#include "model/gpt_config.h"
#include "model/param_access.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "parallel/communicator.h"

namespace model {

// Views of one block's parameters (or of their gradients). A Llama block's
// biases and norm biases are empty (Qwen2 has qkv_b).
struct BlockParams {
  engine::Tensor ln1_w, ln1_b;    // (C)
  engine::Tensor qkv_w, qkv_b;    // (3C, C), (3C)
  engine::Tensor proj_w, proj_b;  // (C, C), (C)
  engine::Tensor ln2_w, ln2_b;    // (C)
  engine::Tensor fc_w, fc_b;      // (4C, C), (4C)
  engine::Tensor fcproj_w, fcproj_b;  // (C, 4C), (C)
};
// The views of block `layer`'s entries in its unit (weights or gradients).
BlockParams block_params(const UnitView& unit, std::int64_t layer);

// Saved activations of one block for one micro-batch.
struct BlockActivations {
  engine::Tensor ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B*T), (B*T); no mean for RMSNorm
  engine::Tensor qkv;                      // (B,T,(H+2KV)D/tp), q and k rotated (llama)
  engine::Tensor atty;                     // (B,T,C/tp) attention output before projection
  engine::Tensor att_saved;                // backend-defined (ops::attention_saved_shape)
  engine::Tensor residual2;                // (B,T,C) r = x + attention branch
  engine::Tensor ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B*T), (B*T)
  engine::Tensor fc_pre;                   // (B,T,4C/tp) before GELU; llama: (B,T,2F/tp) [gate | up]
  engine::Tensor fc_gelu;                  // (B,T,4C/tp) after GELU; llama: (B,T,F/tp) silu(gate) * up
  // (4) f32, under --precision fp8 (ActivationShape::fp8_amax): the amax each linear layer's
  // input (ln1, atty, ln2, fc_gelu) was scaled by in forward, so that the
  // weight gradient's cast of that input need not read it again
  // (engine::ops::Fp8Options::inp_amax). Kept with the four inputs.
  engine::Tensor fp8_amax;
};

// Buffers shared by all blocks of a stage and reused by every micro-batch:
// branch outputs in forward, gradient temporaries in backward.
struct BlockScratch {
  engine::Tensor branch;  // (B,T,C)  attention / MLP branch output before the residual add
  // Sequence parallel only: this rank's tokens (n = B*T/tp rows).
  engine::Tensor ln_chunk;      // (n,C)  a layer norm's output before the all-gather
  engine::Tensor branch_chunk;  // (n,C)  a branch output after the reduce-scatter
  engine::Tensor d_full;        // (B,T,C) the gathered gradient of a block half's output
  engine::Tensor d_chunk;       // (n,C)  a layer norm output's gradient after the reduce-scatter
  engine::Tensor d_c;     // (B,T,C)     gradient of a layer norm's output
  engine::Tensor d_atty;  // (B,T,C/tp)  gradient of the attention output
  engine::Tensor d_qkv;   // (B,T,(H+2KV)D/tp)
  engine::Tensor d_fc;    // (B,T,4C/tp); llama: (B,T,2F/tp)
  engine::Tensor d_act;   // llama: (B,T,F/tp) gradient of silu(gate) * up
  engine::Tensor d_fc_amax;  // (1) f32, FP8 only: max |d_fc|, from the GELU backward to mlp.fc's backward
  // llama: RoPE's frequencies (D/2) f32, filled by fill_rope_frequencies
  // (model/rope.h) once the arena is real; shared by every block.
  engine::Tensor rope_inv_freq;
};

// What the weight-gradient pass of a block reads, kept from its input-gradient
// pass when a zero-bubble pipeline runs the two apart (Qi et al. 2024,
// section 2: the backward of a linear layer y = x W^T is an input gradient
// dx = dy W, on the pipeline's critical path, and a weight gradient
// dW = dy^T x, which can wait). Each of the block's four matmuls needs its
// input and its output's gradient:
//   qkv      ln1 (B,T,C)         d_qkv (B,T,(H+2KV)D/tp)
//   proj     atty (B,T,C/tp)     d_proj_out (B,T,C)
//   mlp.fc   ln2 (B,T,C)         d_fc (B,T,4C/tp); llama (B,T,2F/tp)
//   mlp.proj fc_gelu (B,T,4C/tp) d_fcproj_out (B,T,C)
// The gradients are the stash's own buffers, one set per micro-batch
// awaiting its weight pass. The inputs are views of the micro-batch's
// BlockActivations where those survive until the weight pass (no or
// selective recomputation), and the stash's own copies under full
// recomputation, whose activations are shared by every micro-batch.
// The norms' parameter gradients come out of the same op as their input
// gradients, so the input pass computes them, into the stash's norms buffer
// (this micro-batch's alone), and the weight pass adds them to the
// parameters' gradients: the input pass writes no parameter gradient at all,
// so under ZeRO-2/3 a block's gradient unit is taken only by the weight pass
// and reduced once per micro-batch, as with the fused backward.
struct WeightGradStash {
  engine::Tensor ln1, d_qkv;
  engine::Tensor atty, d_proj_out;
  engine::Tensor ln2, d_fc;
  engine::Tensor fc_gelu, d_fcproj_out;
  engine::Tensor fp8_amax;  // the four inputs' amaxes (BlockActivations::fp8_amax)
  engine::Tensor norms;  // (4C) gains and biases of ln_1 and ln_2, (2C) RMSNorm gains; the gradients' dtype
  engine::Tensor d_ln1_w, d_ln1_b, d_ln2_w, d_ln2_b;  // views of norms (no biases for RMSNorm)
};

// What an activation buffer is allocated for: B sequences of T positions, in
// the activation dtype of the model's precision.
struct ActivationShape {
  std::int64_t batch;  // B, sequences per micro-batch
  std::int64_t seq;    // T
  engine::DType dtype;
  // --precision fp8: the blocks keep their FP8 matmuls' amax slots
  // (BlockActivations::fp8_amax, BlockScratch::d_fc_amax).
  bool fp8_amax = false;
  // Statistics (norm mean/rstd, losses) are f32, or f64 on the fp64 path.
  engine::DType stat_dtype() const {
    return dtype == engine::DType::kF64 ? engine::DType::kF64 : engine::DType::kF32;
  }
};

// with_attention_saved = false leaves att_saved empty: selective
// recomputation keeps one shared att_saved per stage instead of one per block
// and micro-batch (allocate_attention_saved). keeps_weight_inputs = false
// leaves the four matmul inputs a weight pass reads (ln1, atty, ln2,
// fc_gelu, with their fp8_amax) empty: a split backward keeps them in sets of their own, alive
// until the weight pass, while the rest is free after the input pass
// (allocate_weight_inputs).
BlockActivations allocate_block_activations(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                            TensorParallel tp, bool with_attention_saved = true,
                                            bool keeps_weight_inputs = true);
// Only ln1, atty, ln2, fc_gelu and fp8_amax.
BlockActivations allocate_weight_inputs(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                        TensorParallel tp);

engine::Tensor allocate_attention_saved(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                        TensorParallel tp);
// A stash's gradient buffers, and with owns_inputs its input buffers too
// (full recomputation); without, the inputs are left empty for the caller to
// point at the micro-batch's kept inputs (with_weight_inputs).
WeightGradStash allocate_weight_grad_stash(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                           TensorParallel tp, bool owns_inputs);
// `to` (a BlockActivations or a WeightGradStash) with the four matmul
// inputs a weight pass reads taken from `inputs` (views, nothing copied).
template <class Kept>
Kept with_weight_inputs(Kept to, const BlockActivations& inputs) {
  to.ln1 = inputs.ln1;
  to.atty = inputs.atty;
  to.ln2 = inputs.ln2;
  to.fc_gelu = inputs.fc_gelu;
  to.fp8_amax = inputs.fp8_amax;
  return to;
}
BlockScratch allocate_block_scratch(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                    TensorParallel tp);

// The block holds no parameters: each call gets the views of the weights
// (w) and gradient buffers (g) it works with, wherever they live
// (model/param_access.h; gathered for the call under ZeRO-3).
class TransformerBlock {
 public:
  // tp_comm: the tensor-parallel group, or nullptr without tensor parallelism.
  TransformerBlock(const GptConfig& config, TensorParallel tp, parallel::Communicator* tp_comm)
      : config_(config), tp_(tp), tp_comm_(tp_comm) {}

  // How the block's four linear layers (qkv, attention projection, MLP fc
  // and projection) multiply: natively, or with FP8 E4M3 operands
  // (--precision fp8, issue 35). Norms, attention and RoPE are unaffected.
  // Under tensor parallelism the FP8 operands a rank holds a shard of have
  // their amax max-reduced over the group (engine::ops::Fp8Options), so the
  // ranks quantise exactly as one process does.
  void set_matmul_format(engine::ops::MatmulFormat format);
  engine::ops::MatmulFormat matmul_format() const { return matmul_format_; }
  // Where the four weights' FP8 forms are kept (qkv, attn.proj, mlp.fc,
  // mlp.proj; owned by model::GptStage), or null entries to cast at every use.
  void set_fp8_weight_caches(const std::array<engine::ops::Fp8WeightCache*, 4>& caches);
  // How the FP8 operands are scaled (per tensor, or in blocks: engine::ops::Fp8Scaling).
  void set_fp8_scaling(engine::ops::Fp8Scaling scaling);

  // x (B,T,C) -> y (B,T,C); y must not alias x.
  void forward(const BlockParams& w, const engine::Tensor& y, const engine::Tensor& x, BlockActivations& act,
               const BlockScratch& scratch) const;
  // Rebuilds in `act` what `mode` did not keep since forward, from x (the
  // block's input that forward saw) and what was kept; a no-op for kNone.
  //  kSelective: reruns the attention core from act.qkv into act.att_saved
  //              (and act.atty, rewritten with the values it already holds).
  //  kFull:      reruns the forward up to the last activation backward reads,
  //              including the attention projection's all-reduce (every
  //              tensor-parallel rank makes the same calls, so the collectives
  //              stay matched). Uses scratch.branch.
  void recompute(const BlockParams& w, const engine::Tensor& x, const BlockActivations& act,
                 const BlockScratch& scratch, Recompute mode) const;
  // dresidual (B,T,C): gradient of y on entry, gradient of x on exit.
  // x is the block's input that forward saw. Parameter gradients accumulate into g.
  // With `defer`, this is the input-gradient pass only: g is not touched
  // (and may be empty); the four matmuls' weight and bias gradients are left
  // out and what they need is written to *defer (its inputs copied in when it
  // owns them), as are this micro-batch's norm gradients, for backward_weight.
  void backward(const BlockParams& w, const BlockParams& g, const engine::Tensor& dresidual, const engine::Tensor& x,
                const BlockActivations& act, const BlockScratch& scratch,
                const WeightGradStash* defer = nullptr) const;
  // The weight-gradient pass: the four matmuls' weight and bias gradients
  // from a stash that backward(..., defer) filled, and its norm gradients
  // added. Reads no weights and sends nothing (every tensor-parallel rank's
  // gradients are its own).
  void backward_weight(const BlockParams& g, const WeightGradStash& stash) const;

 private:
  // The block's four linear layers, in the order of set_fp8_weight_caches.
  enum Linear { kQkv, kProj, kFc, kFcProj };
  // Everything forward computes that backward reads: act from ln1 to fc_gelu.
  void forward_saved(const BlockParams& w, const engine::Tensor& x, const BlockActivations& act,
                     const BlockScratch& scratch) const;
  // Megatron's conjugate pair at the block's two tensor-parallel boundaries.
  // Without sequence parallelism: f = identity / all-reduce, g = all-reduce /
  // identity. With it: f = all-gather / reduce-scatter, g = reduce-scatter /
  // all-gather, over the flattened tokens.
  // Layer norm of this rank's tokens, made whole for the column-parallel
  // matmul. Returns whether `amax` (FP8 only) now holds max |out_full|: made
  // by the norm, unless the tokens are split (the norm would see only this
  // rank's; the matmul then computes it from the gathered tensor instead).
  bool layernorm_gathered(const engine::Tensor& out_full, const engine::Tensor& mean, const engine::Tensor& rstd,
                          const engine::Tensor& in, const engine::Tensor& w, const engine::Tensor& b,
                          const BlockScratch& s, const engine::Tensor& amax) const;
  // The row-parallel output's partial sums, reduced: all of them, or this rank's tokens.
  engine::Tensor reduce_branch(const BlockScratch& s) const;
  // out = residual + g(inp W^T + b): a block half's output projection and its
  // residual connection, in one GEMM when nothing needs reducing in between.
  void project_and_add(const engine::Tensor& out, const engine::Tensor& inp, const engine::Tensor& weight,
                       const engine::Tensor& bias, const engine::Tensor& residual, const BlockScratch& s,
                       const engine::ops::Fp8Options* fp8) const;
  // The gradient of a block half's output, whole (the matmul backward needs
  // every token); copied into `keep` when that is given (a deferred weight pass reads it).
  engine::Tensor gather_grad(const engine::Tensor& dres, const BlockScratch& s,
                             const engine::Tensor& keep = {}) const;
  // The gradient of a layer norm's output, from its partial sums (in s.d_c).
  engine::Tensor reduce_ln_grad(const BlockScratch& s) const;
  // LayerNorm (gpt2) or RMSNorm (llama; mean unused, bias empty); max |out| into out_amax if given.
  void norm_forward(const engine::Tensor& out, const engine::Tensor& mean, const engine::Tensor& rstd,
                    const engine::Tensor& in, const engine::Tensor& w, const engine::Tensor& b,
                    const engine::Tensor& out_amax = {}) const;
  void norm_backward(const engine::Tensor& dinp, const engine::Tensor& dw, const engine::Tensor& db,
                     const engine::Tensor& dout, const engine::Tensor& inp, const engine::Tensor& w,
                     const engine::Tensor& mean, const engine::Tensor& rstd) const;
  int local_heads() const { return static_cast<int>(config_.n_head / tp_.size); }
  int local_kv_heads() const { return static_cast<int>(config_.kv_heads() / tp_.size); }

  const GptConfig& config_;
  TensorParallel tp_;
  parallel::Communicator* tp_comm_;
  engine::ops::MatmulFormat matmul_format_ = engine::ops::MatmulFormat::kNative;
  // FP8, per linear layer: under tp > 1 the column-parallel layers (qkv,
  // mlp.fc) hold a shard of the weight and of the output gradient, the
  // row-parallel ones (attn.proj, mlp.proj) of the weight and of the input;
  // and each layer's weight cache, if kept.
  std::array<engine::ops::Fp8Options, 4> fp8_;
  const engine::ops::Fp8Options* fp8(Linear layer) const { return &fp8_[layer]; }
  bool uses_fp8() const { return matmul_format_ == engine::ops::MatmulFormat::kFp8E4M3; }
  // Per-tensor scaling reads the amax slots; block scaling finds each block's amax in its cast.
  bool uses_amax_slots() const { return uses_fp8() && fp8_[0].scaling == engine::ops::Fp8Scaling::kTensor; }
  // One call's options for `layer`: the layer's, with its input's amax slot
  // (k of `amaxes`, a BlockActivations' or stash's fp8_amax), ready or to be
  // filled (engine::ops::Fp8Options::inp_amax). The layer's own under native
  // matmuls, or when no slots were allocated (the ops then find every amax
  // themselves).
  engine::ops::Fp8Options fp8_call(Linear layer, const engine::Tensor& amaxes, bool inp_ready) const;
  // Whether the forward leaves mlp.proj's input amax in fp8_amax for the
  // backward: GELU's epilogue makes it inside the part of the forward that
  // full recomputation reruns (forward_saved); SwiGLU's output amax is found
  // by mlp.proj's forward, outside it, so it is not trusted later.
  bool keeps_fc_out_amax() const { return !config_.is_llama(); }
};

}  // namespace model
