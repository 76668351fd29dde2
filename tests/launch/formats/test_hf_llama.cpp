// Hugging Face Llama-family folders (launch/formats/hf_llama.h): round trips of
// llama-micro shapes (tied and untied, with and without Qwen2's q/k/v bias,
// Llama 3 rope scaling) bit for bit; the fused q|k|v and gate|up tensors cut
// into Hugging Face's rows, checked element by element, both ways; the
// config.json read back into the same GptConfig; every config.json field the
// engine cannot honour refused on one line naming it; folders of another
// architecture or shape, missing and extra tensors refused; sharded folders.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/formats/hf_gpt2.h"
#include "launch/formats/hf_llama.h"
#include "launch/formats/model_files.h"
#include "launch/formats/safetensors.h"
#include "launch/formats/safetensors_shards.h"
#include "model/gpt_params.h"
#include "tests/launch/formats/hostile_model.h"
#include "tests/launch/training_fixture.h"

using namespace launch;
using hostile::error_of;
using test_support::TempDir;

namespace {

// A tokenizer whose "<|endoftext|>" (id `id`) is bos and eos, as GPT-2's is.
HfTokenizer eot_tokenizer(const std::string& json, std::int64_t id) {
  return HfTokenizer{json, HfSpecialToken{id, "<|endoftext|>"}, HfSpecialToken{id, "<|endoftext|>"}};
}


// llama-micro (L2 H4 KV2 C32 F64 T64) with 200 tokens, padded to 256: the
// unpadded vocabulary is exercised.
model::GptConfig micro(bool tied, bool qkv_bias, bool scaled = false) {
  model::GptConfig c = model::gpt_preset("llama-micro");
  c.vocab_size = 200;
  c.tied_embeddings = tied;
  c.qkv_bias = qkv_bias;
  c.norm_eps = 1e-6;
  if (scaled) {
    c.rope_theta = 500000;
    c.rope_scaling = model::RopeScaling{8, 1, 4, 32};
  }
  return c;
}

// Every parameter random, the padded rows of wte and lm_head zero (as a read
// leaves them).
std::vector<float> random_model(const model::GptConfig& config, const model::ParamRegistry& registry) {
  std::vector<float> master(static_cast<std::size_t>(registry.total_numel()), 0.0f);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (const model::ParamInfo& p : registry.entries()) {
    std::int64_t n = p.numel();
    if (p.name == "wte" || p.name == "lm_head.weight") n = config.vocab_size * config.n_embd;
    for (std::int64_t i = 0; i < n; ++i) master[static_cast<std::size_t>(p.offset + i)] = normal(rng);
  }
  return master;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_bytes(path)); }

void write_json(const std::string& path, const nlohmann::json& value) { std::ofstream(path) << value.dump(2); }

// The tensors of `src`/model.safetensors, changed by `edit` (name -> values,
// shapes), written to `dst`/model.safetensors with src's config.json.
using Tensors = std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<float>>>;
void rewrite(const std::string& src, const std::string& dst, const std::function<void(Tensors&)>& edit) {
  const SafetensorsFile file(src + "/model.safetensors");
  Tensors tensors;
  for (const auto& [name, entry] : file.entries()) {
    std::vector<float> values(static_cast<std::size_t>(entry.numel()));
    file.read_f32(name, values.data());
    tensors[name] = {entry.shape, values};
  }
  edit(tensors);
  std::vector<SafetensorsOutput> outputs;
  for (const auto& [name, tensor] : tensors)
    outputs.push_back({name, tensor.first, [&values = tensor.second](float* out) {
                         std::copy(values.begin(), values.end(), out);
                       }});
  std::filesystem::create_directories(dst);
  write_safetensors(dst + "/model.safetensors", outputs, SafetensorsDType::kF32, {{"format", "pt"}});
  if (std::filesystem::exists(src + "/config.json"))
    std::filesystem::copy_file(src + "/config.json", dst + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
}

class HfLlama : public ::testing::Test {
 protected:
  TempDir dir_{"hf_llama"};

  struct Model {
    model::GptConfig config;
    model::ParamRegistry registry;
    std::vector<float> master;
    explicit Model(const model::GptConfig& c)
        : config(c), registry(model::build_gpt_registry(c)), master(random_model(config, registry)) {}
    const float* param(const std::string& name) const { return master.data() + registry.find(name).offset; }
  };

  // What read_init_model gives: the alignment padding between entries left
  // at -1, as nothing in a file covers it.
  static std::vector<float> read_back(const Model& m, const std::string& path) {
    std::vector<float> out(m.master.size(), -1.0f);
    for (const model::ParamInfo& p : m.registry.entries())
      std::fill(out.begin() + p.offset, out.begin() + p.offset + p.numel(), 7.0f);  // overwritten, padded rows too
    read_init_model(path, m.config, m.registry, out.data());
    return out;
  }
  static std::vector<float> expected(const Model& m) {
    std::vector<float> e(m.master.size(), -1.0f);
    for (const model::ParamInfo& p : m.registry.entries())
      std::copy(m.master.begin() + p.offset, m.master.begin() + p.offset + p.numel(), e.begin() + p.offset);
    return e;
  }
  // A folder of `m` in fp32 at DIR/name.
  std::string write(const Model& m, const std::string& name) {
    write_hf_llama(dir_ / name, m.config, m.registry, m.master.data(), SafetensorsDType::kF32);
    return dir_ / name;
  }
  // The error of check_init_model after `edit` changed the folder's config.json.
  std::string with_config(const std::string& folder, const model::GptConfig& expected_config,
                          const std::function<void(nlohmann::json&)>& edit) {
    const std::string path = folder + "/config.json";
    const std::string before = read_bytes(path);
    nlohmann::json c = nlohmann::json::parse(before);
    edit(c);
    write_json(path, c);
    const std::string e = error_of([&] { check_init_model(folder, expected_config); });
    std::ofstream(path) << before;
    return e;
  }
};

}  // namespace

// Each variant: written, read back bit for bit (from the folder and from the
// file itself), its config.json giving the same GptConfig.
TEST_F(HfLlama, RoundTripIsExactTiedUntiedWithAndWithoutQkvBias) {
  for (const model::GptConfig& config :
       {micro(true, false), micro(false, false), micro(true, true), micro(false, true), micro(true, false, true)}) {
    SCOPED_TRACE(config.describe());
    const Model m(config);
    const std::string folder = write(m, "rt");
    EXPECT_EQ(error_of([&] { check_init_model(folder, config); }), "");
    EXPECT_EQ(read_back(m, folder), expected(m));
    EXPECT_EQ(read_back(m, folder + "/model.safetensors"), expected(m));
    const std::optional<model::GptConfig> found = read_hf_config_shape(folder);
    ASSERT_TRUE(found.has_value());
    EXPECT_TRUE(*found == config) << found->describe();
    EXPECT_EQ(hf_config_difference(*found, config), "");
    std::filesystem::remove_all(folder);
  }
}

TEST_F(HfLlama, Bf16RoundTripWithinBf16Rounding) {
  const Model m(micro(false, true));
  write_hf_llama(dir_ / "bf16", m.config, m.registry, m.master.data(), SafetensorsDType::kBF16);
  EXPECT_EQ(read_json(dir_ / "bf16/config.json")["torch_dtype"], "bfloat16");
  const std::vector<float> got = read_back(m, dir_ / "bf16"), want = expected(m);
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * (1.0f / 256) + 1e-30f) << "element " << i;
}

// Hugging Face's names and shapes, and each fused tensor's rows where they
// belong: q, k, v and gate, up checked element by element against the
// engine's fused tensors.
TEST_F(HfLlama, WritesHuggingFaceNamesAndRows) {
  const Model m(micro(false, true));  // Qwen2, untied: every tensor there is
  const std::string folder = write(m, "qwen2");
  const SafetensorsFile file(folder + "/model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.entries().size(), 1u + 2u * 12 + 2u);  // embed, 12 per layer (9 weights, 3 biases), norm, lm_head
  const auto shape = [&](const std::string& name) { return file.entry(name).shape; };
  using S = std::vector<std::int64_t>;
  EXPECT_EQ(shape("model.embed_tokens.weight"), (S{200, 32}));
  EXPECT_EQ(shape("lm_head.weight"), (S{200, 32}));
  EXPECT_EQ(shape("model.norm.weight"), (S{32}));
  EXPECT_EQ(shape("model.layers.1.input_layernorm.weight"), (S{32}));
  EXPECT_EQ(shape("model.layers.1.self_attn.q_proj.weight"), (S{32, 32}));  // H D = 4 x 8
  EXPECT_EQ(shape("model.layers.1.self_attn.k_proj.weight"), (S{16, 32}));  // KV D = 2 x 8
  EXPECT_EQ(shape("model.layers.1.self_attn.v_proj.weight"), (S{16, 32}));
  EXPECT_EQ(shape("model.layers.1.self_attn.k_proj.bias"), (S{16}));
  EXPECT_EQ(shape("model.layers.1.self_attn.o_proj.weight"), (S{32, 32}));
  EXPECT_EQ(shape("model.layers.1.post_attention_layernorm.weight"), (S{32}));
  EXPECT_EQ(shape("model.layers.1.mlp.gate_proj.weight"), (S{64, 32}));
  EXPECT_EQ(shape("model.layers.1.mlp.up_proj.weight"), (S{64, 32}));
  EXPECT_EQ(shape("model.layers.1.mlp.down_proj.weight"), (S{32, 64}));

  const auto values = [&](const std::string& name) {
    std::vector<float> v(static_cast<std::size_t>(file.entry(name).numel()));
    file.read_f32(name, v.data());
    return v;
  };
  const float* qkv = m.param("h.1.attn.qkv.weight");  // (64, 32): q rows 0-31, k 32-47, v 48-63
  const std::vector<float> q = values("model.layers.1.self_attn.q_proj.weight");
  const std::vector<float> k = values("model.layers.1.self_attn.k_proj.weight");
  const std::vector<float> v = values("model.layers.1.self_attn.v_proj.weight");
  for (const auto& [row, col] : {std::pair{0, 0}, {5, 7}, {15, 31}, {31, 3}}) {
    EXPECT_EQ(q[row * 32 + col], qkv[row * 32 + col]) << row << "," << col;
    if (row < 16) {
      EXPECT_EQ(k[row * 32 + col], qkv[(32 + row) * 32 + col]) << row << "," << col;
      EXPECT_EQ(v[row * 32 + col], qkv[(48 + row) * 32 + col]) << row << "," << col;
    }
  }
  const float* bias = m.param("h.1.attn.qkv.bias");
  EXPECT_EQ(values("model.layers.1.self_attn.q_proj.bias")[31], bias[31]);
  EXPECT_EQ(values("model.layers.1.self_attn.k_proj.bias")[0], bias[32]);
  EXPECT_EQ(values("model.layers.1.self_attn.v_proj.bias")[15], bias[63]);
  const float* fc = m.param("h.0.mlp.fc.weight");  // (128, 32): gate rows 0-63, up 64-127
  const std::vector<float> gate = values("model.layers.0.mlp.gate_proj.weight");
  const std::vector<float> up = values("model.layers.0.mlp.up_proj.weight");
  for (const auto& [row, col] : {std::pair{0, 0}, {17, 9}, {63, 31}}) {
    EXPECT_EQ(gate[row * 32 + col], fc[row * 32 + col]) << row << "," << col;
    EXPECT_EQ(up[row * 32 + col], fc[(64 + row) * 32 + col]) << row << "," << col;
  }
  EXPECT_EQ(values("model.layers.0.mlp.down_proj.weight")[3 * 64 + 60], m.param("h.0.mlp.proj.weight")[3 * 64 + 60]);
  EXPECT_EQ(values("lm_head.weight")[199 * 32 + 31], m.param("lm_head.weight")[199 * 32 + 31]);

  const nlohmann::json c = read_json(folder + "/config.json");
  EXPECT_EQ(c["architectures"], nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(c["model_type"], "qwen2");
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["intermediate_size"], 64);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["vocab_size"], 200);
  EXPECT_EQ(c["max_position_embeddings"], 64);
  EXPECT_DOUBLE_EQ(c["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_DOUBLE_EQ(c["rope_theta"].get<double>(), 10000);
  EXPECT_TRUE(c["rope_scaling"].is_null());
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_EQ(c["use_sliding_window"], false);
  EXPECT_EQ(c["torch_dtype"], "float32");
  EXPECT_TRUE(c["bos_token_id"].is_null() && c["eos_token_id"].is_null()) << "no tokenizer";
  EXPECT_EQ(read_json(folder + "/generation_config.json"),
            (nlohmann::json{{"bos_token_id", nullptr}, {"eos_token_id", nullptr}}));
}

TEST_F(HfLlama, LlamaConfigJsonAndTiedHead) {
  const Model m(micro(true, false, true));
  const std::string folder = write(m, "llama");
  const SafetensorsFile file(folder + "/model.safetensors");
  EXPECT_FALSE(file.contains("lm_head.weight")) << "tied: left out, as save_pretrained does";
  EXPECT_FALSE(file.contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(file.entries().size(), 1u + 2u * 9 + 1u);
  const nlohmann::json c = read_json(folder + "/config.json");
  EXPECT_EQ(c["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["attention_bias"], false);
  EXPECT_EQ(c["mlp_bias"], false);
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["rope_scaling"], (nlohmann::json{{"factor", 8.0},
                                               {"high_freq_factor", 4.0},
                                               {"low_freq_factor", 1.0},
                                               {"original_max_position_embeddings", 32},
                                               {"rope_type", "llama3"}}));
  EXPECT_DOUBLE_EQ(c["rope_theta"].get<double>(), 500000);
}

// A file written by hand (not by write_hf_llama): each Hugging Face tensor a
// constant, so the engine's fused tensors show which rows each one filled.
TEST_F(HfLlama, ReadsEachTensorIntoItsRows) {
  const Model m(micro(false, true));
  const std::string folder = write(m, "src");
  rewrite(folder, dir_ / "constant", [](Tensors& t) {
    const std::pair<const char*, float> kValues[] = {{"self_attn.q_proj.weight", 1}, {"self_attn.k_proj.weight", 2},
                                                     {"self_attn.v_proj.weight", 3}, {"mlp.gate_proj.weight", 4},
                                                     {"mlp.up_proj.weight", 5},      {"self_attn.q_proj.bias", 6},
                                                     {"self_attn.k_proj.bias", 7},   {"self_attn.v_proj.bias", 8}};
    for (auto& [name, tensor] : t)
      for (const auto& [suffix, value] : kValues)
        if (name.ends_with(suffix)) std::fill(tensor.second.begin(), tensor.second.end(), value);
  });
  const std::vector<float> got = read_back(m, dir_ / "constant");
  const auto at = [&](const std::string& name, std::int64_t i) { return got[m.registry.find(name).offset + i]; };
  for (const std::int64_t row : {0, 31}) EXPECT_EQ(at("h.1.attn.qkv.weight", row * 32 + 5), 1) << row;
  for (const std::int64_t row : {32, 47}) EXPECT_EQ(at("h.1.attn.qkv.weight", row * 32 + 5), 2) << row;
  for (const std::int64_t row : {48, 63}) EXPECT_EQ(at("h.1.attn.qkv.weight", row * 32 + 5), 3) << row;
  for (const std::int64_t row : {0, 63}) EXPECT_EQ(at("h.0.mlp.fc.weight", row * 32 + 31), 4) << row;
  for (const std::int64_t row : {64, 127}) EXPECT_EQ(at("h.0.mlp.fc.weight", row * 32), 5) << row;
  EXPECT_EQ(at("h.0.attn.qkv.bias", 31), 6);
  EXPECT_EQ(at("h.0.attn.qkv.bias", 32), 7);
  EXPECT_EQ(at("h.0.attn.qkv.bias", 63), 8);
  // The padded vocabulary rows come back zero, in wte and lm_head.
  EXPECT_EQ(at("wte", 200 * 32), 0.0f);
  EXPECT_EQ(at("lm_head.weight", 256 * 32 - 1), 0.0f);
  EXPECT_EQ(at("wte", 199 * 32 + 31), m.param("wte")[199 * 32 + 31]);
}

// config.json fields that would make transformers compute something the
// engine does not: refused on one line naming the field and its value.
TEST_F(HfLlama, ConfigFieldsTheEngineCannotHonourAreRefused) {
  const Model llama(micro(true, false));
  const std::string folder = write(llama, "llama");
  const Model qwen(micro(true, true));
  const std::string qwen_folder = write(qwen, "qwen2");
  const auto set = [](const char* key, const nlohmann::json& value) {
    return [key, value](nlohmann::json& c) { c[key] = value; };
  };
  // Harmless values load.
  EXPECT_EQ(with_config(folder, llama.config, set("hidden_act", "swish")), "");
  EXPECT_EQ(with_config(folder, llama.config, set("head_dim", 8)), "");
  EXPECT_EQ(with_config(folder, llama.config, set("rope_scaling", {{"rope_type", "default"}})), "");
  EXPECT_EQ(with_config(folder, llama.config, set("pretraining_tp", 2)), "") << "the same product, split";
  EXPECT_EQ(with_config(qwen_folder, qwen.config, set("sliding_window", 4096)), "") << "without use_sliding_window";
  EXPECT_EQ(with_config(qwen_folder, qwen.config, set("use_sliding_window", false)), "");

  const std::pair<const char*, nlohmann::json> refused[] = {
      {"hidden_act", "gelu"},
      {"hidden_act", "relu"},
      {"attention_bias", true},
      {"mlp_bias", true},
      {"head_dim", 16},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
      {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}},
      {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}},
      {"num_experts", 8},
      {"num_local_experts", 8},
      {"num_experts_per_tok", 2},
      {"partial_rotary_factor", 0.5},
      {"hidden_size", "32"},
      {"num_key_value_heads", 2.0},
      {"rms_norm_eps", -1e-6},
      {"tie_word_embeddings", "yes"},
      {"model_type", "gpt2"},
  };
  for (const auto& [key, value] : refused) {
    const std::string e = with_config(folder, llama.config, set(key, value));
    EXPECT_NE(e.find(std::string("config.json has ") + key + " " + value.dump()), std::string::npos)
        << key << " = " << value.dump() << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  std::string e = with_config(qwen_folder, qwen.config, set("use_sliding_window", true));
  EXPECT_NE(e.find("config.json has use_sliding_window true, but the engine attends over the whole sequence"),
            std::string::npos) << e;
  e = with_config(folder, llama.config, set("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}));
  EXPECT_NE(e.find("without low_freq_factor, which llama3 scaling needs"), std::string::npos) << e;
  e = with_config(folder, llama.config, [](nlohmann::json& c) { c.erase("intermediate_size"); });
  EXPECT_NE(e.find("config.json has no intermediate_size"), std::string::npos) << e;
  e = with_config(folder, llama.config, set("num_key_value_heads", 3));
  EXPECT_NE(e.find("gives a model the engine cannot build: model: n_head 4 is not a multiple of n_kv_head 3"),
            std::string::npos) << e;
  // The same refusals where --init-from reads config.json for the shape.
  std::filesystem::copy(folder, dir_ / "hostile", std::filesystem::copy_options::recursive);
  nlohmann::json c = read_json(dir_ / "hostile/config.json");
  c["mlp_bias"] = true;
  write_json(dir_ / "hostile/config.json", c);
  e = error_of([&] { read_hf_config_shape(dir_ / "hostile"); });
  EXPECT_NE(e.find("--init-from '" + (dir_ / "hostile") + "': its config.json has mlp_bias true"), std::string::npos)
      << e;
  c["model_type"] = "mistral";
  write_json(dir_ / "hostile/config.json", c);
  e = error_of([&] { read_hf_config_shape(dir_ / "hostile"); });
  EXPECT_NE(e.find("config.json has model_type \"mistral\", which the engine cannot load"), std::string::npos) << e;
}

// --init-from without --model: the architecture and shape come from
// config.json, with LlamaConfig's and Qwen2Config's defaults.
TEST_F(HfLlama, ConfigJsonGivesTheModel) {
  const Model m(micro(false, true));
  const std::string folder = write(m, "qwen2");
  nlohmann::json c = read_json(folder + "/config.json");
  for (const char* key : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "rope_scaling"})
    c.erase(key);
  write_json(folder + "/config.json", c);
  const std::optional<model::GptConfig> found = read_hf_config_shape(folder);
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(found->is_llama() && found->qkv_bias);
  EXPECT_EQ(found->kv_heads(), 4) << "multi-head attention without num_key_value_heads";
  EXPECT_EQ(found->norm_eps, 1e-6);
  EXPECT_EQ(found->rope_theta, 10000);
  EXPECT_FALSE(found->tied_embeddings) << "transformers' default";
  EXPECT_EQ(hf_config_difference(*found, m.config), "num_key_value_heads 4, this run's model has 2");
}

// A folder that does not hold the run's model: another architecture, another
// shape in config.json or in the tensors, tensors missing or extra, a tied
// head that is not the embedding.
TEST_F(HfLlama, FoldersOfAnotherModelAreRefused) {
  const Model m(micro(false, false));
  const std::string folder = write(m, "llama");
  model::GptConfig more_kv = m.config;
  more_kv.n_kv_head = 4;
  std::string e = error_of([&] { check_init_model(folder, more_kv); });
  EXPECT_NE(e.find("holds a model of another shape: its config.json has num_key_value_heads 2, this run's model has 4"),
            std::string::npos) << e;
  model::GptConfig qwen = m.config;
  qwen.qkv_bias = true;
  e = error_of([&] { check_init_model(folder, qwen); });
  EXPECT_NE(e.find("its config.json has model_type \"llama\", this run's model has \"qwen2\""), std::string::npos) << e;
  model::GptConfig tied = m.config;
  tied.tied_embeddings = true;
  e = error_of([&] { check_init_model(folder, tied); });
  EXPECT_NE(e.find("tie_word_embeddings false, this run's model has true"), std::string::npos) << e;

  // config.json that disagrees with the tensors: the tensors are checked
  // against the model config.json gives.
  nlohmann::json c = read_json(folder + "/config.json");
  c["intermediate_size"] = 96;
  write_json(folder + "/config.json", c);
  model::GptConfig wider = m.config;
  wider.ffn_hidden = 96;
  e = error_of([&] { check_init_model(folder, wider); });
  EXPECT_NE(e.find("tensor 'model.layers.0.mlp.gate_proj.weight' is [64, 32], this run's model"), std::string::npos)
      << e;
  EXPECT_NE(e.find("needs [96, 32]"), std::string::npos) << e;
  std::filesystem::remove(folder + "/config.json");  // without config.json, the tensors alone
  e = error_of([&] { check_init_model(folder, wider); });
  EXPECT_NE(e.find("is [64, 32]"), std::string::npos) << e;

  // Missing, extra, ignored.
  rewrite(folder, dir_ / "missing", [](Tensors& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  e = error_of([&] { check_init_model(dir_ / "missing", m.config); });
  EXPECT_NE(e.find("has no tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
  rewrite(folder, dir_ / "extra", [](Tensors& t) {
    t["model.layers.0.self_attn.o_proj.bias"] = {{32}, std::vector<float>(32)};
  });
  e = error_of([&] { check_init_model(dir_ / "extra", m.config); });
  EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.o_proj.bias' [32] is not part of this run's model"),
            std::string::npos) << e;
  rewrite(folder, dir_ / "inv_freq", [](Tensors& t) {
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{4}, std::vector<float>(4, 1.0f)};
  });
  EXPECT_EQ(error_of([&] { check_init_model(dir_ / "inv_freq", m.config); }), "") << "a buffer, not a parameter";

  // A tied model: an lm_head.weight equal to the embedding loads, another is refused.
  const Model t(micro(true, false));
  const std::string tied_folder = write(t, "tied");
  rewrite(tied_folder, dir_ / "tied_copy", [](Tensors& x) { x["lm_head.weight"] = x["model.embed_tokens.weight"]; });
  EXPECT_EQ(error_of([&] { check_init_model(dir_ / "tied_copy", t.config); }), "");
  EXPECT_EQ(read_back(t, dir_ / "tied_copy"), expected(t));
  rewrite(tied_folder, dir_ / "tied_other", [](Tensors& x) {
    x["lm_head.weight"] = x["model.embed_tokens.weight"];
    x["lm_head.weight"].second[5] += 0.5f;
  });
  e = error_of([&] { check_init_model(dir_ / "tied_other", t.config); });
  EXPECT_NE(e.find("its lm_head.weight differs from model.embed_tokens.weight"), std::string::npos) << e;
  // An untied model's config.json over a tied folder: the head is missing.
  nlohmann::json untied = read_json(tied_folder + "/config.json");
  untied["tie_word_embeddings"] = false;
  write_json(tied_folder + "/config.json", untied);
  model::GptConfig untied_config = t.config;
  untied_config.tied_embeddings = false;
  e = error_of([&] { check_init_model(tied_folder, untied_config); });
  EXPECT_NE(e.find("has no tensor 'lm_head.weight'"), std::string::npos) << e;
}

// GPT-2 and Llama folders given for each other's model, with and without
// config.json: refused naming the architecture.
TEST_F(HfLlama, AnotherArchitectureIsRefused) {
  const hostile::SmallModel gpt2;
  gpt2.write(dir_ / "gpt2");
  const Model m(micro(true, false));
  std::string e = error_of([&] { check_init_model(dir_ / "gpt2", m.config); });
  EXPECT_NE(e.find("its config.json has model_type \"gpt2\", but this run's model is of the Llama family"),
            std::string::npos) << e;
  std::filesystem::remove(dir_ / "gpt2/config.json");
  e = error_of([&] { check_init_model(dir_ / "gpt2", m.config); });
  EXPECT_NE(e.find("is not a Llama-family checkpoint: it has no tensor 'model.embed_tokens.weight' (its wte.weight "
                   "is a GPT-2 model's)"), std::string::npos) << e;

  const std::string folder = write(m, "llama");
  e = error_of([&] { check_init_model(folder, gpt2.config); });
  EXPECT_NE(e.find("config.json has model_type \"llama\", but this run's model is GPT-2"), std::string::npos) << e;
  std::filesystem::remove(folder + "/config.json");
  e = error_of([&] { check_init_model(folder, gpt2.config); });
  EXPECT_NE(e.find("is not a GPT-2 checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("model.embed_tokens.weight is a Llama-family model's"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// save_pretrained(max_shard_size=...)'s layout: an index and its shards.
TEST_F(HfLlama, ReadsShardedFolders) {
  const Model m(micro(false, true));
  const std::string folder = write(m, "whole");
  const SafetensorsFile whole(folder + "/model.safetensors");
  const std::string sharded = dir_ / "sharded";
  std::filesystem::create_directories(sharded);
  std::filesystem::copy_file(folder + "/config.json", sharded + "/config.json");
  std::vector<SafetensorsOutput> outputs[3];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& [name, entry] : whole.entries()) {
    const int s = i++ % 3;
    outputs[s].push_back({name, entry.shape, [&whole, name = name](float* out) { whole.read_f32(name, out); }});
    index["weight_map"][name] = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
  }
  for (int s = 0; s < 3; ++s)
    write_safetensors(sharded + "/model-0000" + std::to_string(s + 1) + "-of-00003.safetensors", outputs[s],
                      SafetensorsDType::kF32, {{"format", "pt"}});
  write_json(sharded + "/model.safetensors.index.json", index);
  ASSERT_FALSE(std::filesystem::exists(sharded + "/model.safetensors"));
  EXPECT_EQ(SafetensorsShards(sharded + "/model.safetensors.index.json").shard_count(), 3u);
  EXPECT_TRUE(read_hf_config_shape(sharded) == m.config);
  EXPECT_EQ(read_back(m, sharded), expected(m));
  EXPECT_EQ(read_back(m, sharded + "/model.safetensors.index.json"), expected(m));
  model::GptConfig tied = m.config;
  tied.tied_embeddings = true;
  EXPECT_NE(error_of([&] { check_init_model(sharded, tied); }).find("tie_word_embeddings false"), std::string::npos);
}

// The tokenizer files and bos/eos as the GPT-2 export writes them.
TEST_F(HfLlama, WritesTheTokenizerAndGenerationConfig) {
  const Model m(micro(true, false));
  const std::string tokenizer = TOKENIZER_DATA_DIR "/tiny_bpe.json";  // <|endoftext|> is id 0
  write_hf_llama(dir_ / "tok", m.config, m.registry, m.master.data(), SafetensorsDType::kF32, eot_tokenizer(tokenizer, 0));
  EXPECT_EQ(read_bytes(dir_ / "tok/tokenizer.json"), read_bytes(tokenizer));
  const nlohmann::json t = read_json(dir_ / "tok/tokenizer_config.json");
  EXPECT_EQ(t["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(t["eos_token"], "<|endoftext|>");
  EXPECT_EQ(read_json(dir_ / "tok/config.json")["bos_token_id"], 0);
  EXPECT_EQ(read_json(dir_ / "tok/generation_config.json"), (nlohmann::json{{"bos_token_id", 0}, {"eos_token_id", 0}}));
  // Written again without one: no stale tokenizer beside the new model.
  write_hf_llama(dir_ / "tok", m.config, m.registry, m.master.data(), SafetensorsDType::kF32);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tok/tokenizer.json"));
  EXPECT_TRUE(read_json(dir_ / "tok/config.json")["eos_token_id"].is_null());
  // A --save-hf of a Llama model dispatches here.
  write_hf_model(dir_ / "dispatched", m.config, m.registry, m.master.data(), SafetensorsDType::kF32);
  EXPECT_EQ(read_json(dir_ / "dispatched/config.json")["architectures"][0], "LlamaForCausalLM");
  EXPECT_STREQ(hf_architecture(m.config), "LlamaForCausalLM");
  EXPECT_STREQ(hf_architecture(micro(true, true)), "Qwen2ForCausalLM");
}

// Llama 3's documents start with "<|begin_of_text|>" and end with
// "<|end_of_text|>": bos and eos differ, in every file that names them.
TEST_F(HfLlama, WritesDistinctBosAndEos) {
  const Model m(micro(true, false));
  const std::string tokenizer = TOKENIZER_DATA_DIR "/tiny_bpe.json";
  write_hf_llama(dir_ / "llama3", m.config, m.registry, m.master.data(), SafetensorsDType::kF32,
                 HfTokenizer{tokenizer, HfSpecialToken{1, "<|begin_of_text|>"}, HfSpecialToken{2, "<|end_of_text|>"}});
  const nlohmann::json t = read_json(dir_ / "llama3/tokenizer_config.json");
  EXPECT_EQ(t["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(t["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(read_json(dir_ / "llama3/config.json")["bos_token_id"], 1);
  EXPECT_EQ(read_json(dir_ / "llama3/config.json")["eos_token_id"], 2);
  EXPECT_EQ(read_json(dir_ / "llama3/generation_config.json"),
            (nlohmann::json{{"bos_token_id", 1}, {"eos_token_id", 2}}));
}
