// Hugging Face GPT-2 checkpoints (transformers' GPT2LMHeadModel): the engine's
// parameters under GPT-2's tensor names in a safetensors file
// (launch/formats/safetensors.h), plus the config.json that from_pretrained reads.
//
//   engine (registry)         Hugging Face                      layout
//   wte (Vp, C)               transformer.wte.weight (V, C)      padded rows dropped
//   wpe (T, C)                transformer.wpe.weight (T, C)
//   h.{l}.ln_1.weight/bias    transformer.h.{l}.ln_1.weight/bias
//   h.{l}.attn.qkv.weight     transformer.h.{l}.attn.c_attn.weight   transposed
//   h.{l}.attn.proj.weight    transformer.h.{l}.attn.c_proj.weight   transposed
//   h.{l}.mlp.fc.weight       transformer.h.{l}.mlp.c_fc.weight      transposed
//   h.{l}.mlp.proj.weight     transformer.h.{l}.mlp.c_proj.weight    transposed
//   (biases and ln_2 by the same names, ln_f as transformer.ln_f.*)
// GPT-2 uses Conv1D, whose weight is (in, out); the engine's Linear stores
// (out, in), hence the transposes. The LM head is tied to wte, so, as
// save_pretrained does, lm_head.weight is not written.
//
// Reading accepts names with or without the "transformer." prefix (OpenAI's
// gpt2 checkpoint on the Hub has none), ignores the attention-mask buffers
// (attn.bias, attn.masked_bias) and a tied lm_head.weight, and pads the
// vocabulary back with zero rows. A folder may hold model.safetensors or, as
// save_pretrained(max_shard_size=...) writes large models, the shards of
// model.safetensors.index.json (launch/formats/safetensors_shards.h).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "launch/formats/hf_folder.h"
#include "launch/formats/safetensors.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

// Writes DIR/model.safetensors, DIR/config.json and DIR/generation_config.json
// (creating DIR); with a tokenizer also DIR/tokenizer.json and
// DIR/tokenizer_config.json, so that AutoTokenizer, generate() and
// pipeline("text-generation") work on the folder (launch/formats/hf_folder.h).
// `master` is the whole model laid out by `registry` (model::build_gpt_registry).
//
// bos/eos: with a tokenizer, "<|endoftext|>" and its id when it has that
// token, else null (no token is known to begin or end a document). Without
// one, GPT-2's id 50256 when the vocabulary is GPT-2's 50257, else null.
void write_hf_gpt2(const std::string& dir, const model::GptConfig& config, const model::ParamRegistry& registry,
                   const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer = {});

// The GPT-2 model a config.json gives (n_layer, n_head, n_embd, n_positions,
// vocab_size): nullopt when it lacks one of those keys. A key that is not a
// positive integer is refused on one line starting with `source`.
std::optional<model::GptConfig> hf_gpt2_config(const nlohmann::json& config, const std::string& source);

// Refuses, on one line naming the tensor and both shapes, a file whose
// tensors do not make `expected` (and a config.json beside it whose n_head
// differs, or that has a field the engine would not compute as GPT-2 does);
// also a missing or unexpected tensor.
void check_hf_gpt2(const std::string& path, const model::GptConfig& expected);
void read_hf_gpt2(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                  float* master);

}  // namespace launch
