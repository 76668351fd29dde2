#include "launch/formats/hf_folder.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/files/untrusted_json.h"
#include "launch/formats/untrusted_files.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

using model::GptConfig;

namespace {

// GPT-2's end-of-text token (as launch/data/bpe_tokenizer.h's kEndOfText,
// a folder this one may not include).
constexpr const char* kEndOfText = "<|endoftext|>";

// config.json's model_type for a model.
const char* model_type(const GptConfig& c) { return !c.is_llama() ? "gpt2" : c.qkv_bias ? "qwen2" : "llama"; }

template <typename T>
std::string text(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string rope_scaling_text(const model::RopeScaling& s) {
  if (!s.enabled()) return "null";
  return "llama3(factor " + text(s.factor) + ", low_freq_factor " + text(s.low_freq_factor) + ", high_freq_factor " +
         text(s.high_freq_factor) + ", original_max_position_embeddings " + text(s.original_max_position) + ")";
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

std::string hf_config_path(const std::string& path) {
  if (std::filesystem::is_directory(path)) return (std::filesystem::path(path) / "config.json").string();
  return (std::filesystem::path(path).parent_path() / "config.json").string();
}

nlohmann::json read_hf_config(const std::string& config_path) {
  const std::filesystem::path config(config_path);
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

std::string hf_config_difference(const GptConfig& file, const GptConfig& run) {
  // (config.json's name, the file's value, the run's value), in the order a
  // reader would look for the cause.
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> fields;
  const auto add = [&](const char* name, const std::string& a, const std::string& b) {
    fields.push_back({name, {a, b}});
  };
  add("model_type", std::string("\"") + model_type(file) + "\"", std::string("\"") + model_type(run) + "\"");
  const bool llama = file.is_llama() && run.is_llama();
  add(llama ? "num_hidden_layers" : "n_layer", text(file.n_layer), text(run.n_layer));
  add(llama ? "num_attention_heads" : "n_head", text(file.n_head), text(run.n_head));
  add(llama ? "hidden_size" : "n_embd", text(file.n_embd), text(run.n_embd));
  add("vocab_size", text(file.vocab_size), text(run.vocab_size));
  add(llama ? "max_position_embeddings" : "n_positions", text(file.max_seq_len), text(run.max_seq_len));
  if (llama) {
    add("num_key_value_heads", text(file.kv_heads()), text(run.kv_heads()));
    add("intermediate_size", text(file.ffn_hidden), text(run.ffn_hidden));
    add("tie_word_embeddings", file.tied_embeddings ? "true" : "false", run.tied_embeddings ? "true" : "false");
    add("rms_norm_eps", text(file.norm_eps), text(run.norm_eps));
    add("rope_theta", text(file.rope_theta), text(run.rope_theta));
    add("rope_scaling", rope_scaling_text(file.rope_scaling), rope_scaling_text(run.rope_scaling));
  } else if (!file.is_llama() && !run.is_llama()) {
    add("tie_word_embeddings", file.tied_embeddings ? "true" : "false", run.tied_embeddings ? "true" : "false");
    add("layer_norm_epsilon", text(file.norm_eps), text(run.norm_eps));
  }
  for (const auto& [name, values] : fields)
    if (values.first != values.second) return name + " " + values.first + ", this run's model has " + values.second;
  // Equal as printed, different in the last digits of a float.
  if (!(file == run))
    return llama ? "rms_norm_eps, rope_theta or rope_scaling (beyond the digits printed)"
                 : "layer_norm_epsilon (beyond the digits printed)";
  return "";
}

void check_hf_tensors(const SafetensorsShards& file, const std::vector<HfExpectedTensor>& expected,
                      const std::function<bool(const std::string&)>& ignored, const std::string& run) {
  std::set<std::string> known;
  for (const HfExpectedTensor& t : expected) {
    known.insert(t.name);
    ENGINE_CHECK(file.contains(t.name), "model file '", file.path(),
                 "' holds a model of another shape: it has no tensor '", t.name, "', which ", run, " needs");
    const SafetensorsEntry& e = file.entry(t.name);
    ENGINE_CHECK(e.shape == t.shape, "model file '", file.path(), "' holds a model of another shape: tensor '", t.name,
                 "' is ", format_shape(e.shape), ", ", run, " needs ", format_shape(t.shape));
  }
  for (const auto& [name, entry] : file.entries())
    ENGINE_CHECK(known.count(name) || ignored(name), "model file '", file.path(),
                 "' holds a model of another shape: tensor '", name, "' ", format_shape(entry.shape),
                 " is not part of ", run);
}

void check_tied_copy(const SafetensorsShards& file, const std::string& head, const std::string& embedding,
                     const std::string& why) {
  if (!file.contains(head)) return;
  const SafetensorsEntry& h = file.entry(head);
  const SafetensorsEntry& e = file.entry(embedding);
  ENGINE_CHECK(h.shape == e.shape, "model file '", file.path(), "': its ", head, " ", format_shape(h.shape),
               " is not the shape of ", embedding, " ", format_shape(e.shape), ": ", why);
  std::vector<float> a(static_cast<std::size_t>(h.numel())), b(static_cast<std::size_t>(h.numel()));
  file.read_f32(head, a.data());
  file.read_f32(embedding, b.data());
  ENGINE_CHECK(a == b, "model file '", file.path(), "': its ", head, " differs from ", embedding, ": ", why);
}

void read_hf_tensor(const SafetensorsShards& file, const std::string& name, std::vector<float>& values) {
  values.resize(static_cast<std::size_t>(file.entry(name).numel()));
  file.read_f32(name, values.data());
  for (std::size_t i = 0; i < values.size(); ++i)
    ENGINE_CHECK(std::isfinite(values[i]), "model file '", file.path(), "': tensor '", name, "' holds ", values[i],
                 " at element ", i);
}

namespace {
nlohmann::ordered_json id_or_null(const std::optional<HfSpecialToken>& t) {
  return t ? nlohmann::ordered_json(t->id) : nlohmann::ordered_json(nullptr);
}
nlohmann::ordered_json text_or_null(const std::optional<HfSpecialToken>& t) {
  return t ? nlohmann::ordered_json(t->text) : nlohmann::ordered_json(nullptr);
}
}  // namespace

nlohmann::ordered_json HfTokenizerFiles::bos_id() const { return id_or_null(bos); }
nlohmann::ordered_json HfTokenizerFiles::eos_id() const { return id_or_null(eos); }

HfTokenizerFiles read_hf_tokenizer(const HfTokenizer& tokenizer, const GptConfig& config,
                                   std::optional<std::int64_t> default_end_of_text) {
  HfTokenizerFiles out;
  if (tokenizer.tokenizer_json.empty()) {
    if (default_end_of_text) out.bos = out.eos = HfSpecialToken{*default_end_of_text, kEndOfText};
  } else {
    out.bos = tokenizer.bos;
    out.eos = tokenizer.eos;
  }
  for (const std::optional<HfSpecialToken>* t : {&out.bos, &out.eos})
    ENGINE_CHECK(!*t || ((*t)->id >= 0 && (*t)->id < config.vocab_size), "--save-hf: the tokenizer's ",
                 (*t)->text, " id ", (*t)->id, " is outside the model's vocabulary of ", config.vocab_size);
  if (tokenizer.tokenizer_json.empty()) return out;
  const std::string not_regular = regular_file_problem(tokenizer.tokenizer_json);
  ENGINE_CHECK(not_regular.empty(), "--save-hf: the tokenizer '", tokenizer.tokenizer_json, "' ", not_regular);
  std::ifstream in(tokenizer.tokenizer_json, std::ios::binary);
  ENGINE_CHECK(in.good(), "--save-hf: cannot read the tokenizer '", tokenizer.tokenizer_json, "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ENGINE_CHECK(!in.bad(), "--save-hf: error reading the tokenizer '", tokenizer.tokenizer_json, "'");
  out.tokenizer_bytes = bytes.str();
  return out;
}

void write_hf_tokenizer_files(const std::filesystem::path& dir, const GptConfig& config,
                              const HfTokenizerFiles& tokenizer) {
  // What generate() starts from and stops at (GenerationConfig).
  write_hf_json(dir / "generation_config.json",
                nlohmann::ordered_json{{"bos_token_id", tokenizer.bos_id()}, {"eos_token_id", tokenizer.eos_id()}});
  if (tokenizer.tokenizer_bytes.empty()) {
    // Not another run's tokenizer beside this model.
    for (const char* stale : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::remove(dir / stale);
    return;
  }
  // The run's tokenizer.json as it is, and what AutoTokenizer reads beside
  // it: the generic fast tokenizer (it takes tokenizer.json as written,
  // add_prefix_space included, where GPT2Tokenizer would re-set it from its
  // own arguments), the special tokens, the longest input the model takes.
  AtomicFile copy((dir / "tokenizer.json").string());
  copy.write(tokenizer.tokenizer_bytes);
  copy.commit();
  write_hf_json(dir / "tokenizer_config.json", nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                                      {"bos_token", text_or_null(tokenizer.bos)},
                                                                      {"eos_token", text_or_null(tokenizer.eos)},
                                                                      {"unk_token", nullptr},
                                                                      {"pad_token", nullptr},
                                                                      {"model_max_length", config.max_seq_len},
                                                                      {"clean_up_tokenization_spaces", false}});
}

void write_hf_json(const std::filesystem::path& path, const nlohmann::ordered_json& value) {
  AtomicFile file(path.string());
  file.write(value.dump(2) + "\n");
  file.commit();
}

}  // namespace launch
