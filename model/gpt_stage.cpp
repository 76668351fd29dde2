#include "model/gpt_stage.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "model/gpt_params.h"
#include "model/rope.h"
#include "model/stage_activations.h"

namespace model {

using engine::Shape;
using engine::Tensor;
namespace ops = engine::ops;

GptStage::GptStage(const GptConfig& config, const ParamStore& store, StageRange range, ActivationShape shape,
                   int slots, TensorParallel tp, parallel::Communicator* tp_comm, Recompute recompute,
                   parallel::ZeroUnits* zero, int weight_stash_sets, int weight_input_sets)
    : config_(config), store_(store), params_(store, zero), range_(range), shape_(shape), tp_(tp), tp_comm_(tp_comm),
      recompute_(recompute) {
  ENGINE_CHECK(tp.size == 1 || (tp_comm != nullptr && tp_comm->size() == tp.size), "a stage split ", tp.size,
               " ways needs a tensor-parallel communicator of that size");
  ENGINE_CHECK(!tp.splits_tokens() || (shape.batch * shape.seq) % tp.size == 0, "sequence parallel: the ",
               shape.batch, " x ", shape.seq, " tokens of a micro-batch do not split evenly over tp ", tp.size);
  ENGINE_CHECK(range.first_layer >= 0 && range.first_layer <= range.last_layer &&
                   range.last_layer <= config.n_layer,
               "stage layers [", range.first_layer, ", ", range.last_layer, ") are outside the model's ",
               config.n_layer, " layers");
  ENGINE_CHECK(slots >= 1, "a stage needs at least one activation slot, got ", slots);
  ENGINE_CHECK(weight_stash_sets >= 0 && weight_input_sets >= 0, "a stage's weight-gradient stash and input sets (",
               weight_stash_sets, ", ", weight_input_sets, ") must be >= 0");
  // Forward to weight pass spans forward to input pass and input to weight pass.
  ENGINE_CHECK(weight_stash_sets == 0 || (weight_input_sets >= slots && weight_input_sets >= weight_stash_sets),
               "a split backward needs at least as many weight-input sets (", weight_input_sets,
               ") as activation slots (", slots, ") and stash sets (", weight_stash_sets, ")");
  ENGINE_CHECK(shape.seq >= 1 && shape.seq <= config.max_seq_len, "sequence length ", shape.seq,
               " must be in [1, ", config.max_seq_len, "] (the model's max_seq_len)");
  ENGINE_CHECK(shape.batch >= 1, "micro-batch size must be >= 1, got ", shape.batch);
  for (std::int64_t l = range.first_layer; l < range.last_layer; ++l) {
    blocks_.emplace_back(config_, tp_, tp_comm_);
    block_units_.push_back(params_.unit(block_unit_name(l)));
  }
  if (range.has_embedding || (range.has_head && config.tied_embeddings)) wte_unit_ = params_.unit("wte");
  if (range.has_embedding && config.has_position_table()) wpe_unit_ = params_.unit("wpe");
  if (range.has_head) {
    lnf_unit_ = params_.unit("ln_f");
    head_unit_ = config.tied_embeddings ? wte_unit_ : params_.unit("lm_head");
  }
  residuals_.resize(slots);
  acts_.resize(slots);
  tokens_.resize(slots);
  targets_.resize(slots);
  losses_.resize(slots);
  head_dres_.resize(slots);
  output_grads_.resize(slots);
  weight_stash_.resize(weight_stash_sets);
  embedding_grad_stash_.resize(weight_stash_sets);
  weight_input_sets_ = weight_stash_sets > 0 ? weight_input_sets : 0;
}

void GptStage::allocate(engine::Arena& arena) {
  StageActivations a = allocate_stage_activations(arena, config_, range_, shape_, slots(), tp_, recompute_,
                                                  weight_stash_sets(), weight_input_sets_);
  residuals_ = std::move(a.residuals);
  acts_ = std::move(a.acts);
  tokens_ = std::move(a.tokens);
  targets_ = std::move(a.targets);
  losses_ = std::move(a.losses);
  head_dres_ = std::move(a.head_dres);
  output_grads_ = std::move(a.output_grads);
  weight_stash_ = std::move(a.weight_stash);
  embedding_grad_stash_ = std::move(a.embedding_grad_stash);
  embedding_token_stash_ = std::move(a.embedding_token_stash);
  weight_inputs_ = std::move(a.weight_inputs);
  scratch_ = a.scratch;
  fill_rope_frequencies(scratch_, config_);  // nothing on a planning arena
  shared_acts_ = a.shared;
  dresidual_ = a.dresidual;
  lnf_ = a.lnf;
  lnf_mean_ = a.lnf_mean;
  lnf_rstd_ = a.lnf_rstd;
  d_lnf_ = a.d_lnf;
  logits_ = a.logits;
  ce_max_ = a.ce_max;
  ce_sums_ = a.ce_sums;
  if (!arena.is_planning()) allocate_fp8_weight_caches(arena.device());
}

namespace {
// A block's four weights as a tensor-parallel rank holds them, (out, in), in
// TransformerBlock's Linear order: qkv, attn.proj, mlp.fc, mlp.proj.
std::array<std::pair<std::int64_t, std::int64_t>, 4> block_weight_shapes(const GptConfig& config, TensorParallel tp) {
  const std::int64_t C = config.n_embd, n = tp.size;
  return {std::pair{config.qkv_width() / n, C}, std::pair{C, C / n}, std::pair{config.fc_width() / n, C},
          std::pair{C, config.mlp_width() / n}};
}
}  // namespace

std::size_t fp8_weight_copy_bytes_per_block(const GptConfig& config, TensorParallel tp, engine::DeviceType device) {
  std::size_t bytes = 0;
  for (const auto& [out, in] : block_weight_shapes(config, tp)) bytes += engine::ops::fp8_weight_cache_bytes(device, out, in);
  return bytes;
}

void GptStage::allocate_fp8_weight_caches(engine::DeviceType device) {
  for (TransformerBlock& block : blocks_) block.set_fp8_weight_caches({});  // none point into what is freed next
  fp8_weights_.clear();
  fp8_weight_buffer_ = engine::Buffer();
  if (matmul_format_ != engine::ops::MatmulFormat::kFp8E4M3 || !keeps_fp8_weights_ || blocks_.empty()) return;
  const auto shapes = block_weight_shapes(config_, tp_);
  fp8_weight_buffer_ = engine::Buffer(device, fp8_weight_copy_bytes_per_block(config_, tp_, device) * blocks_.size());
  fp8_weights_.resize(blocks_.size());
  char* at = static_cast<char*>(fp8_weight_buffer_.data());
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    std::array<engine::ops::Fp8WeightCache*, 4> caches{};
    for (int k = 0; k < 4; ++k) {
      const std::size_t bytes = engine::ops::fp8_weight_cache_bytes(device, shapes[k].first, shapes[k].second);
      fp8_weights_[b][k].storage =
          engine::Tensor(at, engine::Shape{static_cast<std::int64_t>(bytes / sizeof(float))}, engine::DType::kF32, device);
      caches[k] = &fp8_weights_[b][k];
      at += bytes;
    }
    blocks_[b].set_fp8_weight_caches(caches);
  }
}

BlockActivations GptStage::block_activations(int slot, std::size_t i, int weight_inputs) const {
  BlockActivations a;
  switch (recompute_) {
    case Recompute::kNone: a = acts_[slot][i]; break;
    case Recompute::kSelective:
      a = acts_[slot][i];
      a.att_saved = shared_acts_.att_saved;
      break;
    case Recompute::kFull: return shared_acts_;
  }
  if (!separate_weight_inputs()) return a;
  ENGINE_CHECK(weight_inputs >= 0 && weight_inputs < weight_input_sets_, "split backward: weight-input set ",
               weight_inputs, " of the ", weight_input_sets_, " this stage holds");
  return with_weight_inputs(a, weight_inputs_[weight_inputs][i]);
}

namespace {
Tensor host_tokens(const std::int32_t* data, std::int64_t B, std::int64_t T) {
  return Tensor(const_cast<std::int32_t*>(data), Shape{B, T}, engine::DType::kI32, engine::DeviceType::kCpu);
}
}  // namespace

void GptStage::embedding_forward(int slot, const Tensor& res0) {
  // Each tensor-parallel rank adds the rows of the tokens it holds (and
  // rank 0 the positions); an all-reduce completes the embedding, or under
  // sequence parallelism a reduce-scatter leaves each rank its tokens.
  // Every rank acquires the units alike (under ZeRO-3 each is a gather);
  // a Llama has no position table (RoPE).
  const UnitView wte = params_.weights(wte_unit_);
  const Tensor wpe = wpe_unit_ >= 0 ? params_.weights(wpe_unit_)["wpe"] : Tensor{};
  if (!blocks_.empty()) params_.prefetch_weights(block_units_.front());
  const Tensor partial = tp_.splits_tokens() ? scratch_.branch : res0;  // (B,T,C)
  ops::embedding_forward(partial, tokens_[slot], wte["wte"], tp_.rank == 0 ? wpe : Tensor{}, vocab_start());
  if (wpe_unit_ >= 0) params_.release_weights(wpe_unit_);
  params_.release_weights(wte_unit_);
  if (tp_.splits_tokens())
    tp_comm_->reduce_scatter(partial.view(Shape{partial.numel()}), res0.view(Shape{res0.numel()}));
  else
    tp_all_reduce(res0);
}

void GptStage::forward(int slot, const std::int32_t* tokens, const std::int32_t* targets, double grad_scale,
                       int weight_inputs) {
  const std::int64_t B = shape_.batch, T = shape_.seq;
  std::vector<Tensor>& res = residuals_[slot];
  if (range_.has_embedding) {
    ENGINE_CHECK(tokens != nullptr, "the first stage's forward needs tokens");
    ops::copy(tokens_[slot], host_tokens(tokens, B, T));
    embedding_forward(slot, res[0]);
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const int unit = block_units_[i];
    const UnitView w = params_.weights(unit);
    // The next unit this pass needs: its gather overlaps this block.
    if (i + 1 < blocks_.size()) params_.prefetch_weights(block_units_[i + 1]);
    else if (range_.has_head) params_.prefetch_weights(lnf_unit_);
    // Without a set named (evaluation and sampling, between steps, when no
    // weight pass is pending) set 0 takes the forward's weight inputs.
    BlockActivations a = block_activations(slot, i, std::max(weight_inputs, 0));
    blocks_[i].forward(block_params(w, range_.first_layer + static_cast<std::int64_t>(i)), res[i + 1], res[i], a,
                       scratch_);
    params_.release_weights(unit);
  }
  if (range_.has_head) {
    if (targets != nullptr) ops::copy(targets_[slot], host_tokens(targets, B, T));
    head_forward(slot, grad_scale, targets != nullptr);
  }
}

void GptStage::tp_all_reduce(const Tensor& t, parallel::ReduceOp op) const {
  if (tp_.size > 1) tp_comm_->all_reduce(t, op);
}

void GptStage::cross_entropy(int slot, double grad_scale) {
  if (tp_.size == 1) {
    ops::softmax_cross_entropy(losses_[slot], logits_, targets_[slot], config_.vocab_size, grad_scale);
    return;
  }
  // Vocabulary-parallel: global row max, then global sum of exponentials and
  // the target's logit (held by one rank), then every rank finishes alike.
  ops::cross_entropy_partial_max(ce_max_, logits_, vocab_start(), config_.vocab_size);
  tp_all_reduce(ce_max_, parallel::ReduceOp::kMax);
  ops::cross_entropy_partial_sums(ce_sums_, logits_, ce_max_, targets_[slot], vocab_start(), config_.vocab_size);
  tp_all_reduce(ce_sums_);
  ops::cross_entropy_finish(losses_[slot], logits_, ce_max_, ce_sums_, targets_[slot], vocab_start(),
                            config_.vocab_size, grad_scale);
}

void GptStage::norm_forward(const Tensor& out, const Tensor& in, const UnitView& lnf) const {
  if (config_.is_llama()) ops::rmsnorm_forward(out, lnf_rstd_, in, lnf["ln_f.weight"], config_.norm_eps);
  else ops::layernorm_forward(out, lnf_mean_, lnf_rstd_, in, lnf["ln_f.weight"], lnf["ln_f.bias"], config_.norm_eps);
}

void GptStage::head_forward(int slot, double grad_scale, bool with_loss) {
  const Tensor last = residuals_[slot].back();
  const UnitView lnf = params_.weights(lnf_unit_);
  params_.prefetch_weights(head_unit_);
  if (tp_.splits_tokens()) {
    // This rank's tokens are normalised, then gathered for the vocabulary-parallel head.
    norm_forward(scratch_.ln_chunk, last, lnf);
    tp_comm_->all_gather(scratch_.ln_chunk.view(Shape{scratch_.ln_chunk.numel()}), lnf_.view(Shape{lnf_.numel()}));
  } else {
    norm_forward(lnf_, last, lnf);
  }
  // The head's weight: wte (tied to the token embedding) or lm_head.
  const char* head_name = config_.tied_embeddings ? "wte" : "lm_head.weight";
  const UnitView head_unit = params_.weights(head_unit_);
  const Tensor head = head_unit[head_name];
  ops::matmul_forward(logits_, lnf_, head, Tensor{});  // (B*T, Vp/tp)
  const bool backward = with_loss && grad_scale != 0.0;
  if (with_loss) cross_entropy(slot, grad_scale);
  if (backward) {
    // logits_ now holds dlogits; finish the head's backward while they exist.
    // With a tied head and the embedding on this stage too, wte's gradient
    // stays held until the embedding's backward adds its part (backward()).
    const UnitView dhead = params_.grads(head_unit_);
    ops::matmul_backward(d_lnf_, dhead[head_name], Tensor{}, logits_, lnf_, head);
    if (!range_.has_embedding || !config_.tied_embeddings) params_.release_grads(head_unit_);
  }
  params_.release_weights(head_unit_);
  if (backward) {
    // Each rank's vocabulary slice contributes to d lnf: sum them (for this
    // rank's tokens only, under sequence parallelism).
    Tensor d_lnf = d_lnf_;
    if (tp_.splits_tokens()) {
      tp_comm_->reduce_scatter(d_lnf_.view(Shape{d_lnf_.numel()}), scratch_.d_chunk.view(Shape{scratch_.d_chunk.numel()}));
      d_lnf = scratch_.d_chunk;
    } else {
      tp_all_reduce(d_lnf_);
    }
    ops::fill(head_dres_[slot], 0.0);  // the norms' backward accumulates
    const UnitView dlnf = params_.grads(lnf_unit_);
    if (config_.is_llama())
      ops::rmsnorm_backward(head_dres_[slot], dlnf["ln_f.weight"], d_lnf, last, lnf["ln_f.weight"], lnf_rstd_);
    else
      ops::layernorm_backward(head_dres_[slot], dlnf["ln_f.weight"], dlnf["ln_f.bias"], d_lnf, last,
                              lnf["ln_f.weight"], lnf_mean_, lnf_rstd_);
    if (params_.grads_staged()) sum_layernorm_grads(dlnf, head_norm_names());
    params_.release_grads(lnf_unit_);
  }
  params_.release_weights(lnf_unit_);
}

std::vector<std::string> GptStage::block_norm_names(std::int64_t layer) const {
  if (config_.is_llama()) return {block_param_name(layer, "ln_1.weight"), block_param_name(layer, "ln_2.weight")};
  return {block_param_name(layer, "ln_1.weight"), block_param_name(layer, "ln_1.bias"),
          block_param_name(layer, "ln_2.weight"), block_param_name(layer, "ln_2.bias")};
}

std::vector<std::string> GptStage::head_norm_names() const {
  if (config_.is_llama()) return {"ln_f.weight"};
  return {"ln_f.weight", "ln_f.bias"};
}

void GptStage::block_backward(int slot, std::size_t i, int weight_inputs, const WeightGradStash* defer) {
  const std::int64_t layer = range_.first_layer + static_cast<std::int64_t>(i);
  const int unit = block_units_[i];
  const UnitView w = params_.weights(unit);
  if (i > 0) params_.prefetch_weights(block_units_[i - 1]);  // the embedding's backward needs no weights
  const BlockParams weights = block_params(w, layer);
  const BlockActivations a = block_activations(slot, i, weight_inputs);
  // Rebuild what the recomputation mode dropped since this slot's forward
  // (other slots' forwards may have overwritten the shared tensors since).
  blocks_[i].recompute(weights, residuals_[slot][i], a, scratch_, recompute_);
  if (defer) {
    // The input pass writes no parameter gradient: the unit's gradients are
    // not taken (under ZeRO-2/3 no staging buffer) until the weight pass.
    blocks_[i].backward(weights, BlockParams{}, dresidual_, residuals_[slot][i], a, scratch_, defer);
  } else {
    const UnitView g = params_.grads(unit);
    blocks_[i].backward(weights, block_params(g, layer), dresidual_, residuals_[slot][i], a, scratch_);
    grads_done(i, g);
  }
  params_.release_weights(unit);
}

void GptStage::grads_done(std::size_t i, const UnitView& g) {
  const std::int64_t layer = range_.first_layer + static_cast<std::int64_t>(i);
  if (params_.grads_staged()) sum_layernorm_grads(g, block_norm_names(layer));
  params_.release_grads(block_units_[i]);
  if (backward_hook_) backward_hook_(layer);
}

void GptStage::embedding_backward(const Tensor& tokens, const Tensor& d_embedding_out) {
  // wpe is replicated: every tensor-parallel rank accumulates its full
  // gradient, from every token (gathered under sequence parallelism).
  Tensor dembed = d_embedding_out;
  if (tp_.splits_tokens()) {
    tp_comm_->all_gather(d_embedding_out.view(Shape{d_embedding_out.numel()}),
                         scratch_.d_full.view(Shape{scratch_.d_full.numel()}));
    dembed = scratch_.d_full;
  }
  const UnitView dwte = params_.grads(wte_unit_);
  const Tensor dwpe = wpe_unit_ >= 0 ? params_.grads(wpe_unit_)["wpe"] : Tensor{};
  ops::embedding_backward(dwte["wte"], dwpe, dembed, tokens, vocab_start());
  if (wpe_unit_ >= 0) params_.release_grads(wpe_unit_);
  params_.release_grads(wte_unit_);
  // Held since this micro-batch's head (head_forward) when the head is wte.
  if (range_.has_head && config_.tied_embeddings) params_.release_grads(wte_unit_);
  if (backward_hook_) backward_hook_(-1);
}

void GptStage::backward(int slot) {
  ops::copy(dresidual_, range_.has_head ? head_dres_[slot] : output_grads_[slot]);
  ENGINE_CHECK(!separate_weight_inputs(), "a stage built for a split backward runs backward_input and backward_weight");
  for (std::size_t i = blocks_.size(); i-- > 0;) block_backward(slot, i, -1, nullptr);
  if (range_.has_embedding) embedding_backward(tokens_[slot], dresidual_);
}

// The stash set's view for block i: its inputs are the micro-batch's
// weight-input set, unless it keeps its own copies (full recomputation).
WeightGradStash GptStage::stash_of(int stash, int weight_inputs, std::size_t i) const {
  ENGINE_CHECK(stash >= 0 && stash < weight_stash_sets(), "split backward: stash set ", stash, " of the ",
               weight_stash_sets(), " this stage holds");
  const WeightGradStash& own = weight_stash_[stash][i];
  if (!own.ln1.empty()) return own;
  ENGINE_CHECK(weight_inputs >= 0 && weight_inputs < weight_input_sets_, "split backward: weight-input set ",
               weight_inputs, " of the ", weight_input_sets_, " this stage holds");
  return with_weight_inputs(own, weight_inputs_[weight_inputs][i]);
}

void GptStage::backward_input(int slot, int stash, int weight_inputs) {
  ENGINE_CHECK(weight_stash_sets() > 0, "backward_input: this stage was built for a whole backward");
  ops::copy(dresidual_, range_.has_head ? head_dres_[slot] : output_grads_[slot]);
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    const WeightGradStash defer = stash_of(stash, weight_inputs, i);
    block_backward(slot, i, weight_inputs, &defer);
  }
  // The embedding's part waits too: the gradient of its output (dresidual_,
  // which the next input pass overwrites) and its tokens (the slot's, which
  // the next forward into the slot overwrites).
  if (range_.has_embedding) {
    ops::copy(embedding_grad_stash_[stash], dresidual_);
    ops::copy(embedding_token_stash_[stash], tokens_[slot]);
  }
}

void GptStage::backward_weight(int stash, int weight_inputs) {
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    const std::int64_t layer = range_.first_layer + static_cast<std::int64_t>(i);
    const WeightGradStash kept = stash_of(stash, weight_inputs, i);
    const UnitView g = params_.grads(block_units_[i]);
    blocks_[i].backward_weight(block_params(g, layer), kept);
    grads_done(i, g);
  }
  if (range_.has_embedding) embedding_backward(embedding_token_stash_[stash], embedding_grad_stash_[stash]);
}

void GptStage::sum_layernorm_grads(const UnitView& grads, const std::vector<std::string>& names) const {
  // Each rank's layer norms saw only its tokens: their gain and bias
  // gradients are partial sums over the group (Korthikanti et al. 2023, 4.2.2).
  if (!tp_.splits_tokens()) return;
  for (const std::string& name : names) tp_comm_->all_reduce(grads[name]);
}

void GptStage::reduce_sequence_parallel_grads() {
  if (!tp_.splits_tokens() || params_.grads_staged()) return;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const std::int64_t l = range_.first_layer + static_cast<std::int64_t>(i);
    const UnitView g = params_.grads(block_units_[i]);
    sum_layernorm_grads(g, block_norm_names(l));
    params_.release_grads(block_units_[i]);
  }
  if (range_.has_head) {
    const UnitView g = params_.grads(lnf_unit_);
    sum_layernorm_grads(g, head_norm_names());
    params_.release_grads(lnf_unit_);
  }
}

double GptStage::loss_sum(int slot, std::int64_t sequences) const {
  ENGINE_CHECK(range_.has_head, "loss_sum: only the last stage computes the loss");
  ENGINE_CHECK(sequences >= 0 && sequences <= shape_.batch, "loss_sum: ", sequences, " sequences of a micro-batch of ",
               shape_.batch);
  const Tensor& l = losses_[slot];  // (B*T), sequence after sequence
  std::vector<double> host(static_cast<std::size_t>(l.numel()));
  ops::copy(Tensor(host.data(), l.shape(), engine::DType::kF64, engine::DeviceType::kCpu), l);
  const std::size_t counted = static_cast<std::size_t>(sequences * shape_.seq);
  double sum = 0.0;
  for (std::size_t i = 0; i < counted; ++i) sum += host[i];
  return sum;
}

}  // namespace model
