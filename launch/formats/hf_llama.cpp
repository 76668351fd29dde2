#include "launch/formats/hf_llama.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "engine/check.h"
#include "launch/formats/safetensors_shards.h"
#include "launch/formats/untrusted_values.h"
#include "model/gpt_params.h"

namespace launch {

using model::GptConfig;
using model::ParamInfo;
using model::ParamRegistry;

namespace {

constexpr const char* kEmbedding = "model.embed_tokens.weight";
constexpr const char* kHead = "lm_head.weight";

// One Hugging Face tensor: rows [first_row, first_row + rows) of an engine
// tensor, each `cols` wide (1 for a vector).
struct HfBlock {
  const ParamInfo* param;
  std::string name;
  std::int64_t first_row = 0, rows = 0, cols = 1;
  std::vector<std::int64_t> shape() const {
    return param->global_shape.ndim() == 1 ? std::vector<std::int64_t>{rows} : std::vector<std::int64_t>{rows, cols};
  }
};

std::vector<HfBlock> hf_blocks(const GptConfig& config, const ParamRegistry& registry) {
  ENGINE_CHECK(config.is_llama(), "Hugging Face Llama files hold Llama-family models, not ", config.describe());
  const std::int64_t q = config.n_head * config.head_size(), kv = config.kv_heads() * config.head_size();
  const std::int64_t F = config.ffn_hidden;
  std::vector<HfBlock> out;
  for (const ParamInfo& p : registry.entries()) {
    ENGINE_CHECK(p.shape == p.global_shape, "Hugging Face Llama files need the whole model; '", p.name, "' is a slice");
    const std::int64_t cols = p.global_shape.ndim() > 1 ? p.global_shape[1] : 1;
    const auto add = [&](const std::string& name, std::int64_t first, std::int64_t rows) {
      out.push_back({&p, name, first, rows, cols});
    };
    if (p.name == "wte") {
      add(kEmbedding, 0, config.vocab_size);  // the padded rows are not the model's
      continue;
    }
    if (p.name == "lm_head.weight") {
      add(kHead, 0, config.vocab_size);
      continue;
    }
    if (p.name == "ln_f.weight") {
      add("model.norm.weight", 0, p.global_shape[0]);
      continue;
    }
    // "h.{l}.<suffix>" -> "model.layers.{l}.<Hugging Face's suffix>"
    const std::size_t dot = p.name.find('.', 2);
    ENGINE_CHECK(p.name.starts_with("h.") && dot != std::string::npos, "no Hugging Face name for '", p.name, "'");
    const std::string layer = "model.layers." + p.name.substr(2, dot - 2) + ".";
    const std::string suffix = p.name.substr(dot + 1);
    if (suffix == "attn.qkv.weight" || suffix == "attn.qkv.bias") {
      const std::string kind = suffix.ends_with("weight") ? "weight" : "bias";
      add(layer + "self_attn.q_proj." + kind, 0, q);
      add(layer + "self_attn.k_proj." + kind, q, kv);
      add(layer + "self_attn.v_proj." + kind, q + kv, kv);
    } else if (suffix == "mlp.fc.weight") {
      add(layer + "mlp.gate_proj.weight", 0, F);
      add(layer + "mlp.up_proj.weight", F, F);
    } else {
      static const std::pair<const char*, const char*> kNames[] = {{"ln_1.weight", "input_layernorm.weight"},
                                                                   {"attn.proj.weight", "self_attn.o_proj.weight"},
                                                                   {"ln_2.weight", "post_attention_layernorm.weight"},
                                                                   {"mlp.proj.weight", "mlp.down_proj.weight"}};
      const auto* named = std::find_if(std::begin(kNames), std::end(kNames),
                                       [&](const auto& n) { return suffix == n.first; });
      ENGINE_CHECK(named != std::end(kNames), "no Hugging Face name for '", p.name, "'");
      add(layer + named->second, 0, p.global_shape[0]);
    }
  }
  return out;
}

// Checks everything check_hf_llama promises, before a byte of a tensor is
// copied into the model.
void check_file(const SafetensorsShards& file, const GptConfig& expected, const std::vector<HfBlock>& blocks) {
  const std::string run = "this run's model (" + expected.describe() + ")";
  const std::filesystem::path config_path = std::filesystem::path(file.path()).parent_path() / "config.json";
  const nlohmann::json config = read_hf_config(config_path.string());
  if (config.is_object()) {
    const GptConfig found = hf_llama_config(config, "model file '" + file.path() + "'");
    const std::string difference = hf_config_difference(found, expected);
    ENGINE_CHECK(difference.empty(), "model file '", file.path(),
                 "' holds a model of another shape: its config.json has ", difference);
  }
  if (!file.contains(kEmbedding)) {
    const bool gpt2 = file.contains("transformer.wte.weight") || file.contains("wte.weight");
    ENGINE_FAIL("model file '", file.path(), "' is not a Llama-family checkpoint: it has no tensor '", kEmbedding, "'",
                gpt2 ? " (its wte.weight is a GPT-2 model's)" : "");
  }
  std::vector<HfExpectedTensor> tensors;
  for (const HfBlock& b : blocks) tensors.push_back({b.name, b.shape()});
  check_hf_tensors(file, tensors, [&](const std::string& name) {
    // Buffers older exports saved, and the tied copy checked below.
    return name.ends_with(".self_attn.rotary_emb.inv_freq") || (expected.tied_embeddings && name == kHead);
  }, run);
  if (expected.tied_embeddings)
    check_tied_copy(file, kHead, kEmbedding, "an untied output head, but the model is tied (tie_word_embeddings true)");
}

}  // namespace

void write_hf_llama(const std::string& dir, const GptConfig& config, const ParamRegistry& registry, const float* master,
                    SafetensorsDType dtype, const HfTokenizer& tokenizer) {
  nlohmann::ordered_json c = hf_llama_config_json(config, dtype);
  // The tokenizer first: a problem with it leaves no half-written folder.
  const HfTokenizerFiles tokenizer_files = read_hf_tokenizer(tokenizer, config, std::nullopt);
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsOutput> outputs;
  for (const HfBlock& b : hf_blocks(config, registry)) {
    const float* src = master + b.param->offset + b.first_row * b.cols;
    const std::int64_t n = b.rows * b.cols;
    outputs.push_back({b.name, b.shape(), [src, n](float* out) { std::copy(src, src + n, out); }});
  }
  write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), outputs, dtype, {{"format", "pt"}});
  // <|endoftext|>'s id in the run's tokenizer begins and ends documents;
  // without it null (LlamaConfig's defaults, 1 and 2, would be ids of this
  // vocabulary that mean nothing in particular).
  c["bos_token_id"] = tokenizer_files.bos_id();
  c["eos_token_id"] = tokenizer_files.eos_id();
  write_hf_json(std::filesystem::path(dir) / "config.json", c);
  write_hf_tokenizer_files(dir, config, tokenizer_files);
}

// (Function-try-blocks: a message may quote the folder's tensor names and
// config.json's bytes, which must print on one line as valid UTF-8.)
void check_hf_llama(const std::string& path, const GptConfig& expected) try {
  const SafetensorsShards file(hf_safetensors_file(path));
  check_file(file, expected, hf_blocks(expected, model::build_gpt_registry(expected)));
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

void read_hf_llama(const std::string& path, const GptConfig& expected, const ParamRegistry& registry,
                   float* master) try {
  const SafetensorsShards file(hf_safetensors_file(path));
  const std::vector<HfBlock> blocks = hf_blocks(expected, registry);
  check_file(file, expected, blocks);
  std::vector<float> values;
  for (const HfBlock& b : blocks) {
    read_hf_tensor(file, b.name, values);
    float* param = master + b.param->offset;
    std::copy(values.begin(), values.end(), param + b.first_row * b.cols);
    if (b.param->name == "wte" || b.param->name == "lm_head.weight")  // the padded rows
      std::fill(param + b.rows * b.cols, param + b.param->numel(), 0.0f);
  }
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

}  // namespace launch
