#include "launch/formats/hf_gpt2.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/files/untrusted_json.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/safetensors_shards.h"
#include "launch/formats/untrusted_files.h"
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
  std::string name;                // without the "transformer." prefix
  std::vector<std::int64_t> shape;  // Hugging Face's shape
  bool transpose = false;           // Conv1D (in, out) of a Linear (out, in)
  std::int64_t rows = 0;            // rows kept (wte: the real vocabulary)
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
  std::vector<HfTensor> out;
  for (const ParamInfo& p : registry.entries()) {
    ENGINE_CHECK(p.shape == p.global_shape, "Hugging Face GPT-2 files need the whole model; '", p.name, "' is a slice");
    HfTensor t{&p, hf_name(p.name), {}, false, p.global_shape[0]};
    if (p.name == "wte") {
      t.rows = config.vocab_size;
      t.shape = {config.vocab_size, p.global_shape[1]};
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

// Buffers and tied copies a GPT-2 checkpoint may hold that are not parameters.
bool ignored(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name == "lm_head.weight";
}

// "transformer." or "", whichever the file uses.
std::string file_prefix(const SafetensorsShards& file) {
  if (file.contains(std::string(kPrefix) + "wte.weight")) return kPrefix;
  ENGINE_CHECK(file.contains("wte.weight"), "model file '", file.path(),
               "' is not a GPT-2 checkpoint: it has neither 'transformer.wte.weight' nor 'wte.weight'");
  return "";
}

// GPT-2's end-of-text token (as launch/data/bpe_tokenizer.h's kEndOfText,
// a folder this one may not include).
constexpr const char* kEndOfText = "<|endoftext|>";

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& value) {
  AtomicFile file(path.string());
  file.write(value.dump(2) + "\n");
  file.commit();
}

// A config.json, if it exists (else null).
nlohmann::json read_config(const std::filesystem::path& config) {
  if (!std::filesystem::exists(config)) return nullptr;
  const std::string not_regular = regular_file_problem(config);  // a FIFO would block the read
  ENGINE_CHECK(not_regular.empty(), "'", config.string(), "' beside the model ", not_regular);
  std::string what = "'";  // appended, not `"'" + ...`: GCC 12 warns falsely (-Wrestrict) on that form
  what += config.string();
  what += "' beside the model";
  try {
    return nlohmann::json::parse(read_json_file(config.string(), what, kMaxConfigJsonBytes));
  } catch (const nlohmann::json::exception& e) {
    ENGINE_CHECK(false, "'", config.string(), "' beside the model is not valid JSON (", e.what(), ")");
  }
  return nullptr;
}

// config.json beside the safetensors file, if any.
nlohmann::json sibling_config(const std::string& safetensors_path) {
  return read_config(std::filesystem::path(safetensors_path).parent_path() / "config.json");
}

// GPT2Config fields that change what the model computes. Each one the engine
// computes as GPT-2 does is accepted at GPT-2's value and refused at any
// other, naming it, rather than loaded and silently computed differently.
void check_supported_fields(const nlohmann::json& config, const std::string& path) {
  const auto refuse = [&](const char* key, const std::string& why) {
    ENGINE_CHECK(false, "model file '", path, "': its config.json has ", key, " ", json_excerpt(config[key]), ", ",
                 why);
  };
  if (config.contains("model_type") && !(config["model_type"].is_string() && config["model_type"] == "gpt2"))
    refuse("model_type", "and this engine loads GPT-2 models only (\"gpt2\")");
  if (config.contains("activation_function")) {
    const nlohmann::json& f = config["activation_function"];
    // GPT-2's tanh approximation (Hendrycks & Gimpel 2016), as the engine computes it.
    if (!(f.is_string() && (f == "gelu_new" || f == "gelu_pytorch_tanh")))
      refuse("activation_function", "but the engine's MLP computes the tanh-approximated GELU (\"gelu_new\") only");
  }
  if (config.contains("layer_norm_epsilon")) {
    const nlohmann::json& e = config["layer_norm_epsilon"];
    if (!(e.is_number() && std::abs(e.get<double>() - 1e-5) <= 1e-12))
      refuse("layer_norm_epsilon", "but the engine's layer norms use GPT-2's 1e-5");
  }
  const auto refuse_unless = [&](const char* key, bool gpt2_value, const char* what) {
    if (config.contains(key) && !(config[key].is_boolean() && config[key].get<bool>() == gpt2_value))
      refuse(key, std::string("but the engine ") + what);
  };
  refuse_unless("tie_word_embeddings", true, "ties the output head to the token embedding (wte)");
  refuse_unless("scale_attn_weights", true, "scales attention scores by 1/sqrt(head size), as GPT-2 does");
  refuse_unless("scale_attn_by_inverse_layer_idx", false, "does not scale attention by 1/(layer index + 1)");
  refuse_unless("add_cross_attention", false, "has no cross-attention");
}

// An lm_head.weight in the file must be wte itself (a tied copy, as some
// exports write it): an untied head would be dropped, and the model loaded
// would compute other logits (measured: loss off by 2.3e-2).
void check_head_is_tied(const SafetensorsShards& file, const std::string& prefix) {
  if (!file.contains("lm_head.weight")) return;
  const std::string wte = prefix + "wte.weight";
  const SafetensorsEntry& head = file.entry("lm_head.weight");
  ENGINE_CHECK(head.shape == file.entry(wte).shape, "model file '", file.path(), "': its lm_head.weight ",
               format_shape(head.shape), " is not the shape of ", wte, " ", format_shape(file.entry(wte).shape),
               ": an untied output head, which the engine (tied to wte) cannot load");
  std::int64_t n = 1;
  for (const std::int64_t d : head.shape) n *= d;
  std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
  file.read_f32("lm_head.weight", a.data());
  file.read_f32(wte, b.data());
  ENGINE_CHECK(a == b, "model file '", file.path(), "': its lm_head.weight differs from ", wte,
               ": an untied output head, which the engine (tied to wte) cannot load");
}

void check_file(const SafetensorsShards& file, const GptConfig& expected, const std::vector<HfTensor>& tensors) {
  const std::string prefix = file_prefix(file);
  const std::string run = "this run's model (" + expected.describe() + ")";
  std::set<std::string> known;
  for (const HfTensor& t : tensors) {
    const std::string name = prefix + t.name;
    known.insert(name);
    ENGINE_CHECK(file.contains(name), "model file '", file.path(), "' holds a model of another shape: it has no tensor '", name,
                 "', which ", run, " needs");
    const SafetensorsEntry& e = file.entry(name);
    ENGINE_CHECK(e.shape == t.shape, "model file '", file.path(), "' holds a model of another shape: tensor '", name, "' is ",
                 format_shape(e.shape), ", ", run, " needs ", format_shape(t.shape));
  }
  for (const auto& [name, entry] : file.entries()) {
    const std::string bare = name.rfind(kPrefix, 0) == 0 ? name.substr(std::string(kPrefix).size()) : name;
    ENGINE_CHECK(known.count(name) || ignored(bare),
                 "model file '", file.path(), "' holds a model of another shape: tensor '", name, "' ",
                 format_shape(entry.shape), " is not part of ", run);
  }
  check_head_is_tied(file, prefix);
  const nlohmann::json config = sibling_config(file.path());
  if (!config.is_object()) return;
  check_supported_fields(config, file.path());
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

SafetensorsDType parse_hf_dtype(const std::string& name) {
  if (name == "fp32") return SafetensorsDType::kF32;
  if (name == "bf16") return SafetensorsDType::kBF16;
  ENGINE_CHECK(false, "--save-hf-dtype '", name, "': expected fp32 or bf16");
  return SafetensorsDType::kF32;
}

bool is_hf_model_path(const std::string& path) {
  return std::filesystem::is_directory(path) || path.ends_with(".safetensors") || path.ends_with(".safetensors.index.json");
}

std::string hf_safetensors_file(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  // transformers' order: the single file first, else the sharded index.
  const std::filesystem::path folder(path);
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"})
    if (std::filesystem::exists(folder / name)) return (folder / name).string();
  ENGINE_CHECK(false, "model folder '", path, "' has no model.safetensors nor model.safetensors.index.json");
  return "";
}

void write_hf_gpt2(const std::string& dir, const GptConfig& config, const ParamRegistry& registry, const float* master,
                   SafetensorsDType dtype, const HfTokenizer& tokenizer) {
  // The tokenizer first: a problem with it leaves no half-written folder.
  std::optional<std::int64_t> end_of_text = tokenizer.end_of_text;
  if (tokenizer.tokenizer_json.empty() && config.vocab_size == 50257) end_of_text = 50256;
  ENGINE_CHECK(!end_of_text || (*end_of_text >= 0 && *end_of_text < config.vocab_size), "--save-hf: the tokenizer's ",
               kEndOfText, " id ", end_of_text.value_or(0), " is outside the model's vocabulary of ", config.vocab_size);
  std::string tokenizer_bytes;
  if (!tokenizer.tokenizer_json.empty()) {
    const std::string not_regular = regular_file_problem(tokenizer.tokenizer_json);
    ENGINE_CHECK(not_regular.empty(), "--save-hf: the tokenizer '", tokenizer.tokenizer_json, "' ", not_regular);
    std::ifstream in(tokenizer.tokenizer_json, std::ios::binary);
    ENGINE_CHECK(in.good(), "--save-hf: cannot read the tokenizer '", tokenizer.tokenizer_json, "'");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    ENGINE_CHECK(!in.bad(), "--save-hf: error reading the tokenizer '", tokenizer.tokenizer_json, "'");
    tokenizer_bytes = bytes.str();
  }
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsOutput> outputs;
  for (const HfTensor& t : hf_tensors(config, registry)) {
    const float* src = master + t.param->offset;
    const std::int64_t rows = t.param->global_shape[0];
    const std::int64_t cols = t.param->global_shape.ndim() > 1 ? t.param->global_shape[1] : 1;
    outputs.push_back({kPrefix + t.name, t.shape, [src, rows, cols, t](float* out) {
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
  // without it, eps and the tanh GELU ("gelu_new") as the engine computes.
  nlohmann::ordered_json c = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", 1e-5},
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
      {"tie_word_embeddings", true},
      {"torch_dtype", dtype == SafetensorsDType::kBF16 ? "bfloat16" : "float32"},
      {"use_cache", true},
      {"vocab_size", config.vocab_size}};
  // <|endoftext|> begins and ends documents: its id in the run's tokenizer;
  // without one, GPT-2's 50256 when the vocabulary is GPT-2's. Else null,
  // which GPT2Config would otherwise default to 50256, an id outside the
  // vocabulary (transformers warns on loading, and generate() would wait for
  // a token that cannot come).
  const nlohmann::ordered_json id = end_of_text ? nlohmann::ordered_json(*end_of_text) : nlohmann::ordered_json(nullptr);
  c["bos_token_id"] = id;
  c["eos_token_id"] = id;
  const std::filesystem::path folder(dir);
  write_json(folder / "config.json", c);
  // What generate() starts from and stops at (GenerationConfig).
  write_json(folder / "generation_config.json", nlohmann::ordered_json{{"bos_token_id", id}, {"eos_token_id", id}});
  if (tokenizer.tokenizer_json.empty()) {
    // Not another run's tokenizer beside this model.
    for (const char* stale : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::remove(folder / stale);
    return;
  }

  // The run's tokenizer.json as it is, and what AutoTokenizer reads beside
  // it: the generic fast tokenizer (it takes tokenizer.json as written,
  // add_prefix_space included, where GPT2Tokenizer would re-set it from its
  // own arguments), the special tokens, the longest input the model takes.
  AtomicFile copy((folder / "tokenizer.json").string());
  copy.write(tokenizer_bytes);
  copy.commit();
  const nlohmann::ordered_json special =
      end_of_text ? nlohmann::ordered_json(kEndOfText) : nlohmann::ordered_json(nullptr);
  write_json(folder / "tokenizer_config.json", nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                                      {"bos_token", special},
                                                                      {"eos_token", special},
                                                                      {"unk_token", nullptr},
                                                                      {"pad_token", nullptr},
                                                                      {"model_max_length", config.max_seq_len},
                                                                      {"clean_up_tokenization_spaces", false}});
}

std::string hf_config_path(const std::string& path) {
  if (std::filesystem::is_directory(path)) return (std::filesystem::path(path) / "config.json").string();
  return (std::filesystem::path(path).parent_path() / "config.json").string();
}

std::optional<GptConfig> read_hf_config_shape(const std::string& path) try {
  if (!is_hf_model_path(path)) return std::nullopt;
  const nlohmann::json config = read_config(hf_config_path(path));
  if (!config.is_object()) return std::nullopt;
  for (const char* key : {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"}) {
    if (!config.contains(key)) return std::nullopt;
    ENGINE_CHECK(json_integer(config[key], 1, std::numeric_limits<std::int64_t>::max()), "--init-from '", path,
                 "': its config.json has ", key, " ", json_excerpt(config[key]), ", expected a positive integer");
  }
  GptConfig shape;
  shape.n_layer = config["n_layer"].get<std::int64_t>();
  shape.n_head = config["n_head"].get<std::int64_t>();
  shape.n_embd = config["n_embd"].get<std::int64_t>();
  shape.max_seq_len = config["n_positions"].get<std::int64_t>();
  shape.vocab_size = config["vocab_size"].get<std::int64_t>();
  return shape;
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
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
    const std::string name = prefix + t.name;
    values.resize(static_cast<std::size_t>(file.entry(name).numel()));
    file.read_f32(name, values.data());
    for (std::size_t i = 0; i < values.size(); ++i)
      ENGINE_CHECK(std::isfinite(values[i]), "model file '", file.path(), "': tensor '", name, "' holds ", values[i],
                   " at element ", i);
    float* dst = master + t.param->offset;
    const std::int64_t rows = t.param->global_shape[0];
    const std::int64_t cols = t.param->global_shape.ndim() > 1 ? t.param->global_shape[1] : 1;
    if (!t.transpose) {
      std::copy(values.begin(), values.end(), dst);
      std::fill(dst + t.rows * cols, dst + rows * cols, 0.0f);  // wte's padded rows
      continue;
    }
    for (std::int64_t r = 0; r < rows; ++r)  // (in, out) -> (out, in)
      for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] = values[static_cast<std::size_t>(c * rows + r)];
  }
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

void check_init_model(const std::string& path, const GptConfig& expected) {
  if (is_hf_model_path(path)) {
    check_hf_gpt2(path, expected);
    return;
  }
  const GptConfig found = read_llmc_config(path);
  ENGINE_CHECK(found == expected, "model file '", path, "' holds a model of another shape: ", found.describe(),
               "; this run's model is ", expected.describe());
}

void read_init_model(const std::string& path, const GptConfig& expected, const ParamRegistry& registry, float* master) {
  if (is_hf_model_path(path)) read_hf_gpt2(path, expected, registry, master);
  else read_llmc_model(path, expected, registry, master);
}

}  // namespace launch
