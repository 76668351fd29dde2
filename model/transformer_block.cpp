#include "model/transformer_block.h"

#include "engine/ops.h"
#include "model/gpt_params.h"

namespace model {

using engine::Shape;
using engine::Tensor;
namespace ops = engine::ops;

namespace {
BlockParams block_views(const ParamStore& store, std::int64_t layer, bool grads) {
  auto v = [&](const char* suffix) {
    const std::string name = block_param_name(layer, suffix);
    return grads ? store.grad(name) : store.weight(name);
  };
  return BlockParams{v("ln_1.weight"),      v("ln_1.bias"),      v("attn.qkv.weight"), v("attn.qkv.bias"),
                     v("attn.proj.weight"), v("attn.proj.bias"), v("ln_2.weight"),     v("ln_2.bias"),
                     v("mlp.fc.weight"),    v("mlp.fc.bias"),    v("mlp.proj.weight"), v("mlp.proj.bias")};
}
}  // namespace

BlockParams block_weights(const ParamStore& store, std::int64_t layer) { return block_views(store, layer, false); }
BlockParams block_grads(const ParamStore& store, std::int64_t layer) { return block_views(store, layer, true); }

Tensor allocate_attention_saved(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                TensorParallel tp) {
  return arena.allocate(ops::attention_saved_shape(arena.device(), s.batch, config.n_head / tp.size, s.seq),
                        ops::attention_saved_dtype(arena.device(), s.dtype), "att_saved");
}

BlockActivations allocate_block_activations(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                            TensorParallel tp, bool with_attention_saved) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, N = B * T, Cl = C / tp.size;
  const engine::DType dt = s.dtype, st = s.stat_dtype();
  BlockActivations a;
  a.ln1 = arena.allocate(Shape{B, T, C}, dt, "ln1");
  a.ln1_mean = arena.allocate(Shape{N}, st, "ln1_mean");
  a.ln1_rstd = arena.allocate(Shape{N}, st, "ln1_rstd");
  a.qkv = arena.allocate(Shape{B, T, 3 * Cl}, dt, "qkv");
  a.atty = arena.allocate(Shape{B, T, Cl}, dt, "atty");
  if (with_attention_saved) a.att_saved = allocate_attention_saved(arena, config, s, tp);
  a.residual2 = arena.allocate(Shape{B, T, C}, dt, "residual2");
  a.ln2 = arena.allocate(Shape{B, T, C}, dt, "ln2");
  a.ln2_mean = arena.allocate(Shape{N}, st, "ln2_mean");
  a.ln2_rstd = arena.allocate(Shape{N}, st, "ln2_rstd");
  a.fc_pre = arena.allocate(Shape{B, T, 4 * Cl}, dt, "fc_pre");
  a.fc_gelu = arena.allocate(Shape{B, T, 4 * Cl}, dt, "fc_gelu");
  return a;
}

BlockScratch allocate_block_scratch(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                    TensorParallel tp) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, Cl = C / tp.size;
  BlockScratch b;
  b.branch = arena.allocate(Shape{B, T, C}, s.dtype, "branch");
  b.d_c = arena.allocate(Shape{B, T, C}, s.dtype, "d_c");
  b.d_atty = arena.allocate(Shape{B, T, Cl}, s.dtype, "d_atty");
  b.d_qkv = arena.allocate(Shape{B, T, 3 * Cl}, s.dtype, "d_qkv");
  b.d_fc = arena.allocate(Shape{B, T, 4 * Cl}, s.dtype, "d_fc");
  return b;
}

void TransformerBlock::tp_all_reduce(const Tensor& t) const {
  if (tp_comm_ != nullptr && tp_.size > 1) tp_comm_->all_reduce(t);
}

void TransformerBlock::forward_saved(const Tensor& x, const BlockActivations& a, const BlockScratch& scratch) const {
  const int n_head = static_cast<int>(config_.n_head / tp_.size);
  const bool adds_bias = tp_.rank == 0;  // row-parallel biases enter the all-reduced sum once
  // Attention half: r = x + proj(attention(qkv(ln_1(x))))
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w_.ln1_w, w_.ln1_b);  // (B,T,C)
  ops::matmul_forward(a.qkv, a.ln1, w_.qkv_w, w_.qkv_b);                            // (B,T,3C/tp)
  ops::attention_forward(a.atty, a.att_saved, a.qkv, n_head);                       // (B,T,C/tp)
  ops::matmul_forward(scratch.branch, a.atty, w_.proj_w, adds_bias ? w_.proj_b : Tensor{});  // (B,T,C)
  tp_all_reduce(scratch.branch);                                                     // g
  ops::add(a.residual2, x, scratch.branch);                                          // (B,T,C)
  // MLP half up to its output projection: gelu(mlp.fc(ln_2(r)))
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w_.ln2_w, w_.ln2_b);
  ops::matmul_forward(a.fc_gelu, a.ln2, w_.fc_w, w_.fc_b, a.fc_pre);                // (B,T,4C/tp), GELU fused
}

void TransformerBlock::forward(const Tensor& y, const Tensor& x, BlockActivations& a,
                               const BlockScratch& scratch) const {
  forward_saved(x, a, scratch);
  // y = r + mlp.proj(gelu(...))
  const bool adds_bias = tp_.rank == 0;
  ops::matmul_forward(scratch.branch, a.fc_gelu, w_.fcproj_w, adds_bias ? w_.fcproj_b : Tensor{});  // (B,T,C)
  tp_all_reduce(scratch.branch);                                                     // g
  ops::add(y, a.residual2, scratch.branch);
}

void TransformerBlock::recompute(const Tensor& x, const BlockActivations& a, const BlockScratch& scratch,
                                 Recompute mode) const {
  switch (mode) {
    case Recompute::kNone:
      return;
    case Recompute::kSelective:
      // Korthikanti et al. 2023, section 5: only the attention core (QK^T,
      // softmax, softmax-weighted V) is rerun; its input qkv was kept. The op
      // always writes its output too, so it goes back into the kept atty:
      // the same op on the same qkv reproduces the very values forward wrote
      // there, so this costs no scratch, and attention_backward reads an
      // output and saved state from one call (CUDA's FlashAttention backward
      // uses both). Keeping atty at all, rather than taking this recomputed
      // copy for the projection's backward too, follows the paper's
      // accounting, which keeps the attention output (the projection's input)
      // as a stored activation.
      // On the CPU att_saved is the (B,H,T,T) probabilities; on CUDA it is
      // only FlashAttention's (B,H,T) log-sum-exp, so there this buys little
      // memory for an extra attention forward (model/recompute.h).
      ops::attention_forward(a.atty, a.att_saved, a.qkv, static_cast<int>(config_.n_head / tp_.size));
      return;
    case Recompute::kFull:
      // Full recomputation (section 5's baseline, which stores only each
      // layer's input): rerun the forward from the kept input x. It stops
      // before the MLP's output projection: backward reads nothing that
      // projection makes, so its matmul and its all-reduce are skipped here
      // (on every tensor-parallel rank alike). The attention projection's
      // all-reduce runs again, since residual2 depends on it.
      forward_saved(x, a, scratch);
      return;
  }
}

void TransformerBlock::backward(const Tensor& dres, const Tensor& x, const BlockActivations& a,
                                const BlockScratch& s) const {
  const int n_head = static_cast<int>(config_.n_head / tp_.size);
  // MLP half. dres = dy = d(mlp branch output) = dr (so far); it is the same on
  // every tensor-parallel rank, so each computes the replicated bias gradient.
  // d fc_pre = (dy @ W_fcproj) * gelu'(fc_pre): the GELU backward is fused into the dgrad.
  ops::matmul_backward(s.d_fc, g_.fcproj_w, g_.fcproj_b, dres, a.fc_gelu, w_.fcproj_w, a.fc_pre);
  ops::matmul_backward(s.d_c, g_.fc_w, g_.fc_b, s.d_fc, a.ln2, w_.fc_w);            // d ln2 (B,T,C), partial
  tp_all_reduce(s.d_c);                                                              // f
  ops::layernorm_backward(dres, g_.ln2_w, g_.ln2_b, s.d_c, a.residual2, w_.ln2_w, a.ln2_mean, a.ln2_rstd);
  // dres is now dr. Attention half.
  ops::matmul_backward(s.d_atty, g_.proj_w, g_.proj_b, dres, a.atty, w_.proj_w);    // d atty (B,T,C/tp)
  ops::attention_backward(s.d_qkv, s.d_atty, a.qkv, a.atty, a.att_saved, n_head);   // (B,T,3C/tp)
  ops::matmul_backward(s.d_c, g_.qkv_w, g_.qkv_b, s.d_qkv, a.ln1, w_.qkv_w);        // d ln1, partial
  tp_all_reduce(s.d_c);                                                              // f
  ops::layernorm_backward(dres, g_.ln1_w, g_.ln1_b, s.d_c, x, w_.ln1_w, a.ln1_mean, a.ln1_rstd);
  // dres is now dx.
}

}  // namespace model
