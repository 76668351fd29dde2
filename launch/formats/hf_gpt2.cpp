#include "launch/formats/hf_gpt2.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/formats/safetensors_shards.h"
#include "launch/formats/untrusted_values.h"
#include "model/gpt_params.h"

namespace launch {

using model::GptConfig;
using model::ParamInfo;
using model::ParamRegistry;

namespace {

constexpr const char* kPrefix = "transformer.";

// One engine tensor as Hugging Face names and lays it out.
struct HfTensor {
  const ParamInfo* param;
  std::string name;                // without the file's prefix ("transformer.") where it has one
  bool prefixed = true;            // false: lm_head.weight, outside GPT2LMHeadModel's transformer
  std::vector<std::int64_t> shape;  // Hugging Face's shape
  bool transpose = false;           // Conv1D (in, out) of a Linear (out, in)
  std::int64_t rows = 0;            // rows kept (wte: the real vocabulary)
  // Its name in a file whose transformer tensors carry `prefix`.
  std::string name_in(const std::string& prefix) const { return (prefixed ? prefix : std::string()) + name; }
};

std::string hf_name(const std::string& engine_name) {
  if (engine_name == "wte" || engine_name == "wpe") return engine_name + ".weight";
  static const std::pair<const char*, const char*> kRenames[] = {
      {"attn.qkv.", "attn.c_attn."}, {"attn.proj.", "attn.c_proj."}, {"mlp.fc.", "mlp.c_fc."}, {"mlp.proj.", "mlp.c_proj."}};
  std::string name = engine_name;
  for (const auto& [from, to] : kRenames)
    if (const auto at = name.find(from); at != std::string::npos) return name.replace(at, std::string(from).size(), to);
  return name;  // h.{l}.ln_1.*, h.{l}.ln_2.*, ln_f.*: the same names
}

std::vector<HfTensor> hf_tensors(const GptConfig& config, const ParamRegistry& registry) {
  ENGINE_CHECK(!config.is_llama(), "Hugging Face GPT-2 files hold GPT-2 models, not ", config.describe());
  std::vector<HfTensor> out;
  for (const ParamInfo& p : registry.entries()) {
    ENGINE_CHECK(p.shape == p.global_shape, "Hugging Face GPT-2 files need the whole model; '", p.name, "' is a slice");
    HfTensor t{&p, hf_name(p.name), true, {}, false, p.global_shape[0]};
    if (p.name == "wte" || p.name == "lm_head.weight") {  // (Vp, C) in the engine, (V, C) in the file
      t.rows = config.vocab_size;
      t.shape = {config.vocab_size, p.global_shape[1]};
      t.prefixed = p.name == "wte";
    } else if (p.name == "wpe" || p.global_shape.ndim() == 1) {
      for (int d = 0; d < p.global_shape.ndim(); ++d) t.shape.push_back(p.global_shape[d]);
    } else {
      t.transpose = true;
      t.shape = {p.global_shape[1], p.global_shape[0]};
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Buffers (and, for a tied model, the head's copy of wte) that a GPT-2
// checkpoint may hold and that are not parameters of the model.
bool ignored(const std::string& name, bool tied) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || (tied && name == "lm_head.weight");
}

// "transformer." or "", whichever the file uses.
std::string file_prefix(const SafetensorsShards& file) {
  if (file.contains(std::string(kPrefix) + "wte.weight")) return kPrefix;
  ENGINE_CHECK(file.contains("wte.weight"), "model file '", file.path(),
               "' is not a GPT-2 checkpoint: it has neither 'transformer.wte.weight' nor 'wte.weight'",
               file.contains("model.embed_tokens.weight")
                   ? " (its model.embed_tokens.weight is a Llama-family model's: without --model, a folder's "
                     "config.json gives the architecture)"
                   : "");
  return "";
}

// GPT2Config's layer_norm_epsilon (its default 1e-5 when absent or null): a
// positive finite number, or refused naming it.
double gpt2_layer_norm_epsilon(const nlohmann::json& config, const std::string& source) {
  if (!config.contains("layer_norm_epsilon") || config["layer_norm_epsilon"].is_null()) return GptConfig::kGpt2NormEps;
  const nlohmann::json& e = config["layer_norm_epsilon"];
  ENGINE_CHECK(e.is_number() && std::isfinite(e.get<double>()) && e.get<double>() > 0, source,
               ": its config.json has layer_norm_epsilon ", json_excerpt(e), ", expected a positive number");
  return e.get<double>();
}

// PretrainedConfig's tie_word_embeddings (default true when absent or null).
bool gpt2_tied_embeddings(const nlohmann::json& config, const std::string& source) {
  if (!config.contains("tie_word_embeddings") || config["tie_word_embeddings"].is_null()) return true;
  const nlohmann::json& t = config["tie_word_embeddings"];
  ENGINE_CHECK(t.is_boolean(), source, ": its config.json has tie_word_embeddings ", json_excerpt(t),
               ", expected true or false");
  return t.get<bool>();
}

// config.json beside the safetensors file, if any.
nlohmann::json sibling_config(const std::string& safetensors_path) {
  return read_hf_config((std::filesystem::path(safetensors_path).parent_path() / "config.json").string());
}

// GPT2Config fields that change what the model computes. layer_norm_epsilon
// and tie_word_embeddings are the run's own (GptConfig::norm_eps and
// tied_embeddings, taken from this file when the run's shape is): each must
// be what the run computes. Every other one the engine computes as GPT-2
// does is accepted at GPT-2's value and refused at any other, naming it,
// rather than loaded and silently computed differently.
void check_supported_fields(const nlohmann::json& config, const std::string& path, const GptConfig& expected) {
  const auto refuse = [&](const char* key, const std::string& why) {
    ENGINE_CHECK(false, "model file '", path, "': its config.json has ", key, " ", json_excerpt(config[key]), ", ",
                 why);
  };
  if (config.contains("model_type") && !(config["model_type"].is_string() && config["model_type"] == "gpt2"))
    refuse("model_type", "but this run's model is GPT-2 (\"gpt2\"; a Llama-family folder gives its shape "
                         "when --model is left out)");
  if (config.contains("activation_function")) {
    const nlohmann::json& f = config["activation_function"];
    // GPT-2's tanh approximation (Hendrycks & Gimpel 2016), as the engine computes it.
    if (!(f.is_string() && (f == "gelu_new" || f == "gelu_pytorch_tanh")))
      refuse("activation_function", "but the engine's MLP computes the tanh-approximated GELU (\"gelu_new\") only");
  }
  // (Absent, each is GPT2Config's default; a message says which it was.)
  const auto stated = [&](const char* key, const std::string& fallback) {
    return config.contains(key) && !config[key].is_null() ? json_excerpt(config[key]) : fallback + " (by default)";
  };
  const std::string source = "model file '" + path + "'";
  const double eps = gpt2_layer_norm_epsilon(config, source);
  ENGINE_CHECK(eps == expected.norm_eps, "model file '", path, "': its config.json has layer_norm_epsilon ",
               stated("layer_norm_epsilon", "1e-05"), ", but this run's model normalises with eps ", expected.norm_eps);
  const bool tied = gpt2_tied_embeddings(config, source);
  ENGINE_CHECK(tied == expected.tied_embeddings, "model file '", path, "': its config.json has tie_word_embeddings ",
               stated("tie_word_embeddings", "true"), ", but this run's model ",
               expected.tied_embeddings ? "ties its output head to the token embedding (wte)"
                                        : "has an untied output head (lm_head.weight)");
  const auto refuse_unless = [&](const char* key, bool gpt2_value, const char* what) {
    if (config.contains(key) && !(config[key].is_boolean() && config[key].get<bool>() == gpt2_value))
      refuse(key, std::string("but the engine ") + what);
  };
  refuse_unless("scale_attn_weights", true, "scales attention scores by 1/sqrt(head size), as GPT-2 does");
  refuse_unless("scale_attn_by_inverse_layer_idx", false, "does not scale attention by 1/(layer index + 1)");
  refuse_unless("add_cross_attention", false, "has no cross-attention");
}

void check_file(const SafetensorsShards& file, const GptConfig& expected, const std::vector<HfTensor>& tensors) {
  // config.json first: a folder of another architecture is named as such.
  const nlohmann::json config = sibling_config(file.path());
  if (config.is_object()) check_supported_fields(config, file.path(), expected);
  const std::string prefix = file_prefix(file);
  const std::string run = "this run's model (" + expected.describe() + ")";
  std::vector<HfExpectedTensor> expected_tensors;
  for (const HfTensor& t : tensors) expected_tensors.push_back({t.name_in(prefix), t.shape});
  const bool tied = expected.tied_embeddings;
  check_hf_tensors(file, expected_tensors, [tied](const std::string& name) {
    return ignored(name.rfind(kPrefix, 0) == 0 ? name.substr(std::string(kPrefix).size()) : name, tied);
  }, run);
  // For a tied model, an lm_head.weight in the file must be wte itself (a
  // tied copy, as some exports write it): a different head would be dropped,
  // and the model loaded would compute other logits (measured: loss off by
  // 2.3e-2). Such a folder says tie_word_embeddings false, and loads untied.
  if (tied)
    check_tied_copy(file, "lm_head.weight", prefix + "wte.weight",
                    "an untied output head, which this run's model (tied to wte) would drop (its config.json "
                    "should say tie_word_embeddings false; the engine then loads it untied)");
  if (!config.is_object()) return;
  // GPT2Config's sizes: positive integers, or a float (12.0), a string, 2^63
  // or -1 would be read as some other number.
  for (const char* key : {"n_head", "n_layer", "n_embd", "n_positions", "n_ctx", "vocab_size"})
    ENGINE_CHECK(!config.contains(key) || json_integer(config[key], 1, std::numeric_limits<std::int64_t>::max()),
                 "model file '", file.path(), "': its config.json has ", key, " ", json_excerpt(config[key]),
                 ", expected a positive integer");
  if (config.contains("n_head"))
    ENGINE_CHECK(config["n_head"].get<std::int64_t>() == expected.n_head, "model file '", file.path(),
                 "' holds a model of another shape: its config.json has n_head ", config["n_head"].get<std::int64_t>(),
                 ", ", run, " has ", expected.n_head);
}

}  // namespace

void write_hf_gpt2(const std::string& dir, const GptConfig& config, const ParamRegistry& registry, const float* master,
                   SafetensorsDType dtype, const HfTokenizer& tokenizer) {
  // The tokenizer first: a problem with it leaves no half-written folder.
  // Without one, GPT-2's vocabulary keeps GPT-2's <|endoftext|>, 50256.
  const HfTokenizerFiles tokenizer_files =
      read_hf_tokenizer(tokenizer, config, config.vocab_size == 50257 ? std::optional<std::int64_t>(50256) : std::nullopt);
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsOutput> outputs;
  for (const HfTensor& t : hf_tensors(config, registry)) {
    const float* src = master + t.param->offset;
    const std::int64_t rows = t.param->global_shape[0];
    const std::int64_t cols = t.param->global_shape.ndim() > 1 ? t.param->global_shape[1] : 1;
    outputs.push_back({t.name_in(kPrefix), t.shape, [src, rows, cols, t](float* out) {
                         if (!t.transpose) {
                           std::copy(src, src + t.rows * cols, out);
                           return;
                         }
                         for (std::int64_t r = 0; r < rows; ++r)  // (out, in) -> (in, out)
                           for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = src[r * cols + c];
                       }});
  }
  write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), outputs, dtype, {{"format", "pt"}});

  // What transformers' GPT2Config needs; dropout 0 as the engine trains
  // without it, the tanh GELU ("gelu_new"), eps and the head as the model
  // computes.
  nlohmann::ordered_json c = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", config.norm_eps},
      {"model_type", "gpt2"},
      {"n_ctx", config.max_seq_len},
      {"n_embd", config.n_embd},
      {"n_head", config.n_head},
      {"n_inner", nullptr},
      {"n_layer", config.n_layer},
      {"n_positions", config.max_seq_len},
      {"resid_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"summary_first_dropout", 0.0},
      {"tie_word_embeddings", config.tied_embeddings},
      {"torch_dtype", dtype == SafetensorsDType::kBF16 ? "bfloat16" : "float32"},
      {"use_cache", true},
      {"vocab_size", config.vocab_size}};
  // <|endoftext|> begins and ends documents: its id in the run's tokenizer;
  // without one, GPT-2's 50256 when the vocabulary is GPT-2's. Else null,
  // which GPT2Config would otherwise default to 50256, an id outside the
  // vocabulary (transformers warns on loading, and generate() would wait for
  // a token that cannot come).
  c["bos_token_id"] = tokenizer_files.bos_id();
  c["eos_token_id"] = tokenizer_files.eos_id();
  write_hf_json(std::filesystem::path(dir) / "config.json", c);
  write_hf_tokenizer_files(dir, config, tokenizer_files);
}

std::optional<GptConfig> hf_gpt2_config(const nlohmann::json& config, const std::string& source) {
  for (const char* key : {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"}) {
    if (!config.contains(key)) return std::nullopt;
    ENGINE_CHECK(json_integer(config[key], 1, std::numeric_limits<std::int64_t>::max()), source,
                 ": its config.json has ", key, " ", json_excerpt(config[key]), ", expected a positive integer");
  }
  GptConfig shape;
  shape.n_layer = config["n_layer"].get<std::int64_t>();
  shape.n_head = config["n_head"].get<std::int64_t>();
  shape.n_embd = config["n_embd"].get<std::int64_t>();
  shape.max_seq_len = config["n_positions"].get<std::int64_t>();
  shape.vocab_size = config["vocab_size"].get<std::int64_t>();
  shape.norm_eps = gpt2_layer_norm_epsilon(config, source);
  shape.tied_embeddings = gpt2_tied_embeddings(config, source);
  return shape;
}

// (Function-try-blocks: a message may quote the folder's tensor names and
// config.json's bytes, which must print on one line as valid UTF-8.)
void check_hf_gpt2(const std::string& path, const GptConfig& expected) try {
  const SafetensorsShards file(hf_safetensors_file(path));
  check_file(file, expected, hf_tensors(expected, model::build_gpt_registry(expected)));
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

void read_hf_gpt2(const std::string& path, const GptConfig& expected, const ParamRegistry& registry, float* master) try {
  const SafetensorsShards file(hf_safetensors_file(path));
  const std::vector<HfTensor> tensors = hf_tensors(expected, registry);
  check_file(file, expected, tensors);
  const std::string prefix = file_prefix(file);
  std::vector<float> values;
  for (const HfTensor& t : tensors) {
    const std::string name = t.name_in(prefix);
    read_hf_tensor(file, name, values);
    float* dst = master + t.param->offset;
    const std::int64_t rows = t.param->global_shape[0];
    const std::int64_t cols = t.param->global_shape.ndim() > 1 ? t.param->global_shape[1] : 1;
    if (!t.transpose) {
      std::copy(values.begin(), values.end(), dst);
      std::fill(dst + t.rows * cols, dst + rows * cols, 0.0f);  // wte's (and lm_head's) padded rows
      continue;
    }
    for (std::int64_t r = 0; r < rows; ++r)  // (in, out) -> (out, in)
      for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] = values[static_cast<std::size_t>(c * rows + r)];
  }
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

}  // namespace launch
