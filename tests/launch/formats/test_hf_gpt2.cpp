// Hugging Face GPT-2 files (launch/formats/hf_gpt2.h, launch/formats/safetensors.h): round
// trips in fp32 and bf16, the same weights from llm.c's format and from
// safetensors, the names without "transformer." and the mask buffers of
// OpenAI's checkpoint, sharded folders (launch/formats/safetensors_shards.h), and
// damaged, mismatched or inconsistent files refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/formats/hf_folder.h"
#include "launch/formats/hf_gpt2.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/model_files.h"
#include "launch/formats/safetensors.h"
#include "launch/formats/safetensors_shards.h"
#include "model/gpt_params.h"
#include "tests/launch/training_fixture.h"

using namespace launch;
using test_support::TempDir;

namespace {

// A tokenizer whose "<|endoftext|>" (id `id`) is bos and eos, as GPT-2's is.
HfTokenizer eot_tokenizer(const std::string& json, std::int64_t id) {
  return HfTokenizer{json, HfSpecialToken{id, "<|endoftext|>"}, HfSpecialToken{id, "<|endoftext|>"}};
}


// 200 tokens: padded to 256, so the unpadded vocabulary is exercised.
model::GptConfig small_config() {
  model::GptConfig c;
  c.vocab_size = 200;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

std::vector<float> random_model(const model::GptConfig& config, const model::ParamRegistry& registry) {
  std::vector<float> master(static_cast<std::size_t>(registry.total_numel()), 0.0f);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (const model::ParamInfo& p : registry.entries()) {
    std::int64_t n = p.numel();
    if (p.name == "wte" || p.name == "lm_head.weight")
      n = config.vocab_size * config.n_embd;  // padded rows stay zero, as a read gives them
    for (std::int64_t i = 0; i < n; ++i) master[p.offset + i] = normal(rng);
  }
  return master;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const engine::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A file of one header (given verbatim) and `data` bytes.
std::string raw_file(const std::string& header, std::size_t data) {
  const std::uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  return bytes + header + std::string(data, '\0');
}

class HfGpt2 : public ::testing::Test {
 protected:
  model::GptConfig config_ = small_config();
  model::ParamRegistry registry_ = model::build_gpt_registry(config_);
  std::vector<float> master_ = random_model(config_, registry_);
  TempDir dir_{"hf_gpt2"};

  std::vector<float> read_back(const std::string& path) {
    std::vector<float> out(master_.size(), -1.0f);
    // The alignment padding between entries is not in any file.
    for (const model::ParamInfo& p : registry_.entries())
      std::fill(out.begin() + p.offset, out.begin() + p.offset + p.numel(), 0.0f);
    read_init_model(path, config_, registry_, out.data());
    return out;
  }
  // master_ with the alignment padding as read_back leaves it.
  std::vector<float> expected() {
    std::vector<float> e(master_.size(), -1.0f);
    for (const model::ParamInfo& p : registry_.entries())
      std::copy(master_.begin() + p.offset, master_.begin() + p.offset + p.numel(), e.begin() + p.offset);
    return e;
  }
};

}  // namespace

TEST_F(HfGpt2, WritesGpt2NamesShapesAndConv1DLayout) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const SafetensorsFile file(dir_ / "hf/model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.entries().size(), 2u + 12u * 2 + 2u);  // no lm_head.weight: tied
  EXPECT_FALSE(file.contains("lm_head.weight"));
  EXPECT_EQ(file.entry("transformer.wte.weight").shape, (std::vector<std::int64_t>{200, 32}));
  EXPECT_EQ(file.entry("transformer.wpe.weight").shape, (std::vector<std::int64_t>{16, 32}));
  EXPECT_EQ(file.entry("transformer.h.1.attn.c_attn.weight").shape, (std::vector<std::int64_t>{32, 96}));
  EXPECT_EQ(file.entry("transformer.h.1.attn.c_proj.weight").shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(file.entry("transformer.h.1.mlp.c_fc.weight").shape, (std::vector<std::int64_t>{32, 128}));
  EXPECT_EQ(file.entry("transformer.h.1.mlp.c_proj.weight").shape, (std::vector<std::int64_t>{128, 32}));
  EXPECT_EQ(file.entry("transformer.h.0.mlp.c_fc.bias").shape, (std::vector<std::int64_t>{128}));
  EXPECT_EQ(file.entry("transformer.ln_f.bias").shape, (std::vector<std::int64_t>{32}));
  // Conv1D (in, out): element [i][o] of c_fc is the engine's fc.weight[o][i].
  std::vector<float> fc(32 * 128);
  file.read_f32("transformer.h.1.mlp.c_fc.weight", fc.data());
  const float* engine_fc = master_.data() + registry_.find("h.1.mlp.fc.weight").offset;  // (128, 32)
  for (int i = 0; i < 32; ++i)
    for (int o = 0; o < 128; ++o) ASSERT_EQ(fc[i * 128 + o], engine_fc[o * 32 + i]) << i << "," << o;
  // The header is padded to a multiple of 8 bytes.
  const std::string bytes = read_bytes(dir_ / "hf/model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);

  std::ifstream in(dir_ / "hf/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(c["vocab_size"], 200);
  EXPECT_EQ(c["n_positions"], 16);
  EXPECT_EQ(c["n_ctx"], 16);
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_head"], 2);
  EXPECT_EQ(c["n_embd"], 32);
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_DOUBLE_EQ(c["layer_norm_epsilon"].get<double>(), 1e-5);
  // Not GPT-2's vocabulary: no <|endoftext|>. Left out, GPT2Config would make
  // both 50256, outside these 200 ids (transformers 5.23 warned on loading).
  ASSERT_TRUE(c.contains("bos_token_id"));
  EXPECT_TRUE(c["bos_token_id"].is_null());
  EXPECT_TRUE(c["eos_token_id"].is_null());
}

TEST_F(HfGpt2, Fp32RoundTripIsExact) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  EXPECT_EQ(read_back(dir_ / "hf"), expected());
  EXPECT_EQ(read_back(dir_ / "hf/model.safetensors"), expected());  // the file itself
}

TEST_F(HfGpt2, Bf16RoundTripWithinBf16Rounding) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kBF16);
  const SafetensorsFile file(dir_ / "hf/model.safetensors");
  EXPECT_EQ(file.entry("transformer.wte.weight").dtype, SafetensorsDType::kBF16);
  const std::vector<float> got = read_back(dir_ / "hf"), want = expected();
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], std::abs(want[i]) * (1.0f / 256) + 1e-30f) << "element " << i;
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // a tie rounds to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

TEST_F(HfGpt2, LlmcAndSafetensorsInitGiveIdenticalWeights) {
  write_llmc_model(dir_ / "model.bin", config_, registry_, master_.data());
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  EXPECT_EQ(read_back(dir_ / "model.bin"), read_back(dir_ / "hf"));
}

TEST_F(HfGpt2, ReadsNamesWithoutPrefixAndIgnoresMaskBuffers) {
  // OpenAI's gpt2 on the Hub: "h.0.attn.c_attn.weight", with the causal-mask
  // buffers h.{l}.attn.bias.
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const SafetensorsFile ours(dir_ / "hf/model.safetensors");
  std::vector<SafetensorsOutput> outputs;
  for (const auto& [name, entry] : ours.entries()) {
    const std::string bare = name.substr(std::string("transformer.").size());
    outputs.push_back({bare, entry.shape, [&ours, name = name](float* out) { ours.read_f32(name, out); }});
  }
  for (int l = 0; l < 2; ++l)
    outputs.push_back({"h." + std::to_string(l) + ".attn.bias", {1, 1, 16, 16}, [](float* out) { std::fill(out, out + 256, 1.0f); }});
  std::filesystem::create_directories(dir_ / "bare");
  write_safetensors(dir_ / "bare/gpt2.safetensors", outputs, SafetensorsDType::kF32, {{"format", "pt"}});
  EXPECT_EQ(read_back(dir_ / "bare/gpt2.safetensors"), expected());
}

TEST_F(HfGpt2, ModelOfAnotherShapeNamesTheTensor) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  model::GptConfig wider = config_;
  wider.n_embd = 64;
  EXPECT_NE(error_of([&] { check_init_model(dir_ / "hf", wider); })
                .find("tensor 'transformer.wte.weight' is [200, 32], this run's model"),
            std::string::npos);
  model::GptConfig deeper = config_;
  deeper.n_layer = 3;
  EXPECT_NE(error_of([&] { check_init_model(dir_ / "hf", deeper); }).find("no tensor 'transformer.h.2.ln_1.weight'"),
            std::string::npos);
  model::GptConfig shallower = config_;
  shallower.n_layer = 1;
  EXPECT_NE(error_of([&] { check_init_model(dir_ / "hf", shallower); }).find("tensor 'transformer.h.1."),
            std::string::npos);
  model::GptConfig more_heads = config_;
  more_heads.n_head = 4;
  EXPECT_NE(error_of([&] { check_init_model(dir_ / "hf", more_heads); }).find("config.json has n_head 2"),
            std::string::npos);
  model::GptConfig other_vocab = config_;
  other_vocab.vocab_size = 256;
  const std::string e = error_of([&] { check_init_model(dir_ / "hf", other_vocab); });
  EXPECT_NE(e.find("is [200, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("needs [256, 32]"), std::string::npos) << e;
}

// config.json fields that change what GPT-2 computes: GPT-2's values load,
// any other is refused naming the field (issue 38), instead of the model
// being loaded and computed as GPT-2 anyway. layer_norm_epsilon and
// tie_word_embeddings are honoured (UntiedHeadAndEpsRoundTrip), so here
// they are refused only for differing from this run's tied, 1e-5 model.
TEST_F(HfGpt2, ConfigFieldsTheEngineCannotHonourAreRefused) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const std::string path = dir_ / "hf/config.json";
  const nlohmann::json ours = nlohmann::json::parse(read_bytes(path));
  const auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json c = ours;
    c[key] = value;
    write_bytes(path, c.dump());
    return error_of([&] { check_init_model(dir_ / "hf", config_); });
  };
  // GPT-2's own values (and the same function under its other name) load.
  EXPECT_EQ(with("activation_function", "gelu_pytorch_tanh"), "(no error)");
  EXPECT_EQ(with("layer_norm_epsilon", 1e-5), "(no error)");
  EXPECT_EQ(with("scale_attn_weights", true), "(no error)");
  EXPECT_EQ(with("scale_attn_by_inverse_layer_idx", false), "(no error)");
  EXPECT_EQ(with("reorder_and_upcast_attn", true), "(no error)") << "a numerics flag for fp16, not another model";
  const std::pair<const char*, nlohmann::json> refused[] = {
      {"model_type", "llama"},
      {"activation_function", "relu"},
      {"activation_function", "gelu"},
      {"layer_norm_epsilon", 1e-6},
      {"tie_word_embeddings", false},
      {"scale_attn_weights", false},
      {"scale_attn_by_inverse_layer_idx", true},
      {"add_cross_attention", true},
      {"layer_norm_epsilon", "1e-5"},
      {"layer_norm_epsilon", -1e-5},
      {"tie_word_embeddings", "false"},
  };
  for (const auto& [key, value] : refused) {
    const std::string e = with(key, value);
    EXPECT_NE(e.find(std::string("config.json has ") + key + " " + value.dump()), std::string::npos)
        << key << " = " << value.dump() << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  write_bytes(path, ours.dump());
  EXPECT_EQ(error_of([&] { check_init_model(dir_ / "hf", config_); }), "(no error)");
}

// In a folder whose config.json says the head is tied, an lm_head.weight
// beside wte loads only when it is wte itself; the same folder saying
// tie_word_embeddings false loads it as the untied model's head.
TEST_F(HfGpt2, UntiedOutputHeadInATiedFolderIsRefused) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const SafetensorsFile ours(dir_ / "hf/model.safetensors");
  const auto write_with_head = [&](const std::string& folder, float shift) {
    std::vector<SafetensorsOutput> outputs;
    for (const auto& [name, entry] : ours.entries())
      outputs.push_back({name, entry.shape, [&ours, name = name](float* out) { ours.read_f32(name, out); }});
    const SafetensorsEntry& wte = ours.entry("transformer.wte.weight");
    outputs.push_back({"lm_head.weight", wte.shape, [&ours, shift, n = wte.shape[0] * wte.shape[1]](float* out) {
                         ours.read_f32("transformer.wte.weight", out);
                         out[n - 1] += shift;
                       }});
    std::filesystem::create_directories(dir_ / folder);
    write_safetensors(dir_ / (folder + "/model.safetensors"), outputs, SafetensorsDType::kF32, {{"format", "pt"}});
    std::filesystem::copy_file(dir_ / "hf/config.json", dir_ / (folder + "/config.json"));
  };
  write_with_head("tied", 0.0f);
  EXPECT_EQ(error_of([&] { check_init_model(dir_ / "tied", config_); }), "(no error)");
  EXPECT_EQ(read_back(dir_ / "tied"), expected());
  write_with_head("untied", 0.5f);
  const std::string e = error_of([&] { check_init_model(dir_ / "untied", config_); });
  EXPECT_NE(e.find("lm_head.weight differs from transformer.wte.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("tie_word_embeddings false"), std::string::npos) << "says what would load it: " << e;

  nlohmann::json config = nlohmann::json::parse(read_bytes(dir_ / "untied/config.json"));
  config["tie_word_embeddings"] = false;
  write_bytes(dir_ / "untied/config.json", config.dump());
  const std::optional<model::GptConfig> shape = read_hf_config_shape(dir_ / "untied");
  ASSERT_TRUE(shape.has_value());
  EXPECT_FALSE(shape->tied_embeddings);
  const model::ParamRegistry registry = model::build_gpt_registry(*shape);
  std::vector<float> got(static_cast<std::size_t>(registry.total_numel()), 0.0f);
  read_init_model(dir_ / "untied", *shape, registry, got.data());
  const model::ParamInfo& head = registry.find("lm_head.weight");
  const model::ParamInfo& wte = registry.find("wte");
  const std::int64_t last = config_.vocab_size * config_.n_embd - 1;  // the element shifted by 0.5
  EXPECT_FLOAT_EQ(got[head.offset + last], got[wte.offset + last] + 0.5f);
  EXPECT_EQ(got[head.offset], got[wte.offset]);
  EXPECT_EQ(got[head.offset + last + 1], 0.0f) << "the padded rows stay zero";
}

// An untied head and another layer_norm_epsilon (issue 38): written as
// transformers' GPT2LMHeadModel holds them (lm_head.weight outside
// "transformer.", tie_word_embeddings false, layer_norm_epsilon), read back
// exactly, the shape taken from config.json with both, and a run of another
// eps or head refused naming the field. (examples/hf/check_transformers.py
// checks the same model's loss against transformers.)
TEST_F(HfGpt2, UntiedHeadAndEpsRoundTrip) {
  model::GptConfig untied = config_;
  untied.tied_embeddings = false;
  untied.norm_eps = 1e-6;
  EXPECT_NE(untied.describe().find(" eps=1e-06 untied"), std::string::npos) << untied.describe();
  EXPECT_EQ(config_.describe().find("eps"), std::string::npos) << "GPT-2's own eps goes unsaid: " << config_.describe();
  EXPECT_EQ(untied.num_parameters(), config_.num_parameters() + untied.padded_vocab() * untied.n_embd);
  const model::ParamRegistry registry = model::build_gpt_registry(untied);
  const std::vector<float> master = random_model(untied, registry);
  write_hf_gpt2(dir_ / "hf", untied, registry, master.data(), SafetensorsDType::kF32);
  const SafetensorsFile file(dir_ / "hf/model.safetensors");
  ASSERT_TRUE(file.contains("lm_head.weight"));
  EXPECT_EQ(file.entry("lm_head.weight").shape, (std::vector<std::int64_t>{200, 32}));
  const nlohmann::json c = nlohmann::json::parse(read_bytes(dir_ / "hf/config.json"));
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_DOUBLE_EQ(c["layer_norm_epsilon"].get<double>(), 1e-6);

  const std::optional<model::GptConfig> shape = read_hf_config_shape(dir_ / "hf");
  ASSERT_TRUE(shape.has_value());
  EXPECT_TRUE(*shape == untied) << shape->describe();
  std::vector<float> got(master.size(), 0.0f);
  read_init_model(dir_ / "hf", untied, registry, got.data());
  for (const model::ParamInfo& p : registry.entries())
    for (std::int64_t i = 0; i < p.numel(); ++i)
      ASSERT_EQ(got[p.offset + i], master[p.offset + i]) << p.name << " element " << i;

  std::string e = error_of([&] { check_init_model(dir_ / "hf", config_); });
  EXPECT_NE(e.find("config.json has layer_norm_epsilon 1e-06, but this run's model normalises with eps 1e-05"),
            std::string::npos) << e;
  model::GptConfig tied_eps = untied;
  tied_eps.tied_embeddings = true;
  e = error_of([&] { check_init_model(dir_ / "hf", tied_eps); });
  EXPECT_NE(e.find("config.json has tie_word_embeddings false, but this run's model ties its output head"),
            std::string::npos) << e;
  EXPECT_NE(hf_config_difference(*shape, config_).find("tie_word_embeddings false, this run's model has true"),
            std::string::npos) << hf_config_difference(*shape, config_);

  // llm.c's format holds neither.
  e = error_of([&] { write_llmc_model(dir_ / "model.bin", untied, registry, master.data()); });
  EXPECT_NE(e.find("llm.c's GPT-2 format cannot hold an untied output head"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "model.bin"));
}

TEST_F(HfGpt2, DamagedFilesAreRefusedClearly) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const std::string good = read_bytes(dir_ / "hf/model.safetensors");

  write_bytes(dir_ / "truncated.safetensors", good.substr(0, good.size() - 100));
  std::string e = error_of([&] { check_init_model(dir_ / "truncated.safetensors", config_); });
  EXPECT_NE(e.find("truncated or damaged: tensor"), std::string::npos) << e;

  write_bytes(dir_ / "stub.safetensors", good.substr(0, 5));
  e = error_of([&] { SafetensorsFile f(dir_ / "stub.safetensors"); });
  EXPECT_NE(e.find("less than the 8-byte header length"), std::string::npos) << e;

  std::string bytes = raw_file("{}", 0);
  const std::uint64_t huge = 1'000'000;
  std::memcpy(bytes.data(), &huge, 8);
  write_bytes(dir_ / "long_header.safetensors", bytes);
  e = error_of([&] { SafetensorsFile f(dir_ / "long_header.safetensors"); });
  EXPECT_NE(e.find("header length 1000000 exceeds the 2 bytes after it"), std::string::npos) << e;

  write_bytes(dir_ / "dtype.safetensors", raw_file(R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16));
  e = error_of([&] { SafetensorsFile f(dir_ / "dtype.safetensors"); });
  EXPECT_NE(e.find("tensor 'w': unsupported safetensors dtype 'I64'"), std::string::npos) << e;

  write_bytes(dir_ / "bytes.safetensors", raw_file(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16));
  e = error_of([&] { SafetensorsFile f(dir_ / "bytes.safetensors"); });
  EXPECT_NE(e.find("tensor 'w' (F32 [2, 3]) needs 24 bytes, its offsets give 16"), std::string::npos) << e;

  write_bytes(dir_ / "json.safetensors", raw_file("{not json", 0));
  e = error_of([&] { SafetensorsFile f(dir_ / "json.safetensors"); });
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  write_bytes(dir_ / "other.safetensors", raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4));
  e = error_of([&] { check_init_model(dir_ / "other.safetensors", config_); });
  EXPECT_NE(e.find("is not a GPT-2 checkpoint"), std::string::npos) << e;

  std::filesystem::create_directories(dir_ / "empty");
  e = error_of([&] { check_init_model(dir_ / "empty", config_); });
  EXPECT_NE(e.find("has no model.safetensors"), std::string::npos) << e;
}

namespace {

// The tensors of DIR/hf/model.safetensors spread over `shards` files as
// save_pretrained(max_shard_size=...) writes them, round-robin by name, with
// the index's weight_map; `edit` may change the map before it is written.
void write_sharded(const TempDir& dir, const std::string& folder, int shards,
                   const std::function<void(nlohmann::json&)>& edit = nullptr) {
  const SafetensorsFile whole(dir / "hf/model.safetensors");
  std::filesystem::create_directories(dir / folder);
  std::filesystem::copy_file(dir / "hf/config.json", dir / (folder + "/config.json"));
  std::vector<std::vector<SafetensorsOutput>> outputs(static_cast<std::size_t>(shards));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& [name, entry] : whole.entries()) {
    const int s = i++ % shards;
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
    outputs[static_cast<std::size_t>(s)].push_back({name, entry.shape, [&whole, name = name](float* out) { whole.read_f32(name, out); }});
    index["weight_map"][name] = file;
  }
  for (int s = 0; s < shards; ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_safetensors(dir / (folder + "/" + file), outputs[static_cast<std::size_t>(s)], SafetensorsDType::kF32,
                      {{"format", "pt"}});
  }
  if (edit) edit(index);
  std::ofstream(dir / (folder + "/model.safetensors.index.json")) << index.dump(2);
}

}  // namespace

TEST_F(HfGpt2, ReadsShardedFolders) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  write_sharded(dir_, "sharded", 3);
  ASSERT_FALSE(std::filesystem::exists(dir_ / "sharded/model.safetensors"));
  EXPECT_EQ(SafetensorsShards(dir_ / "sharded/model.safetensors.index.json").shard_count(), 3u);
  EXPECT_TRUE(is_hf_model_path(dir_ / "sharded/model.safetensors.index.json"));
  check_init_model(dir_ / "sharded", config_);
  EXPECT_EQ(read_back(dir_ / "sharded"), expected());
  EXPECT_EQ(read_back(dir_ / "sharded/model.safetensors.index.json"), expected());  // the index itself
  // Another shape is still refused naming the tensor, and config.json beside
  // the index is still read.
  model::GptConfig more_heads = config_;
  more_heads.n_head = 4;
  EXPECT_NE(error_of([&] { check_init_model(dir_ / "sharded", more_heads); }).find("config.json has n_head 2"),
            std::string::npos);
}

TEST_F(HfGpt2, InconsistentShardIndexIsRefusedOnOneLine) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const auto refusal = [&](const std::string& folder, const std::function<void(nlohmann::json&)>& edit) {
    write_sharded(dir_, folder, 2, edit);
    const std::string e = error_of([&] { check_init_model(dir_ / folder, config_); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  };
  std::string e = refusal("missing_file", [](nlohmann::json& index) {
    index["weight_map"]["transformer.wpe.weight"] = "model-00009-of-00009.safetensors";
  });
  EXPECT_NE(e.find("weight_map maps tensor 'transformer.wpe.weight' to 'model-00009-of-00009.safetensors', which "
                   "does not exist"),
            std::string::npos)
      << e;

  const auto other_shard = [](const std::string& file) {
    return file == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                      : "model-00001-of-00002.safetensors";
  };
  // wte listed in the shard that holds it, and also written into the other.
  std::string wte_file;
  write_sharded(dir_, "twice", 2, [&](nlohmann::json& index) { wte_file = index["weight_map"]["transformer.wte.weight"]; });
  {
    const SafetensorsFile whole(dir_ / "hf/model.safetensors");
    const std::string other = dir_ / ("twice/" + std::string(other_shard(wte_file)));
    const SafetensorsFile second(other);
    std::vector<SafetensorsOutput> outputs;
    for (const auto& [name, entry] : second.entries())
      outputs.push_back({name, entry.shape, [&second, name = name](float* out) { second.read_f32(name, out); }});
    outputs.push_back({"transformer.wte.weight", whole.entry("transformer.wte.weight").shape,
                       [&whole](float* out) { whole.read_f32("transformer.wte.weight", out); }});
    write_safetensors(other, outputs, SafetensorsDType::kF32, {});
  }
  e = error_of([&] { check_init_model(dir_ / "twice", config_); });
  EXPECT_NE(e.find("tensor 'transformer.wte.weight' is in two shards"), std::string::npos) << e;
  EXPECT_NE(e.find("model-00001-of-00002.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("model-00002-of-00002.safetensors"), std::string::npos) << e;

  e = refusal("moved", [&](nlohmann::json& index) {  // the map names the shard that does not hold it
    nlohmann::json& file = index["weight_map"]["transformer.wte.weight"];
    file = other_shard(file.get<std::string>());
  });
  EXPECT_NE(e.find("tensor 'transformer.wte.weight' is in two shards"), std::string::npos) << e;

  e = refusal("unlisted", [](nlohmann::json& index) { index["weight_map"].erase("transformer.ln_f.bias"); });
  EXPECT_NE(e.find("holds tensor 'transformer.ln_f.bias', which weight_map does not list"), std::string::npos) << e;

  e = refusal("phantom", [](nlohmann::json& index) {
    index["weight_map"]["transformer.h.9.ln_1.weight"] = "model-00001-of-00002.safetensors";
  });
  EXPECT_NE(e.find("maps tensor 'transformer.h.9.ln_1.weight' to 'model-00001-of-00002.safetensors', which has no "
                   "such tensor"),
            std::string::npos)
      << e;

  e = refusal("no_map", [](nlohmann::json& index) { index.erase("weight_map"); });
  EXPECT_NE(e.find("has no \"weight_map\" object"), std::string::npos) << e;
}

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// tiny_bpe.json with its <|endoftext|> (id 0) taken out: a byte-level BPE
// with no token known to begin or end a document.
std::string tokenizer_without_end_of_text(const std::string& path) {
  nlohmann::ordered_json t = nlohmann::ordered_json::parse(read_bytes(TOKENIZER_DATA_DIR "/tiny_bpe.json"));
  t["added_tokens"] = nlohmann::ordered_json::array();
  t["model"]["vocab"].erase("<|endoftext|>");
  write_bytes(path, t.dump(2));
  return path;
}

}  // namespace

// The folder AutoTokenizer, generate() and pipeline() read: the run's
// tokenizer.json as it was, tokenizer_config.json naming <|endoftext|> as bos
// and eos, and its id in config.json and generation_config.json.
TEST_F(HfGpt2, WritesTheTokenizerAndGenerationConfig) {
  const std::string tokenizer = TOKENIZER_DATA_DIR "/tiny_bpe.json";  // <|endoftext|> is id 0
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32, eot_tokenizer(tokenizer, 0));
  EXPECT_EQ(read_bytes(dir_ / "hf/tokenizer.json"), read_bytes(tokenizer)) << "copied byte for byte";
  const nlohmann::json t = read_json(dir_ / "hf/tokenizer_config.json");
  EXPECT_EQ(t["tokenizer_class"], "PreTrainedTokenizerFast");  // takes tokenizer.json as written
  EXPECT_EQ(t["bos_token"], "<|endoftext|>");
  EXPECT_EQ(t["eos_token"], "<|endoftext|>");
  EXPECT_EQ(t["model_max_length"], 16);
  const nlohmann::json c = read_json(dir_ / "hf/config.json");
  EXPECT_EQ(c["bos_token_id"], 0);
  EXPECT_EQ(c["eos_token_id"], 0);
  const nlohmann::json g = read_json(dir_ / "hf/generation_config.json");
  EXPECT_EQ(g, (nlohmann::json{{"bos_token_id", 0}, {"eos_token_id", 0}}));
}

// A tokenizer without <|endoftext|>: every bos/eos null (transformers loads
// the folder with no special tokens; generate() then runs to max_new_tokens).
TEST_F(HfGpt2, TokenizerWithoutEndOfTextWritesNullBosAndEos) {
  const std::string tokenizer = tokenizer_without_end_of_text(dir_ / "no_eot.json");
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32, HfTokenizer{tokenizer, std::nullopt, std::nullopt});
  EXPECT_EQ(read_bytes(dir_ / "hf/tokenizer.json"), read_bytes(tokenizer));
  const nlohmann::json t = read_json(dir_ / "hf/tokenizer_config.json");
  EXPECT_TRUE(t.contains("bos_token") && t["bos_token"].is_null());
  EXPECT_TRUE(t.contains("eos_token") && t["eos_token"].is_null());
  EXPECT_TRUE(read_json(dir_ / "hf/config.json")["bos_token_id"].is_null());
  const nlohmann::json g = read_json(dir_ / "hf/generation_config.json");
  EXPECT_TRUE(g["bos_token_id"].is_null());
  EXPECT_TRUE(g["eos_token_id"].is_null());
}

// No tokenizer (a byte-level run): no tokenizer files, a generation_config.json
// all the same; GPT-2's vocabulary keeps GPT-2's 50256.
TEST_F(HfGpt2, WithoutATokenizerWritesNoTokenizerFiles) {
  // Over a folder that had one: the old tokenizer does not stay beside the new model.
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32,
                eot_tokenizer(TOKENIZER_DATA_DIR "/tiny_bpe.json", 0));
  ASSERT_TRUE(std::filesystem::exists(dir_ / "hf/tokenizer.json"));
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "hf/tokenizer.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "hf/tokenizer_config.json"));
  EXPECT_TRUE(read_json(dir_ / "hf/generation_config.json")["eos_token_id"].is_null());

  model::GptConfig gpt2 = config_;
  gpt2.vocab_size = 50257;
  const model::ParamRegistry registry = model::build_gpt_registry(gpt2);
  const std::vector<float> master(static_cast<std::size_t>(registry.total_numel()), 0.0f);
  write_hf_gpt2(dir_ / "gpt2", gpt2, registry, master.data(), SafetensorsDType::kBF16);
  EXPECT_EQ(read_json(dir_ / "gpt2/config.json")["eos_token_id"], 50256);
  EXPECT_EQ(read_json(dir_ / "gpt2/generation_config.json")["bos_token_id"], 50256);
}

TEST_F(HfGpt2, EndOfTextOutsideTheVocabularyIsRefusedBeforeWriting) {
  const std::string e = error_of([&] {
    write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32,
                  eot_tokenizer(TOKENIZER_DATA_DIR "/gpt2.json", 50256));
  });
  EXPECT_NE(e.find("<|endoftext|> id 50256 is outside the model's vocabulary of 200"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "hf/model.safetensors"));
  const std::string missing = error_of([&] {
    write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32, eot_tokenizer(dir_ / "none.json", 0));
  });
  EXPECT_NE(missing.find("none.json"), std::string::npos) << missing;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "hf/model.safetensors"));
}

// --init-from without --model reads the shape from config.json.
TEST_F(HfGpt2, ConfigShapeIsReadFromTheFolder) {
  write_hf_gpt2(dir_ / "hf", config_, registry_, master_.data(), SafetensorsDType::kF32);
  const std::optional<model::GptConfig> shape = read_hf_config_shape(dir_ / "hf");
  ASSERT_TRUE(shape.has_value());
  EXPECT_TRUE(*shape == config_) << shape->describe();
  EXPECT_TRUE(read_hf_config_shape(dir_ / "hf/model.safetensors") == config_) << "config.json beside the file";
  EXPECT_EQ(hf_config_path(dir_ / "hf"), dir_ / "hf/config.json");

  write_llmc_model(dir_ / "model.bin", config_, registry_, master_.data());
  EXPECT_FALSE(read_hf_config_shape(dir_ / "model.bin").has_value()) << "not a Hugging Face model";
  std::filesystem::create_directories(dir_ / "bare");
  std::filesystem::copy_file(dir_ / "hf/model.safetensors", dir_ / "bare/model.safetensors");
  EXPECT_FALSE(read_hf_config_shape(dir_ / "bare").has_value()) << "no config.json";
  write_bytes(dir_ / "bare/config.json", R"({"n_layer": 2, "n_head": 2})");
  EXPECT_FALSE(read_hf_config_shape(dir_ / "bare").has_value()) << "a config.json without the sizes";
  write_bytes(dir_ / "bare/config.json", R"({"n_layer": 2, "n_head": 2, "n_embd": "32", "n_positions": 16, "vocab_size": 200})");
  const std::string e = error_of([&] { read_hf_config_shape(dir_ / "bare"); });
  EXPECT_NE(e.find("config.json has n_embd \"32\", expected a positive integer"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}
