// The model files a run starts from (--init-from) and writes (--save-hf), by
// format and architecture: an llm.c model file (GPT-2 only,
// launch/formats/llmc_model.h), or a Hugging Face folder of GPT-2
// (launch/formats/hf_gpt2.h) or of the Llama family, Llama and Qwen2
// (launch/formats/hf_llama.h), told apart by config.json's model_type or, for
// a run's own model, by its GptConfig.
#pragma once

#include <optional>
#include <string>

#include "launch/formats/hf_folder.h"
#include "launch/formats/safetensors.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

// The model a Hugging Face folder's config.json gives, for --init-from
// without --model: model_type "llama" or "qwen2" (launch/formats/hf_llama.h's
// hf_llama_config), or "gpt2" or none with GPT-2's sizes (n_layer, n_head,
// n_embd, n_positions, vocab_size). nullopt when `path` is not a Hugging Face
// model, has no config.json beside it, or a GPT-2 config lacks one of its
// sizes. Refused on one line naming the field: another model_type, a size
// that is not a positive integer, a Llama-family field the engine cannot
// honour.
std::optional<model::GptConfig> read_hf_config_shape(const std::string& path);

// transformers' class for `config`: GPT2LMHeadModel, LlamaForCausalLM or
// Qwen2ForCausalLM (a Llama-family model with a q/k/v bias).
const char* hf_architecture(const model::GptConfig& config);

// A Hugging Face folder or file of `expected`'s architecture: checked (every
// refusal of check_hf_gpt2 / check_hf_llama), or read into `master`.
void check_hf_model(const std::string& path, const model::GptConfig& expected);
void read_hf_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                   float* master);
// --save-hf: write_hf_gpt2 or write_hf_llama by `config`'s architecture.
void write_hf_model(const std::string& dir, const model::GptConfig& config, const model::ParamRegistry& registry,
                    const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer = {});

// --init-from in either format (llm.c or Hugging Face): checks the model's
// shape / reads it.
void check_init_model(const std::string& path, const model::GptConfig& expected);
void read_init_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                     float* master);

}  // namespace launch
