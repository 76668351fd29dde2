#include "launch/formats/model_files.h"

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/formats/hf_gpt2.h"
#include "launch/formats/hf_llama.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

using model::GptConfig;

std::optional<GptConfig> read_hf_config_shape(const std::string& path) try {
  if (!is_hf_model_path(path)) return std::nullopt;
  const nlohmann::json config = read_hf_config(hf_config_path(path));
  if (!config.is_object()) return std::nullopt;
  const std::string source = "--init-from '" + path + "'";
  if (config.contains("model_type")) {
    const nlohmann::json& type = config["model_type"];
    if (type.is_string() && (type == "llama" || type == "qwen2")) return hf_llama_config(config, source);
    ENGINE_CHECK(type.is_string() && type == "gpt2", source, ": its config.json has model_type ", json_excerpt(type),
                 ", which the engine cannot load (it loads \"gpt2\", \"llama\" and \"qwen2\")");
  }
  return hf_gpt2_config(config, source);
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

const char* hf_architecture(const GptConfig& config) {
  return !config.is_llama() ? "GPT2LMHeadModel" : config.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

void check_hf_model(const std::string& path, const GptConfig& expected) {
  if (expected.is_llama()) check_hf_llama(path, expected);
  else check_hf_gpt2(path, expected);
}

void read_hf_model(const std::string& path, const GptConfig& expected, const model::ParamRegistry& registry,
                   float* master) {
  if (expected.is_llama()) read_hf_llama(path, expected, registry, master);
  else read_hf_gpt2(path, expected, registry, master);
}

void write_hf_model(const std::string& dir, const GptConfig& config, const model::ParamRegistry& registry,
                    const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer) {
  if (config.is_llama()) write_hf_llama(dir, config, registry, master, dtype, tokenizer);
  else write_hf_gpt2(dir, config, registry, master, dtype, tokenizer);
}

void check_init_model(const std::string& path, const GptConfig& expected) {
  if (is_hf_model_path(path)) {
    check_hf_model(path, expected);
    return;
  }
  const GptConfig found = read_llmc_config(path);
  ENGINE_CHECK(found == expected, "model file '", path, "' holds a model of another shape: ", found.describe(),
               "; this run's model is ", expected.describe());
}

void read_init_model(const std::string& path, const GptConfig& expected, const model::ParamRegistry& registry,
                     float* master) {
  if (is_hf_model_path(path)) read_hf_model(path, expected, registry, master);
  else read_llmc_model(path, expected, registry, master);
}

}  // namespace launch
