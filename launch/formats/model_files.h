// The model files a run starts from (--init-from) and writes (--save-hf), by
// format: an llm.c model file (launch/formats/llmc_model.h), or a Hugging
// Face folder (launch/formats/hf_gpt2.h).
#pragma once

#include <optional>
#include <string>

#include "launch/formats/hf_folder.h"
#include "launch/formats/safetensors.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

// The model a Hugging Face folder's config.json gives, for --init-from
// without --model: model_type "gpt2" or none, with GPT-2's sizes (n_layer,
// n_head, n_embd, n_positions, vocab_size). nullopt when `path` is not a
// Hugging Face model, has no config.json beside it, or the config lacks one
// of those sizes. Refused on one line naming the field: another model_type, a
// size that is not a positive integer.
std::optional<model::GptConfig> read_hf_config_shape(const std::string& path);

// transformers' class for `config`: GPT2LMHeadModel.
const char* hf_architecture(const model::GptConfig& config);

// A Hugging Face folder or file of `expected`: checked (every refusal of
// check_hf_gpt2), or read into `master`.
void check_hf_model(const std::string& path, const model::GptConfig& expected);
void read_hf_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                   float* master);
// --save-hf: write_hf_gpt2.
void write_hf_model(const std::string& dir, const model::GptConfig& config, const model::ParamRegistry& registry,
                    const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer = {});

// --init-from in either format (llm.c or Hugging Face): checks the model's
// shape / reads it.
void check_init_model(const std::string& path, const model::GptConfig& expected);
void read_init_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                     float* master);

}  // namespace launch
