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

#include <cstdint>
#include <optional>
#include <string>

#include "launch/formats/safetensors.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

// "fp32" | "bf16" (the --save-hf-dtype values), else throws.
SafetensorsDType parse_hf_dtype(const std::string& name);

// A folder, a file named *.safetensors or a sharded index named
// *.safetensors.index.json: a Hugging Face model. Anything else is taken for
// an llm.c model file (launch/formats/llmc_model.h).
bool is_hf_model_path(const std::string& path);
// The safetensors file or index of `path`: for a folder, DIR/model.safetensors,
// else DIR/model.safetensors.index.json.
std::string hf_safetensors_file(const std::string& path);

// The tokenizer of a --save-hf folder (the run fills it from --tokenizer:
// launch/run/trainer_outputs.cpp).
struct HfTokenizer {
  // A Hugging Face tokenizer.json, copied byte for byte to DIR/tokenizer.json;
  // "" = the folder gets no tokenizer.
  std::string tokenizer_json;
  // The id of "<|endoftext|>" in it, if it has that token: GPT-2's bos and eos.
  std::optional<std::int64_t> end_of_text;
};

// Writes DIR/model.safetensors, DIR/config.json and DIR/generation_config.json
// (creating DIR); with a tokenizer also DIR/tokenizer.json and
// DIR/tokenizer_config.json, so that AutoTokenizer, generate() and
// pipeline("text-generation") work on the folder. `master` is the whole model
// laid out by `registry` (model::build_gpt_registry).
//
// bos/eos: with a tokenizer, "<|endoftext|>" and its id when it has that
// token, else null (no token is known to begin or end a document). Without
// one, GPT-2's id 50256 when the vocabulary is GPT-2's 50257, else null.
void write_hf_gpt2(const std::string& dir, const model::GptConfig& config, const model::ParamRegistry& registry,
                   const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer = {});

// The model shape a Hugging Face folder's config.json gives (n_layer, n_head,
// n_embd, n_positions, vocab_size), for --init-from without --model: nullopt
// when `path` is not a Hugging Face model, has no config.json beside it, or
// the config lacks one of those keys. A key that is not a positive integer is
// refused on one line.
std::optional<model::GptConfig> read_hf_config_shape(const std::string& path);
// The config.json that read_hf_config_shape reads: DIR/config.json for a
// folder, else the one beside the file.
std::string hf_config_path(const std::string& path);

// Refuses, on one line naming the tensor and both shapes, a file whose
// tensors do not make `expected` (and a config.json beside it whose n_head
// differs); also a missing or unexpected tensor.
void check_hf_gpt2(const std::string& path, const model::GptConfig& expected);
void read_hf_gpt2(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                  float* master);

// --init-from in either format: checks the model's shape / reads it.
void check_init_model(const std::string& path, const model::GptConfig& expected);
void read_init_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                     float* master);

}  // namespace launch
