// The GPT-2 parameter set: names, global shapes and initialisation.
#pragma once

#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/param_registry.h"
#include "model/partition.h"

namespace model {

// Parameter names, in the order of the flat buffer (GPT-2 / Hugging Face style):
//   wte (Vp, C)  wpe (maxT, C)
//   h.{l}.ln_1.weight/bias (C)
//   h.{l}.attn.qkv.weight (3C, C)  h.{l}.attn.qkv.bias (3C)
//   h.{l}.attn.proj.weight (C, C)  h.{l}.attn.proj.bias (C)
//   h.{l}.ln_2.weight/bias (C)
//   h.{l}.mlp.fc.weight (4C, C)    h.{l}.mlp.fc.bias (4C)
//   h.{l}.mlp.proj.weight (C, 4C)  h.{l}.mlp.proj.bias (C)
//   ln_f.weight/bias (C)
// The LM head is tied to wte (no separate tensor).
// Llama-family models (GptConfig::is_llama) use the same names for what
// they have: no wpe; ln_1, ln_2 and ln_f hold an RMSNorm gain only;
// attn.qkv.weight is ((H + 2 KV) D, C), [q | k | v] with KV key/value heads,
// with attn.qkv.bias only under qkv_bias (Qwen2); mlp.fc.weight is (2F, C),
// [gate | up]; mlp.proj.weight (C, F); no other bias; an untied model has
// lm_head.weight (Vp, C) in a unit "lm_head" after ln_f.
std::string block_param_name(std::int64_t layer, const char* suffix);  // ("h.3.", "attn.qkv.weight")
// Parameter units (model/param_registry.h): "wte", "wpe", "h.{l}" per block, "ln_f", "lm_head".
std::string block_unit_name(std::int64_t layer);  // "h.3"

// Registers the parameters one process holds: those of `stage`, sliced for
// tensor-parallel rank `tp` (Megatron-LM, Shoeybi et al. 2019, section 3):
//   column-parallel (rows split):    attn.qkv (by heads, q|k|v blocks), mlp.fc
//   row-parallel (columns split):    attn.proj.weight, mlp.proj.weight
//   vocabulary-parallel (rows split): wte, shared by embedding and LM head
//   replicated:                      wpe, layer norms, biases of row-parallel layers
// With pipeline parallelism the first stage holds wte for the embedding and
// the last stage holds its own copy for the tied LM head (kept equal by
// summing their gradients), registered last so the blocks stay contiguous.
//
// Initialisation follows GPT-2 as llm.c does it: N(0, 0.02) for matrices and
// both embeddings, the residual projections (attn.proj, mlp.proj) scaled by
// 1/sqrt(2 L) (Radford et al. 2019, section 2.3), zeros for biases, ones for
// norm gains. The padded rows of wte are never looked up nor scored, so their
// values do not matter.
// align_multiple: entries are padded to multiples of kAlignElements x this
// (ZeRO passes the data-parallel size).
ParamRegistry build_gpt_registry(const GptConfig& config, const StageRange& stage, TensorParallel tp = {},
                                 std::int64_t align_multiple = 1);
// The same for a rank that holds several chunks of layers (the interleaved
// pipeline, model/partition.h): the embedding if the first chunk has it,
// every chunk's blocks in layer order, the head if the last chunk has it.
ParamRegistry build_gpt_registry(const GptConfig& config, const std::vector<StageRange>& chunks, TensorParallel tp,
                                 std::int64_t align_multiple);
inline ParamRegistry build_gpt_registry(const GptConfig& config) {
  return build_gpt_registry(config, whole_model(config));
}

}  // namespace model
