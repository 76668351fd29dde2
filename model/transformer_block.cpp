#include "model/transformer_block.h"

#include <utility>

#include "engine/ops.h"
#include "model/gpt_params.h"

namespace model {

using engine::Shape;
using engine::Tensor;
namespace ops = engine::ops;

BlockParams block_params(const UnitView& unit, std::int64_t layer) {
  auto v = [&](const char* suffix) { return unit.optional(block_param_name(layer, suffix)); };
  return BlockParams{v("ln_1.weight"),      v("ln_1.bias"),      v("attn.qkv.weight"), v("attn.qkv.bias"),
                     v("attn.proj.weight"), v("attn.proj.bias"), v("ln_2.weight"),     v("ln_2.bias"),
                     v("mlp.fc.weight"),    v("mlp.fc.bias"),    v("mlp.proj.weight"), v("mlp.proj.bias")};
}

Tensor allocate_attention_saved(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                TensorParallel tp) {  // one row per query head
  return arena.allocate(ops::attention_saved_shape(arena.device(), s.batch, config.n_head / tp.size, s.seq),
                        ops::attention_saved_dtype(arena.device(), s.dtype), "att_saved");
}

BlockActivations allocate_weight_inputs(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                        TensorParallel tp) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, Cl = C / tp.size;
  BlockActivations a;
  a.ln1 = arena.allocate(Shape{B, T, C}, s.dtype, "ln1");
  a.atty = arena.allocate(Shape{B, T, Cl}, s.dtype, "atty");
  a.ln2 = arena.allocate(Shape{B, T, C}, s.dtype, "ln2");
  a.fc_gelu = arena.allocate(Shape{B, T, config.mlp_width() / tp.size}, s.dtype, "fc_gelu");
  if (s.fp8_amax) a.fp8_amax = arena.allocate(Shape{4}, engine::DType::kF32, "fp8_amax");
  return a;
}

BlockActivations allocate_block_activations(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                            TensorParallel tp, bool with_attention_saved, bool keeps_weight_inputs) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, N = tp.local_tokens(B * T), Cl = C / tp.size;
  const engine::DType dt = s.dtype, st = s.stat_dtype();
  BlockActivations a;
  // The layer norms' outputs are kept whole (they feed the weight gradients
  // of the column-parallel matmuls); their statistics and the residual only
  // for this rank's tokens under sequence parallelism. RMSNorm keeps no mean.
  const bool keeps_mean = !config.is_llama();
  if (keeps_weight_inputs) a.ln1 = arena.allocate(Shape{B, T, C}, dt, "ln1");
  if (keeps_mean) a.ln1_mean = arena.allocate(Shape{N}, st, "ln1_mean");
  a.ln1_rstd = arena.allocate(Shape{N}, st, "ln1_rstd");
  a.qkv = arena.allocate(Shape{B, T, config.qkv_width() / tp.size}, dt, "qkv");
  if (keeps_weight_inputs) a.atty = arena.allocate(Shape{B, T, Cl}, dt, "atty");
  if (with_attention_saved) a.att_saved = allocate_attention_saved(arena, config, s, tp);
  a.residual2 = arena.allocate(tp.splits_tokens() ? Shape{N, C} : Shape{B, T, C}, dt, "residual2");
  if (keeps_weight_inputs) a.ln2 = arena.allocate(Shape{B, T, C}, dt, "ln2");
  if (keeps_mean) a.ln2_mean = arena.allocate(Shape{N}, st, "ln2_mean");
  a.ln2_rstd = arena.allocate(Shape{N}, st, "ln2_rstd");
  a.fc_pre = arena.allocate(Shape{B, T, config.fc_width() / tp.size}, dt, "fc_pre");
  if (keeps_weight_inputs) a.fc_gelu = arena.allocate(Shape{B, T, config.mlp_width() / tp.size}, dt, "fc_gelu");
  if (keeps_weight_inputs && s.fp8_amax) a.fp8_amax = arena.allocate(Shape{4}, engine::DType::kF32, "fp8_amax");
  return a;
}

WeightGradStash allocate_weight_grad_stash(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                           TensorParallel tp, bool owns_inputs) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd;
  const engine::DType dt = s.dtype;
  WeightGradStash w;
  w.d_qkv = arena.allocate(Shape{B, T, config.qkv_width() / tp.size}, dt, "stash_d_qkv");
  w.d_proj_out = arena.allocate(Shape{B, T, C}, dt, "stash_d_proj_out");
  w.d_fc = arena.allocate(Shape{B, T, config.fc_width() / tp.size}, dt, "stash_d_fc");
  w.d_fcproj_out = arena.allocate(Shape{B, T, C}, dt, "stash_d_fcproj_out");
  // The norms' gradients have the parameters' gradient dtype, which is the
  // statistics' (f32, or f64 on the fp64 path).
  const bool biases = !config.is_llama();
  w.norms = arena.allocate(Shape{(biases ? 4 : 2) * C}, s.stat_dtype(), "stash_norms");
  const auto part = [&](std::int64_t k) { return w.norms.flat_slice(k * C, C); };
  w.d_ln1_w = part(0);
  w.d_ln2_w = part(1);
  if (biases) {
    w.d_ln1_b = part(2);
    w.d_ln2_b = part(3);
  }
  if (owns_inputs) w = with_weight_inputs(w, allocate_weight_inputs(arena, config, s, tp));
  return w;
}

BlockScratch allocate_block_scratch(engine::Arena& arena, const GptConfig& config, ActivationShape s,
                                    TensorParallel tp) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, Cl = C / tp.size;
  BlockScratch b;
  b.branch = arena.allocate(Shape{B, T, C}, s.dtype, "branch");
  if (tp.splits_tokens()) {
    const std::int64_t n = tp.local_tokens(B * T);
    b.ln_chunk = arena.allocate(Shape{n, C}, s.dtype, "ln_chunk");
    b.branch_chunk = arena.allocate(Shape{n, C}, s.dtype, "branch_chunk");
    b.d_full = arena.allocate(Shape{B, T, C}, s.dtype, "d_full");
    b.d_chunk = arena.allocate(Shape{n, C}, s.dtype, "d_chunk");
  }
  b.d_c = arena.allocate(Shape{B, T, C}, s.dtype, "d_c");
  b.d_atty = arena.allocate(Shape{B, T, Cl}, s.dtype, "d_atty");
  b.d_qkv = arena.allocate(Shape{B, T, config.qkv_width() / tp.size}, s.dtype, "d_qkv");
  b.d_fc = arena.allocate(Shape{B, T, config.fc_width() / tp.size}, s.dtype, "d_fc");
  if (s.fp8_amax) b.d_fc_amax = arena.allocate(Shape{1}, engine::DType::kF32, "d_fc_amax");
  if (config.is_llama()) {
    b.d_act = arena.allocate(Shape{B, T, config.mlp_width() / tp.size}, s.dtype, "d_act");
    b.rope_inv_freq = arena.allocate(Shape{config.head_size() / 2}, engine::DType::kF32, "rope_inv_freq");
  }
  return b;
}

void TransformerBlock::set_matmul_format(engine::ops::MatmulFormat format) {
  matmul_format_ = format;
  if (tp_.size == 1) return;
  parallel::Communicator* group = tp_comm_;
  const auto reduce_max = [group](const Tensor& amax) { group->all_reduce(amax, parallel::ReduceOp::kMax); };
  for (const Linear column : {kQkv, kFc}) {
    fp8_[column].reduce_max = reduce_max;
    fp8_[column].weight = fp8_[column].dout = true;
  }
  for (const Linear row : {kProj, kFcProj}) {
    fp8_[row].reduce_max = reduce_max;
    fp8_[row].inp = fp8_[row].weight = true;
  }
}

void TransformerBlock::set_fp8_weight_caches(const std::array<engine::ops::Fp8WeightCache*, 4>& caches) {
  for (int k = 0; k < 4; ++k) fp8_[k].weight_cache = caches[k];
}

void TransformerBlock::set_fp8_scaling(engine::ops::Fp8Scaling scaling) {
  for (engine::ops::Fp8Options& layer : fp8_) layer.scaling = scaling;
}

ops::Fp8Options TransformerBlock::fp8_call(Linear layer, const Tensor& amaxes, bool inp_ready) const {
  ops::Fp8Options call = fp8_[layer];
  if (!uses_amax_slots() || amaxes.empty()) return call;
  // The slots are indexed like Linear: ln1, atty, ln2, fc_gelu.
  call.inp_amax = amaxes.flat_slice(layer, 1);
  call.inp_amax_ready = inp_ready;
  return call;
}

void TransformerBlock::norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& in,
                                    const Tensor& w, const Tensor& b, const Tensor& out_amax) const {
  if (config_.is_llama()) ops::rmsnorm_forward(out, rstd, in, w, config_.norm_eps, out_amax);
  else ops::layernorm_forward(out, mean, rstd, in, w, b, config_.norm_eps, out_amax);
}

void TransformerBlock::norm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                     const Tensor& inp, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd) const {
  if (config_.is_llama()) ops::rmsnorm_backward(dinp, dw, dout, inp, w, rstd);
  else ops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd);
}

bool TransformerBlock::layernorm_gathered(const Tensor& out_full, const Tensor& mean, const Tensor& rstd,
                                          const Tensor& in, const Tensor& w, const Tensor& b,
                                          const BlockScratch& s, const Tensor& amax) const {
  if (!tp_.splits_tokens()) {
    const bool fused = uses_amax_slots() && !amax.empty();
    norm_forward(out_full, mean, rstd, in, w, b, fused ? amax : Tensor{});
    return fused;
  }
  // The chunk's amax would need a max all-reduce of its own; the matmul
  // finds the gathered tensor's without one.
  norm_forward(s.ln_chunk, mean, rstd, in, w, b);   // (n,C)
  tp_comm_->all_gather(s.ln_chunk, out_full.view(Shape{out_full.numel()}));  // f: (B,T,C)
  return false;
}

Tensor TransformerBlock::reduce_branch(const BlockScratch& s) const {
  if (tp_.size == 1) return s.branch;
  if (!tp_.splits_tokens()) {
    tp_comm_->all_reduce(s.branch);  // g
    return s.branch;
  }
  tp_comm_->reduce_scatter(s.branch.view(Shape{s.branch.numel()}), s.branch_chunk.view(Shape{s.branch_chunk.numel()}));
  return s.branch_chunk;  // g: this rank's tokens
}

void TransformerBlock::project_and_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                       const Tensor& residual, const BlockScratch& s,
                                       const ops::Fp8Options* fp8) const {
  if (tp_.size == 1) {
    // One GEMM writes residual + inp W^T + b: the branch is never stored.
    ops::matmul_forward_add(out, inp, weight, bias, residual, matmul_format_, fp8);  // (B,T,C)
    return;
  }
  // Row-parallel: each rank's partial product is summed across the group
  // (g) before the residual can be added.
  ops::matmul_forward(s.branch, inp, weight, bias, Tensor{}, matmul_format_, fp8);  // (B,T,C) partial
  ops::add(out, residual, reduce_branch(s));         // g; (B,T,C) or (n,C)
}

Tensor TransformerBlock::gather_grad(const Tensor& dres, const BlockScratch& s, const Tensor& keep) const {
  if (!tp_.splits_tokens()) {
    if (keep.empty()) return dres;
    ops::copy(keep, dres);  // dres is overwritten by the norm's backward
    return keep;
  }
  const Tensor whole = keep.empty() ? s.d_full : keep;
  tp_comm_->all_gather(dres.view(Shape{dres.numel()}), whole.view(Shape{whole.numel()}));  // g backward
  return whole;
}

Tensor TransformerBlock::reduce_ln_grad(const BlockScratch& s) const {
  if (tp_.size == 1) return s.d_c;
  if (!tp_.splits_tokens()) {
    tp_comm_->all_reduce(s.d_c);  // f backward
    return s.d_c;
  }
  tp_comm_->reduce_scatter(s.d_c.view(Shape{s.d_c.numel()}), s.d_chunk.view(Shape{s.d_chunk.numel()}));
  return s.d_chunk;
}

void TransformerBlock::forward_saved(const BlockParams& w, const Tensor& x, const BlockActivations& a,
                                     const BlockScratch& scratch) const {
  const bool adds_bias = tp_.rank == 0;  // row-parallel biases enter the all-reduced sum once
  // FP8: each matmul's input amax lands in a.fp8_amax, made by the norm or
  // GELU that wrote the input where it can be, else by the matmul itself.
  const Tensor& amax = a.fp8_amax;
  // Attention half: r = x + proj(attention(qkv(ln_1(x))))
  const auto slot = [&](Linear layer) { return amax.empty() ? Tensor{} : amax.flat_slice(layer, 1); };
  const bool ln1_amax = layernorm_gathered(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, scratch,
                                           slot(kQkv));  // (B,T,C)
  const ops::Fp8Options qkv = fp8_call(kQkv, amax, ln1_amax);
  ops::matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, Tensor{}, matmul_format_, &qkv);  // (B,T,(H+2KV)D/tp)
  if (config_.is_llama())  // q and k rotated in place; attention and its backward see the rotated ones
    ops::rope_forward(a.qkv, scratch.rope_inv_freq, local_heads(), local_kv_heads());
  ops::attention_forward(a.atty, a.att_saved, a.qkv, local_heads(), local_kv_heads());  // (B,T,C/tp)
  const ops::Fp8Options proj = fp8_call(kProj, amax, false);
  project_and_add(a.residual2, a.atty, w.proj_w, adds_bias ? w.proj_b : Tensor{}, x, scratch, &proj);  // (B,T,C) or (n,C)
  // MLP half up to its output projection: gelu(mlp.fc(ln_2(r))) or silu(gate) * up
  const bool ln2_amax = layernorm_gathered(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, scratch,
                                           slot(kFc));
  ops::Fp8Options fc = fp8_call(kFc, amax, ln2_amax);
  if (config_.is_llama()) {
    ops::matmul_forward(a.fc_pre, a.ln2, w.fc_w, Tensor{}, Tensor{}, matmul_format_, &fc);  // (B,T,2F/tp) [gate | up]
    ops::swiglu_forward(a.fc_gelu, a.fc_pre);               // (B,T,F/tp)
  } else {
    if (uses_amax_slots()) fc.out_amax = slot(kFcProj);  // mlp.proj's input, from the GELU epilogue
    ops::matmul_forward(a.fc_gelu, a.ln2, w.fc_w, w.fc_b, a.fc_pre, matmul_format_, &fc);  // (B,T,4C/tp), GELU fused
    // This rank's part of mlp.proj's input only: its amax is made whole here.
    if (!fc.out_amax.empty() && tp_.size > 1) tp_comm_->all_reduce(fc.out_amax, parallel::ReduceOp::kMax);
  }
}

void TransformerBlock::forward(const BlockParams& w, const Tensor& y, const Tensor& x, BlockActivations& a,
                               const BlockScratch& scratch) const {
  forward_saved(w, x, a, scratch);
  // y = r + mlp.proj(gelu(...))
  const bool adds_bias = tp_.rank == 0;
  const ops::Fp8Options fcproj = fp8_call(kFcProj, a.fp8_amax, keeps_fc_out_amax());
  project_and_add(y, a.fc_gelu, w.fcproj_w, adds_bias ? w.fcproj_b : Tensor{}, a.residual2, scratch, &fcproj);
}

void TransformerBlock::recompute(const BlockParams& w, const Tensor& x, const BlockActivations& a,
                                 const BlockScratch& scratch, Recompute mode) const {
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
      ops::attention_forward(a.atty, a.att_saved, a.qkv, local_heads(), local_kv_heads());
      return;
    case Recompute::kFull:
      // Full recomputation (section 5's baseline, which stores only each
      // layer's input): rerun the forward from the kept input x. It stops
      // before the MLP's output projection: backward reads nothing that
      // projection makes, so its matmul and its all-reduce are skipped here
      // (on every tensor-parallel rank alike). The attention projection's
      // all-reduce runs again, since residual2 depends on it.
      forward_saved(w, x, a, scratch);
      return;
  }
}

void TransformerBlock::backward(const BlockParams& w, const BlockParams& g, const Tensor& dres, const Tensor& x,
                                const BlockActivations& a, const BlockScratch& s, const WeightGradStash* defer) const {
  // Deferred: the matmuls get no weight or bias gradient to write (empty
  // tensors) and their output gradients go to the stash's own buffers.
  const auto now = [&](const Tensor& grad) { return defer ? Tensor{} : grad; };
  const Tensor d_fc = defer ? defer->d_fc : s.d_fc, d_qkv = defer ? defer->d_qkv : s.d_qkv;
  // The norms' gradients: into the parameters' (accumulating), or this micro-batch's alone into the stash.
  const Tensor d_ln1_w = defer ? defer->d_ln1_w : g.ln1_w, d_ln1_b = defer ? defer->d_ln1_b : g.ln1_b;
  const Tensor d_ln2_w = defer ? defer->d_ln2_w : g.ln2_w, d_ln2_b = defer ? defer->d_ln2_b : g.ln2_b;
  if (defer) ops::fill(defer->norms, 0.0);
  if (defer && !defer->ln1.empty() && defer->ln1.data() != a.ln1.data()) {
    // The stash owns its inputs (full recomputation): keep this micro-batch's
    // before the next recompute overwrites the shared activations.
    ops::copy(defer->ln1, a.ln1);
    ops::copy(defer->atty, a.atty);
    ops::copy(defer->ln2, a.ln2);
    ops::copy(defer->fc_gelu, a.fc_gelu);
    if (!a.fp8_amax.empty()) ops::copy(defer->fp8_amax, a.fp8_amax);
  }
  // FP8: every input's amax as forward scaled it (a.fp8_amax), but SwiGLU's
  // output's (keeps_fc_out_amax); mlp.fc's output gradient's from the GELU
  // backward that makes it.
  const ops::Fp8Options fcproj = fp8_call(kFcProj, a.fp8_amax, keeps_fc_out_amax());
  ops::Fp8Options fc = fp8_call(kFc, a.fp8_amax, true);
  const ops::Fp8Options proj = fp8_call(kProj, a.fp8_amax, true), qkv = fp8_call(kQkv, a.fp8_amax, true);
  // MLP half. dres = dy = d(mlp branch output) = dr (so far); it is the same on
  // every tensor-parallel rank, so each computes the replicated bias gradient.
  // Under sequence parallelism dres holds this rank's tokens and the layer
  // norms' weight gradients are partial sums over them (GptStage sums them
  // over the group: once per step, or per unit release under ZeRO-2/3).
  const Tensor d_fcproj_out = gather_grad(dres, s, defer ? defer->d_fcproj_out : Tensor{});
  if (config_.is_llama()) {
    ops::matmul_backward(s.d_act, now(g.fcproj_w), Tensor{}, d_fcproj_out, a.fc_gelu, w.fcproj_w, Tensor{},
                         matmul_format_, &fcproj);  // (B,T,F/tp)
    ops::swiglu_backward(d_fc, s.d_act, a.fc_pre);                                                 // (B,T,2F/tp)
  } else {
    // d fc_pre = (dy @ W_fcproj) * gelu'(fc_pre): the GELU backward is fused into the dgrad.
    ops::Fp8Options fcproj_dgrad = fcproj;
    if (uses_amax_slots()) fcproj_dgrad.dinp_amax = s.d_fc_amax;  // made by the GELU backward, read by mlp.fc's
    ops::matmul_backward(d_fc, now(g.fcproj_w), now(g.fcproj_b), d_fcproj_out, a.fc_gelu, w.fcproj_w, a.fc_pre,
                         matmul_format_, &fcproj_dgrad);
    if (!fcproj_dgrad.dinp_amax.empty()) {
      // This rank's part of mlp.fc's output gradient only: made whole here.
      if (tp_.size > 1) tp_comm_->all_reduce(s.d_fc_amax, parallel::ReduceOp::kMax);
      fc.dout_amax = s.d_fc_amax;
    }
  }
  ops::matmul_backward(s.d_c, now(g.fc_w), now(g.fc_b), d_fc, a.ln2, w.fc_w, Tensor{}, matmul_format_,
                       &fc);  // d ln2, partial
  norm_backward(dres, d_ln2_w, d_ln2_b, reduce_ln_grad(s), a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd);  // f
  // dres is now dr. Attention half.
  const Tensor d_proj_out = gather_grad(dres, s, defer ? defer->d_proj_out : Tensor{});
  ops::matmul_backward(s.d_atty, now(g.proj_w), now(g.proj_b), d_proj_out, a.atty, w.proj_w, Tensor{},
                       matmul_format_, &proj);  // (B,T,C/tp)
  ops::attention_backward(d_qkv, s.d_atty, a.qkv, a.atty, a.att_saved, local_heads(), local_kv_heads());
  if (config_.is_llama())  // the gradient of the unrotated q and k
    ops::rope_backward(d_qkv, s.rope_inv_freq, local_heads(), local_kv_heads());
  ops::matmul_backward(s.d_c, now(g.qkv_w), now(g.qkv_b), d_qkv, a.ln1, w.qkv_w, Tensor{}, matmul_format_,
                       &qkv);  // d ln1
  norm_backward(dres, d_ln1_w, d_ln1_b, reduce_ln_grad(s), x, w.ln1_w, a.ln1_mean, a.ln1_rstd);  // f
  // dres is now dx.
}

void TransformerBlock::backward_weight(const BlockParams& g, const WeightGradStash& k) const {
  // The order of the fused backward, so the sums come out the same; the
  // inputs' amaxes as forward scaled them (k.fp8_amax), as there.
  const ops::Fp8Options fcproj = fp8_call(kFcProj, k.fp8_amax, keeps_fc_out_amax());
  const ops::Fp8Options fc = fp8_call(kFc, k.fp8_amax, true), proj = fp8_call(kProj, k.fp8_amax, true),
                        qkv = fp8_call(kQkv, k.fp8_amax, true);
  ops::matmul_weight_grad(g.fcproj_w, g.fcproj_b, k.d_fcproj_out, k.fc_gelu, matmul_format_, &fcproj);
  ops::matmul_weight_grad(g.fc_w, g.fc_b, k.d_fc, k.ln2, matmul_format_, &fc);
  ops::matmul_weight_grad(g.proj_w, g.proj_b, k.d_proj_out, k.atty, matmul_format_, &proj);
  ops::matmul_weight_grad(g.qkv_w, g.qkv_b, k.d_qkv, k.ln1, matmul_format_, &qkv);
  for (const auto& [grad, kept] : {std::pair{g.ln2_w, k.d_ln2_w}, std::pair{g.ln2_b, k.d_ln2_b},
                                   std::pair{g.ln1_w, k.d_ln1_w}, std::pair{g.ln1_b, k.d_ln1_b}})
    if (!grad.empty()) ops::accumulate(grad, kept);
}

}  // namespace model
