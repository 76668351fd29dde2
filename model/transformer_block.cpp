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

BlockActivations allocate_block_activations(engine::Arena& arena, const GptConfig& config, ActivationShape s) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd, N = B * T;
  const engine::DType dt = s.dtype, st = s.stat_dtype();
  BlockActivations a;
  a.ln1 = arena.allocate(Shape{B, T, C}, dt, "ln1");
  a.ln1_mean = arena.allocate(Shape{N}, st, "ln1_mean");
  a.ln1_rstd = arena.allocate(Shape{N}, st, "ln1_rstd");
  a.qkv = arena.allocate(Shape{B, T, 3 * C}, dt, "qkv");
  a.atty = arena.allocate(Shape{B, T, C}, dt, "atty");
  a.att_saved = arena.allocate(ops::attention_saved_shape(arena.device(), B, config.n_head, T),
                               ops::attention_saved_dtype(arena.device(), dt), "att_saved");
  a.residual2 = arena.allocate(Shape{B, T, C}, dt, "residual2");
  a.ln2 = arena.allocate(Shape{B, T, C}, dt, "ln2");
  a.ln2_mean = arena.allocate(Shape{N}, st, "ln2_mean");
  a.ln2_rstd = arena.allocate(Shape{N}, st, "ln2_rstd");
  a.fc_pre = arena.allocate(Shape{B, T, 4 * C}, dt, "fc_pre");
  a.fc_gelu = arena.allocate(Shape{B, T, 4 * C}, dt, "fc_gelu");
  return a;
}

BlockScratch allocate_block_scratch(engine::Arena& arena, const GptConfig& config, ActivationShape s) {
  const std::int64_t B = s.batch, T = s.seq, C = config.n_embd;
  BlockScratch b;
  b.branch = arena.allocate(Shape{B, T, C}, s.dtype, "branch");
  b.d_c = arena.allocate(Shape{B, T, C}, s.dtype, "d_c");
  b.d_qkv = arena.allocate(Shape{B, T, 3 * C}, s.dtype, "d_qkv");
  b.d_fc = arena.allocate(Shape{B, T, 4 * C}, s.dtype, "d_fc");
  return b;
}

void TransformerBlock::forward(const Tensor& y, const Tensor& x, BlockActivations& a,
                               const BlockScratch& scratch) const {
  const int n_head = static_cast<int>(config_.n_head);
  // Attention half: r = x + proj(attention(qkv(ln_1(x))))
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w_.ln1_w, w_.ln1_b);  // (B,T,C)
  ops::matmul_forward(a.qkv, a.ln1, w_.qkv_w, w_.qkv_b);                            // (B,T,3C)
  ops::attention_forward(a.atty, a.att_saved, a.qkv, n_head);                       // (B,T,C)
  ops::matmul_forward(scratch.branch, a.atty, w_.proj_w, w_.proj_b);                // (B,T,C)
  ops::add(a.residual2, x, scratch.branch);                                          // (B,T,C)
  // MLP half: y = r + mlp.proj(gelu(mlp.fc(ln_2(r))))
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w_.ln2_w, w_.ln2_b);
  ops::matmul_forward(a.fc_gelu, a.ln2, w_.fc_w, w_.fc_b, a.fc_pre);                // (B,T,4C), GELU fused
  ops::matmul_forward(scratch.branch, a.fc_gelu, w_.fcproj_w, w_.fcproj_b);          // (B,T,C)
  ops::add(y, a.residual2, scratch.branch);
}

void TransformerBlock::backward(const Tensor& dres, const Tensor& x, const BlockActivations& a,
                                const BlockScratch& s) const {
  const int n_head = static_cast<int>(config_.n_head);
  // MLP half. dres = dy = d(mlp branch output) = dr (so far).
  // d fc_pre = (dy @ W_fcproj) * gelu'(fc_pre): the GELU backward is fused into the dgrad.
  ops::matmul_backward(s.d_fc, g_.fcproj_w, g_.fcproj_b, dres, a.fc_gelu, w_.fcproj_w, a.fc_pre);
  ops::matmul_backward(s.d_c, g_.fc_w, g_.fc_b, s.d_fc, a.ln2, w_.fc_w);            // d ln2 (B,T,C)
  ops::layernorm_backward(dres, g_.ln2_w, g_.ln2_b, s.d_c, a.residual2, w_.ln2_w, a.ln2_mean, a.ln2_rstd);
  // dres is now dr. Attention half.
  ops::matmul_backward(s.d_c, g_.proj_w, g_.proj_b, dres, a.atty, w_.proj_w);       // d atty
  ops::attention_backward(s.d_qkv, s.d_c, a.qkv, a.atty, a.att_saved, n_head);      // (B,T,3C)
  ops::matmul_backward(s.d_c, g_.qkv_w, g_.qkv_b, s.d_qkv, a.ln1, w_.qkv_w);        // d ln1
  ops::layernorm_backward(dres, g_.ln1_w, g_.ln1_b, s.d_c, x, w_.ln1_w, a.ln1_mean, a.ln1_rstd);
  // dres is now dx.
}

}  // namespace model
