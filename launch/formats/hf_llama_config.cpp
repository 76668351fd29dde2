// config.json of Llama-family folders (launch/formats/hf_llama.h): transformers'
// LlamaConfig and Qwen2Config to the engine's GptConfig and back.
#include <cmath>
#include <limits>

#include "engine/check.h"
#include "launch/formats/hf_llama.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

using model::GptConfig;

namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

// Fields of mixture-of-experts configurations (Mixtral's, Qwen2-MoE's,
// DeepSeek's): the engine's MLP is one dense SwiGLU.
constexpr const char* kExpertFields[] = {"num_experts",          "num_local_experts",      "num_experts_per_tok",
                                         "moe_intermediate_size", "n_routed_experts",       "n_shared_experts",
                                         "shared_expert_intermediate_size"};

}  // namespace

GptConfig hf_llama_config(const nlohmann::json& config, const std::string& source) {
  const auto refuse = [&](const std::string& key, const nlohmann::json& value, const std::string& why) {
    ENGINE_FAIL(source, ": its config.json has ", key, " ", json_excerpt(value), ", ", why);
  };
  const nlohmann::json& type = config.contains("model_type") ? config["model_type"] : nlohmann::json();
  if (!(type.is_string() && (type == "llama" || type == "qwen2")))
    refuse("model_type", type, "but this run's model is of the Llama family (\"llama\" or \"qwen2\")");
  const bool qwen2 = type == "qwen2";
  const auto present = [&](const char* key) { return config.contains(key) && !config[key].is_null(); };
  const auto integer = [&](const char* key) {
    ENGINE_CHECK(config.contains(key), source, ": its config.json has no ", key, ", which a ", type.get<std::string>(),
                 " model's shape needs");
    const std::optional<std::int64_t> value = json_integer(config[key], 1, kMaxInt);
    if (!value) refuse(key, config[key], "expected a positive integer");
    return *value;
  };
  const auto number = [&](const nlohmann::json& object, const std::string& key, double fallback) {
    if (!object.contains(key) || object[key].is_null()) return fallback;
    const nlohmann::json& v = object[key];
    if (!(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0))
      refuse(&object == &config ? key : "rope_scaling." + key, v, "expected a positive number");
    return v.get<double>();
  };
  const auto flag = [&](const char* key, bool fallback) {
    if (!present(key)) return fallback;
    if (!config[key].is_boolean()) refuse(key, config[key], "expected true or false");
    return config[key].get<bool>();
  };

  GptConfig m;
  m.arch = model::Architecture::kLlama;
  m.n_embd = integer("hidden_size");
  m.ffn_hidden = integer("intermediate_size");
  m.n_head = integer("num_attention_heads");
  m.n_layer = integer("num_hidden_layers");
  m.vocab_size = integer("vocab_size");
  m.max_seq_len = integer("max_position_embeddings");
  // LlamaConfig and Qwen2Config: without it, multi-head attention.
  m.n_kv_head = present("num_key_value_heads") ? integer("num_key_value_heads") : m.n_head;
  // Their defaults where a field is left out.
  m.norm_eps = number(config, "rms_norm_eps", 1e-6);
  m.rope_theta = number(config, "rope_theta", 10000.0);
  m.tied_embeddings = flag("tie_word_embeddings", false);
  m.qkv_bias = qwen2;  // Qwen2's attention: a bias on q, k and v, none on o

  if (present("hidden_act")) {
    const nlohmann::json& act = config["hidden_act"];
    // transformers' ACT2FN maps both names to SiLU.
    if (!(act.is_string() && (act == "silu" || act == "swish")))
      refuse("hidden_act", act, "but the engine's SwiGLU MLP computes silu (\"silu\") only");
  }
  if (!qwen2) {
    if (flag("attention_bias", false))
      refuse("attention_bias", config["attention_bias"], "but the engine's Llama attention has no bias "
             "(Qwen2's bias on q, k and v is model_type \"qwen2\")");
    if (flag("mlp_bias", false)) refuse("mlp_bias", config["mlp_bias"], "but the engine's SwiGLU MLP has no bias");
  } else if (flag("use_sliding_window", false)) {
    refuse("use_sliding_window", config["use_sliding_window"],
           "but the engine attends over the whole sequence (sliding_window is harmless only without it)");
  }
  if (present("head_dim")) {
    const std::optional<std::int64_t> d = json_integer(config["head_dim"], 1, kMaxInt);
    if (!d || m.n_embd % m.n_head != 0 || *d != m.n_embd / m.n_head)
      refuse("head_dim", config["head_dim"], "but the engine's head size is hidden_size / num_attention_heads = " +
                                                 std::to_string(m.n_embd / m.n_head));
  }
  if (present("partial_rotary_factor") && number(config, "partial_rotary_factor", 1.0) != 1.0)
    refuse("partial_rotary_factor", config["partial_rotary_factor"],
           "but the engine rotates every dimension of a head");
  for (const char* key : kExpertFields)
    if (present(key) && !(config[key].is_number_integer() && config[key].get<std::int64_t>() == 0))
      refuse(key, config[key], "but the engine's MLP is dense (no mixture of experts)");

  if (present("rope_scaling")) {
    const nlohmann::json& s = config["rope_scaling"];
    if (!s.is_object()) refuse("rope_scaling", s, "expected an object or null");
    // "type" is the name transformers read before "rope_type".
    const nlohmann::json kind = s.contains("rope_type") ? s["rope_type"] : s.contains("type") ? s["type"] : nullptr;
    if (!(kind.is_string() && (kind == "llama3" || kind == "default")))
      refuse("rope_scaling", s,
             "but the engine scales rotary frequencies as Llama 3 does only (\"rope_type\": \"llama3\")");
    if (kind == "llama3") {
      for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
        ENGINE_CHECK(s.contains(key), source, ": its config.json has rope_scaling ", json_excerpt(s), " without ", key,
                     ", which llama3 scaling needs");
      m.rope_scaling.factor = number(s, "factor", 0);
      m.rope_scaling.low_freq_factor = number(s, "low_freq_factor", 0);
      m.rope_scaling.high_freq_factor = number(s, "high_freq_factor", 0);
      const std::optional<std::int64_t> original = json_integer(s["original_max_position_embeddings"], 1, kMaxInt);
      if (!original)
        refuse("rope_scaling.original_max_position_embeddings", s["original_max_position_embeddings"],
               "expected a positive integer");
      m.rope_scaling.original_max_position = *original;
    }
  }
  try {
    m.validate();
  } catch (const engine::Error& e) {
    ENGINE_FAIL(source, ": its config.json gives a model the engine cannot build: ", e.what());
  }
  return m;
}

nlohmann::ordered_json hf_llama_config_json(const GptConfig& config, SafetensorsDType dtype) {
  ENGINE_CHECK(config.is_llama(), "Hugging Face Llama files hold Llama-family models, not ", config.describe());
  const bool qwen2 = config.qkv_bias;
  // What LlamaConfig / Qwen2Config need, in save_pretrained's (alphabetical)
  // order; dropout 0 as the engine trains without it.
  nlohmann::ordered_json c;
  c["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  if (!qwen2) c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  if (!qwen2) c["head_dim"] = config.head_size();
  c["hidden_act"] = "silu";
  c["hidden_size"] = config.n_embd;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = config.ffn_hidden;
  c["max_position_embeddings"] = config.max_seq_len;
  // Qwen2: the sliding window is off; the fields say so as Qwen2.5's do.
  if (qwen2) c["max_window_layers"] = config.n_layer;
  if (!qwen2) c["mlp_bias"] = false;
  c["model_type"] = qwen2 ? "qwen2" : "llama";
  c["num_attention_heads"] = config.n_head;
  c["num_hidden_layers"] = config.n_layer;
  c["num_key_value_heads"] = config.kv_heads();
  if (!qwen2) c["pretraining_tp"] = 1;
  c["rms_norm_eps"] = config.norm_eps;
  if (config.rope_scaling.enabled()) {
    c["rope_scaling"] = {{"factor", config.rope_scaling.factor},
                         {"high_freq_factor", config.rope_scaling.high_freq_factor},
                         {"low_freq_factor", config.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", config.rope_scaling.original_max_position},
                         {"rope_type", "llama3"}};
  } else {
    c["rope_scaling"] = nullptr;
  }
  c["rope_theta"] = config.rope_theta;
  if (qwen2) c["sliding_window"] = config.max_seq_len;
  c["tie_word_embeddings"] = config.tied_embeddings;
  c["torch_dtype"] = dtype == SafetensorsDType::kBF16 ? "bfloat16" : "float32";
  c["use_cache"] = true;
  if (qwen2) c["use_sliding_window"] = false;
  c["vocab_size"] = config.vocab_size;
  return c;
}

}  // namespace launch
