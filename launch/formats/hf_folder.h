// What every Hugging Face model folder has, whatever the architecture
// (launch/formats/hf_gpt2.h, launch/formats/hf_llama.h): where its tensors and
// config.json are, the tensor checks every reader makes, and what --save-hf
// writes beside the tensors for AutoTokenizer and generate() (the run's
// tokenizer.json, tokenizer_config.json, generation_config.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/formats/safetensors.h"
#include "launch/formats/safetensors_shards.h"
#include "model/gpt_config.h"

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
// The config.json of a model: DIR/config.json for a folder, else the one
// beside the file.
std::string hf_config_path(const std::string& path);
// `config_path` parsed; null when there is no such file. A file that is not a
// regular file or not JSON is refused on one line.
nlohmann::json read_hf_config(const std::string& config_path);

// The first field, under config.json's name for the architecture, in which
// the model of a config.json (`file`) differs from the run's (`run`):
// "num_key_value_heads 2, this run's model has 4"; "" when they are equal.
std::string hf_config_difference(const model::GptConfig& file, const model::GptConfig& run);

// One tensor a reader expects: its name in the file and its shape there.
struct HfExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};
// Refuses, on one line naming `file`, the tensor and both shapes, a file that
// lacks one of `expected`, holds one of another shape, or holds a tensor
// neither expected nor `ignored`. `run` names the model for the message
// ("this run's model (L=2 ...)").
void check_hf_tensors(const SafetensorsShards& file, const std::vector<HfExpectedTensor>& expected,
                      const std::function<bool(const std::string&)>& ignored, const std::string& run);
// An output head stored beside the embedding of a tied model must be the
// embedding itself (some exports write the tied copy): refused naming both
// tensors and `why` otherwise, as the head would be dropped and the model
// loaded would compute other logits.
void check_tied_copy(const SafetensorsShards& file, const std::string& head, const std::string& embedding,
                     const std::string& why);
// Tensor `name` as f32 into `values` (resized), every value checked finite.
void read_hf_tensor(const SafetensorsShards& file, const std::string& name, std::vector<float>& values);

// The tokenizer of a --save-hf folder (the run fills it from --tokenizer:
// launch/run/trainer_outputs.cpp).
// A special token of the tokenizer: its id and its text.
struct HfSpecialToken {
  std::int64_t id = 0;
  std::string text;
};
struct HfTokenizer {
  // A Hugging Face tokenizer.json, copied byte for byte to DIR/tokenizer.json;
  // "" = the folder gets no tokenizer.
  std::string tokenizer_json;
  // What generate() starts from and stops at: "<|endoftext|>" for both in
  // GPT-2's, Qwen2's and SmolLM2's tokenizers; Llama 3's starts a document
  // with its template's "<|begin_of_text|>" and ends it with "<|end_of_text|>".
  std::optional<HfSpecialToken> bos, eos;
};

// The run's tokenizer as --save-hf writes it, read before anything is
// written (a problem with it leaves no half-written folder).
struct HfTokenizerFiles {
  std::string tokenizer_bytes;                // "" = no tokenizer
  std::optional<HfSpecialToken> bos, eos;     // if known
  nlohmann::ordered_json bos_id() const;      // the id, or null
  nlohmann::ordered_json eos_id() const;
};
// Reads `tokenizer` for a model of `config`. Without a tokenizer,
// `default_end_of_text` (GPT-2's 50256 for GPT-2's vocabulary) stands for
// bos and eos; an id outside the vocabulary is refused.
HfTokenizerFiles read_hf_tokenizer(const HfTokenizer& tokenizer, const model::GptConfig& config,
                                   std::optional<std::int64_t> default_end_of_text);
// DIR/generation_config.json (bos and eos for generate()) and, with a
// tokenizer, DIR/tokenizer.json and DIR/tokenizer_config.json; without one,
// any tokenizer files of an earlier model are removed.
void write_hf_tokenizer_files(const std::filesystem::path& dir, const model::GptConfig& config,
                              const HfTokenizerFiles& tokenizer);

// `value` written atomically as indented JSON.
void write_hf_json(const std::filesystem::path& path, const nlohmann::ordered_json& value);

}  // namespace launch
