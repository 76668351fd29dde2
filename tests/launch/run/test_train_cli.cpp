// The `train` program on bad input: each case must print a clear error that
// names the problem, exit non-zero, and leave an existing checkpoint intact.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "launch/formats/hf_llama.h"
#include "launch/resilience/exit_codes.h"
#include "launch/run/metrics.h"
#include "model/gpt_params.h"
#include "tests/launch/process_harness.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

struct Outcome {
  int exit_code;
  std::string output;
};

Outcome run_train(const TempDir& dir, const std::string& args) {
  const std::string log = dir / "train.log";
  // The timeout turns a hang (a bad input that is not refused) into a failure.
  const std::string command = "timeout 120 " + std::string(TRAIN_BIN) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

std::string base_args(const TempDir& dir) {
  return "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 --checkpoint-dir " +
         (dir / "ckpt") + " --train-data " + (dir / "train_*.bin");
}

// Every file under the checkpoint directory with its bytes.
std::map<std::string, std::string> snapshot(const std::string& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    // The folder's lock file names whichever job last held the folder
    // (launch/run/run_lock.h): not a checkpoint, rewritten by every job.
    if (!e.is_regular_file() || e.path().filename() == "run.lock") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    files[e.path().string()] = bytes.str();
  }
  return files;
}

// A shard's bytes by hand: uint16 ids for version 1, uint32 for version 2.
template <typename Id>
void write_raw(const std::string& path, const std::vector<std::int32_t>& header, const std::vector<Id>& tokens,
               std::size_t drop_bytes = 0) {
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.resize(1024, '\0');
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(Id));
  bytes.resize(bytes.size() - drop_bytes);
  std::ofstream(path, std::ios::binary) << bytes;
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_corpus(dir_);
    const Outcome ok = run_train(dir_, base_args(dir_));
    ASSERT_EQ(ok.exit_code, 0) << ok.output;
    before_ = snapshot(dir_ / "ckpt");
    ASSERT_FALSE(before_.empty());
  }
  // Runs a bad configuration and checks the three promises.
  void expect_refused(const std::string& args, const std::string& message) {
    const Outcome bad = run_train(dir_, args);
    EXPECT_NE(bad.exit_code, 0) << bad.output;
    EXPECT_NE(bad.output.find("error"), std::string::npos) << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << "expected '" << message << "' in:\n" << bad.output;
    EXPECT_EQ(snapshot(dir_ / "ckpt"), before_) << "an existing checkpoint changed";
  }
  TempDir dir_{"train_cli"};
  std::map<std::string, std::string> before_;
};

}  // namespace

TEST_F(TrainCli, ShardWithWrongMagic) {
  write_raw(dir_ / "bad.bin", {12345, 1, 100}, std::vector<std::uint16_t>(100, 65));
  expect_refused(base_args(dir_) + " --train-data " + (dir_ / "bad.bin"), "bad magic number 12345");
}

TEST_F(TrainCli, TruncatedShard) {
  write_raw(dir_ / "short.bin", {20240520, 1, 100}, std::vector<std::uint16_t>(100, 65), 10);
  expect_refused(base_args(dir_) + " --train-data " + (dir_ / "short.bin"), "truncated");
}

TEST_F(TrainCli, TokenOutsideTheVocabulary) {
  std::vector<std::uint16_t> tokens(100, 65);
  tokens[7] = 300;  // the byte-level model has 256 tokens
  write_raw(dir_ / "oov.bin", {20240520, 1, 100}, tokens);
  // Another folder: a new run into ckpt/ would be refused for mixing with the first.
  expect_refused(base_args(dir_) + " --train-data " + (dir_ / "oov.bin") + " --checkpoint-dir " + (dir_ / "other"),
                 "outside the vocabulary");
}

// Version 2 shards (uint32 ids, launch/data/token_shard.h): an id past the
// model's vocabulary, in 16 bits or past them, is refused before any step in
// one line naming the shard, the id and the vocabulary size; a good one trains.
TEST_F(TrainCli, Version2ShardTokenOutsideTheVocabulary) {
  for (const std::uint32_t id : {300u, 70000u}) {
    std::vector<std::uint32_t> tokens(100, 65);
    tokens[7] = id;
    const std::string shard = dir_ / ("oov2_" + std::to_string(id) + ".bin");
    write_raw(shard, {20240520, 2, 100, 4}, tokens);
    const Outcome bad = run_train(dir_, base_args(dir_) + " --train-data " + shard + " --checkpoint-dir " +
                                            (dir_ / ("other" + std::to_string(id))));
    EXPECT_NE(bad.exit_code, 0) << bad.output;
    EXPECT_NE(bad.output.find(shard + ": token 7 is " + std::to_string(id) + ", outside the vocabulary of size 256"),
              std::string::npos)
        << bad.output;
    std::size_t errors = 0;
    for (std::size_t at = bad.output.find("error:"); at != std::string::npos; at = bad.output.find("error:", at + 1))
      ++errors;
    EXPECT_EQ(errors, 1u) << bad.output;
    EXPECT_NE(bad.output.find("stopped before step 1 (no step taken"), std::string::npos) << bad.output;
  }
}

TEST_F(TrainCli, Version2ShardTrains) {
  std::vector<std::uint32_t> tokens(400);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i % 256);
  write_raw(dir_ / "wide.bin", {20240520, 2, 400, 4}, tokens);
  const Outcome ok = run_train(dir_, base_args(dir_) + " --train-data " + (dir_ / "wide.bin") + " --checkpoint-dir " +
                                         (dir_ / "wide_run"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// 1-bit Adam frozen before its variance settles (2 / (1 - beta2) steps) is
// allowed but warned about on one line; frozen later, nothing is said.
TEST_F(TrainCli, EarlyOneBitFreezeIsWarnedAbout) {
  const std::string onebit = base_args(dir_) + " --optimizer onebit-adam --checkpoint-dir " + (dir_ / "onebit_run");
  const Outcome early = run_train(dir_, onebit + " --freeze-step 5");
  EXPECT_EQ(early.exit_code, 0) << early.output;
  EXPECT_NE(early.output.find("warning    --freeze-step 5 freezes Adam's variance before it settles (about 40 "
                              "steps at beta2 0.95)"),
            std::string::npos)
      << early.output;
  const Outcome settled = run_train(dir_, onebit + "_2 --freeze-step 40");
  EXPECT_EQ(settled.exit_code, 0) << settled.output;
  EXPECT_EQ(settled.output.find("freezes Adam's variance"), std::string::npos) << settled.output;
}

TEST_F(TrainCli, HeadsThatDoNotDivideTheWidth) {
  expect_refused(base_args(dir_) + " --n-head 3", "n_head (3) must divide n_embd (32)");
}

TEST_F(TrainCli, CheckpointOfAnotherShape) {
  expect_refused(base_args(dir_) + " --n-layer 3 --steps 4 --resume latest", "different run");
}

TEST_F(TrainCli, InitFromAModelOfAnotherShape) {
  expect_refused(base_args(dir_) + " --n-embd 64 --init-from " + (dir_ / "ckpt/step_00000002/model.bin"),
                 "another shape");
}

TEST_F(TrainCli, InitFromAHuggingFaceFolderOfAnotherShape) {
  const Outcome saved = run_train(dir_, base_args(dir_) + " --checkpoint-dir " + (dir_ / "hf_run") + " --save-hf " +
                                            (dir_ / "hf") + " --save-hf-dtype bf16");
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // Its config.json says the shape: a --model or shape flag that disagrees is refused naming both.
  expect_refused(base_args(dir_) + " --n-embd 64 --init-from " + (dir_ / "hf"),
                 "holds a model of another shape: its config.json says L=2 H=2 C=32 V=256(256) T=64, --model "
                 "gpt-micro --n-embd 64 asks for L=2 H=2 C=64 V=256(256) T=64");
  expect_refused(base_args(dir_) + " --model gpt-demo --init-from " + (dir_ / "hf"), "--model gpt-demo asks for");
  // Without config.json, the tensors tell.
  std::filesystem::remove(dir_ / "hf/config.json");
  expect_refused(base_args(dir_) + " --n-embd 64 --init-from " + (dir_ / "hf"),
                 "tensor 'transformer.wte.weight' is [256, 32], this run's model");
  const Outcome fp16 = run_train(dir_, base_args(dir_) + " --save-hf " + (dir_ / "hf2") + " --save-hf-dtype fp16");
  EXPECT_NE(fp16.exit_code, 0);
  EXPECT_NE(fp16.output.find("--save-hf-dtype: fp16 not in {fp32,bf16}"), std::string::npos) << fp16.output;
}

// --init-from a Hugging Face folder without --model: the shape comes from its
// config.json (n_layer, n_head, n_embd, n_positions, vocab_size).
TEST_F(TrainCli, InitFromAHuggingFaceFolderTakesItsShapeWithoutModel) {
  const std::string common = "--micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 --train-data " +
                             (dir_ / "train_*.bin");
  const Outcome saved = run_train(dir_, base_args(dir_) + " --checkpoint-dir " + (dir_ / "hf_run") + " --save-hf " +
                                            (dir_ / "hf"));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // gpt-micro's shape, not gpt-demo's (the default without --init-from).
  const Outcome loaded = run_train(dir_, common + " --init-from " + (dir_ / "hf"));
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_NE(loaded.output.find("model      " + (dir_ / "hf/config.json") + ": L=2 H=2 C=32 V=256(256) T=64"),
            std::string::npos) << loaded.output;
  // A shape flag that agrees is fine.
  const Outcome agreeing = run_train(dir_, common + " --n-layer 2 --init-from " + (dir_ / "hf"));
  EXPECT_EQ(agreeing.exit_code, 0) << agreeing.output;
  // Without --model and with a disagreeing flag: refused naming both.
  const Outcome deeper = run_train(dir_, common + " --n-layer 3 --init-from " + (dir_ / "hf"));
  EXPECT_NE(deeper.exit_code, 0);
  EXPECT_NE(deeper.output.find("its config.json says L=2 H=2 C=32 V=256(256) T=64, --n-layer 3 asks for L=3"),
            std::string::npos) << deeper.output;
}

// --save-hf exports the run's tokenizer (AutoTokenizer reads the folder); a
// byte-level run's folder has none, and one line says so and how to get one.
TEST_F(TrainCli, SaveHfExportsTheTokenizerOrSaysThereIsNone) {
  const std::string tokenizer = TOKENIZER_DATA_DIR "/tiny_bpe.json";  // 600 tokens, <|endoftext|> = 0
  const Outcome with = run_train(dir_, base_args(dir_) + " --checkpoint-dir " + (dir_ / "run1") + " --tokenizer " +
                                           tokenizer + " --save-hf " + (dir_ / "hf"));
  ASSERT_EQ(with.exit_code, 0) << with.output;
  for (const char* file : {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json"})
    EXPECT_TRUE(std::filesystem::exists(dir_ / (std::string("hf/") + file))) << file;
  EXPECT_EQ(with.output.find("has no tokenizer"), std::string::npos) << with.output;
  std::ifstream config(dir_ / "hf/tokenizer_config.json");
  EXPECT_EQ(nlohmann::json::parse(config)["eos_token"], "<|endoftext|>");

  const Outcome without = run_train(dir_, base_args(dir_) + " --checkpoint-dir " + (dir_ / "run2") + " --save-hf " +
                                              (dir_ / "hf_bytes"));
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "hf_bytes/generation_config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "hf_bytes/tokenizer.json"));
  EXPECT_NE(without.output.find("has no tokenizer: the run had no --tokenizer"), std::string::npos) << without.output;
}

// --init-from a Llama-family folder: config.json gives the architecture and
// shape without --model (Llama or Qwen2, tied or not); a --model or shape flag
// that disagrees is refused naming the field; --save-hf writes the
// architecture back; --save-model (llm.c's GPT-2 format) is refused up front.
TEST_F(TrainCli, InitFromALlamaFamilyFolder) {
  const std::string common = "--micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 --train-data " +
                             (dir_ / "train_*.bin");
  // llama-micro (q/k/v bias, untied head: Qwen2's kind) trained and exported.
  const Outcome saved = run_train(dir_, common + " --model llama-micro --checkpoint-dir " + (dir_ / "q_run") +
                                            " --save-hf " + (dir_ / "qwen2"));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  EXPECT_NE(saved.output.find("(Hugging Face Qwen2ForCausalLM: model.safetensors"), std::string::npos) << saved.output;
  const Outcome loaded = run_train(dir_, common + " --init-from " + (dir_ / "qwen2"));
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
  EXPECT_NE(loaded.output.find("model      " + (dir_ / "qwen2/config.json") +
                               ": L=2 H=4 C=32 V=256(256) T=64 llama KV=2 F=64 rope=10000 eps=1e-05 qkv-bias untied,"),
            std::string::npos) << loaded.output;
  expect_refused(base_args(dir_) + " --init-from " + (dir_ / "qwen2"),
                 "(config.json's model_type \"qwen2\", this run's model has \"gpt2\"; leave out --model");
  expect_refused(common + " --model llama-micro --n-layer 3 --init-from " + (dir_ / "qwen2"),
                 "--model llama-micro --n-layer 3 asks for L=3 H=4 C=32 V=256(256) T=64 llama KV=2 F=64 rope=10000 "
                 "eps=1e-05 qkv-bias untied (config.json's num_hidden_layers 2, this run's model has 3;");
  expect_refused(common + " --model llama-micro --n-kv-head 4 --init-from " + (dir_ / "qwen2"),
                 "(config.json's num_key_value_heads 2, this run's model has 4;");

  // A Llama folder (no bias, tied head) as transformers would write one:
  // loaded without --model and exported as LlamaForCausalLM.
  model::GptConfig llama = model::gpt_preset("llama-micro");
  llama.qkv_bias = false;
  llama.tied_embeddings = true;
  const model::ParamRegistry registry = model::build_gpt_registry(llama);
  std::vector<float> master(static_cast<std::size_t>(registry.total_numel()));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : master) v = normal(rng);
  launch::write_hf_llama(dir_ / "llama", llama, registry, master.data(), launch::SafetensorsDType::kF32);
  const Outcome llama_run = run_train(dir_, common + " --checkpoint-dir " + (dir_ / "l_run") + " --init-from " +
                                                (dir_ / "llama") + " --save-hf " + (dir_ / "llama_out"));
  ASSERT_EQ(llama_run.exit_code, 0) << llama_run.output;
  EXPECT_NE(llama_run.output.find("T=64 llama KV=2 F=64 rope=10000 eps=1e-05, "), std::string::npos)
      << llama_run.output;
  EXPECT_NE(llama_run.output.find("(Hugging Face LlamaForCausalLM: model.safetensors"), std::string::npos)
      << llama_run.output;
  expect_refused(common + " --model llama-micro --init-from " + (dir_ / "llama"),
                 "(config.json's model_type \"llama\", this run's model has \"qwen2\";");
}

TEST_F(TrainCli, ZeroConfigurationsThatCannotWork) {
  expect_refused(base_args(dir_) + " --zero 4", "expected a ZeRO stage 0, 1, 2 or 3");
  expect_refused(base_args(dir_) + " --zero 2 --optimizer onebit-adam --freeze-step 2",
                 "onebit-adam composes with --zero 0 or 1");
}

TEST_F(TrainCli, UnwritableCheckpointAndLogFoldersBeforeAnyStep) {
  std::ofstream(dir_ / "a_file") << "not a folder";
  const std::string args = "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 "
                           "--train-data " + (dir_ / "train_*.bin");
  expect_refused(args + " --checkpoint-dir " + (dir_ / "a_file/ckpt"), "--checkpoint-dir");
  expect_refused(base_args(dir_) + " --log-file " + (dir_ / "a_file/metrics.jsonl"), "--log-file");
  const Outcome bad = run_train(dir_, args + " --checkpoint-dir " + (dir_ / "a_file/ckpt"));
  EXPECT_EQ(bad.output.find("step 1/"), std::string::npos) << "no step may run before the check:\n" << bad.output;
}

TEST_F(TrainCli, NonFiniteFlagValues) {
  expect_refused(base_args(dir_) + " --lr nan", "--lr nan is not a finite number");
  expect_refused(base_args(dir_) + " --grad-clip inf", "--grad-clip inf is not a finite number");
}

TEST_F(TrainCli, NoShardMatches) {
  expect_refused(base_args(dir_) + " --train-data " + (dir_ / "missing_*.bin"), "no file matches");
}

TEST_F(TrainCli, JsonConfigAndFlagOverride) {
  // A config file feeds the same flags; the command line wins over it.
  std::ofstream(dir_ / "run.json") << R"({"model": "gpt-micro", "batch": {"micro-batch": 2, "seq-len": 16}, "steps": 1,
                                        "device": "cpu", "peak-tflops": 1})";
  const Outcome ok = run_train(dir_, "--config " + (dir_ / "run.json") + " --steps 3 --train-data " + (dir_ / "train_*.bin"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("step 3/3"), std::string::npos) << ok.output;
  std::ofstream(dir_ / "bad.json") << R"({"modle": "gpt-micro"})";
  const Outcome bad = run_train(dir_, "--config " + (dir_ / "bad.json") + " --train-data " + (dir_ / "train_*.bin"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("modle"), std::string::npos) << bad.output;
  // A flag set twice (groups are flattened) is refused before anything runs,
  // on one line that names the file and the key.
  std::ofstream(dir_ / "twice.json") << R"({"steps": 1, "batch": {"steps": 2}})";
  const Outcome twice = run_train(dir_, "--config " + (dir_ / "twice.json") + " --train-data " + (dir_ / "train_*.bin"));
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_EQ(twice.output.substr(0, twice.output.find('\n')),
            "error: config file '" + (dir_ / "twice.json") + "': key 'steps' is given twice ('steps' and 'batch.steps' "
            "set the same flag) (run with --help for the flags)") << twice.output;
}

// Every boolean in every spelling (a bare switch, --flag true|false,
// --flag=false, --no-flag); a refused command line is one line with the
// error: prefix, unknown arguments in the order given; a bad input carries no
// source location.
TEST_F(TrainCli, SwitchesInEverySpellingAndOneLineUsageErrors) {
  const std::string run = "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 1 --device cpu --peak-tflops 1 "
                          "--sample-tokens 0 --train-data " + (dir_ / "train_*.bin");
  for (const std::string& spelling : {"--overlap-grad-reduce --seed 3", "--overlap-grad-reduce true --steps 1",
                                      "--overlap-grad-reduce=false", "--no-overlap-grad-reduce", "--shuffle false",
                                      "--no-shuffle --async-checkpoint off"}) {
    const Outcome ok = run_train(dir_, run + " " + spelling);
    EXPECT_EQ(ok.exit_code, 0) << spelling << "\n" << ok.output;
  }
  const Outcome extras = run_train(dir_, run + " --bogus 1 --also");
  EXPECT_EQ(extras.exit_code, launch::kExitUsage) << extras.output;
  EXPECT_EQ(extras.output.substr(0, extras.output.find('\n')),
            "error: unexpected arguments: --bogus 1 --also (run with --help for the flags)") << extras.output;
  const Outcome preset = run_train(dir_, run + " --model no-such-model");
  EXPECT_EQ(preset.exit_code, launch::kExitUsage) << preset.output;
  EXPECT_NE(preset.output.find("error: unknown model preset 'no-such-model'"), std::string::npos) << preset.output;
  EXPECT_EQ(preset.output.find(".cpp:"), std::string::npos) << "no source location: " << preset.output;
}

// llm.c's gpt2_tokenizer.bin decodes the sample, which starts a document at
// its end-of-text id; it cannot encode, so another prompt is refused.
TEST_F(TrainCli, LlmcTokenizerDecodesTheSampleAndRefusesAPrompt) {
  // A version 2 file of 300 tokens: the 256 bytes, 43 two-byte tokens and an end-of-text.
  std::vector<std::uint32_t> header(256, 0);
  header[0] = 20240328, header[1] = 2, header[2] = 300, header[3] = 299;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (int b = 0; b < 256; ++b) bytes += std::string{'\x01', static_cast<char>(b)};
  for (int i = 0; i < 43; ++i) bytes += std::string{'\x02', static_cast<char>('a' + i % 26), 'z'};
  bytes += std::string("\x05<eot>");
  std::ofstream(dir_ / "gpt2_tokenizer.bin", std::ios::binary) << bytes;
  const std::string args = "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 "
                           "--train-data " + (dir_ / "train_*.bin") + " --tokenizer " + (dir_ / "gpt2_tokenizer.bin");
  const Outcome ok = run_train(dir_, args + " --sample-tokens 8");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("V=300"), std::string::npos) << "the tokenizer sets the vocabulary:\n" << ok.output;
  EXPECT_NE(ok.output.find("sample     ----"), std::string::npos) << ok.output;
  const Outcome prompt = run_train(dir_, args + " --sample-tokens 8 --sample-prompt Hello");
  EXPECT_NE(prompt.exit_code, 0) << prompt.output;
  EXPECT_NE(prompt.output.find("--sample-prompt needs a tokenizer that encodes"), std::string::npos) << prompt.output;
}

// A layout that cannot work is refused by every rank alike: one message,
// every rank non-zero, nobody left waiting. Tried on several rank counts.
TEST(TrainCliMpi, BadGridExitsNonZeroWithOneMessageOnEveryRankCount) {
  TempDir dir("train_cli_grid");
  write_corpus(dir);
  struct Case {
    int ranks;
    std::string flags, message;
  };
  const Case cases[] = {
      {1, "--tp 2", "does not divide world_size 1"},
      {2, "--tp 2 --n-head 3 --n-embd 48", "n_head 3 is not divisible by tp 2"},
      {4, "--pp 4", "2 layers cannot fill 4 pipeline stages"},
      {4, "--tp 2 --dp 3", "tp * dp * pp = 6 but world_size is 4"},
      {3, "--dp 3 --batch-tokens 32", "micro-batches must divide the batch"},
  };
  for (const Case& c : cases) {
    const std::string log = dir / "grid.log";
    const std::string command =
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 60 " +
        std::string(MPIEXEC) + " --oversubscribe -np " + std::to_string(c.ranks) + " " + TRAIN_BIN +
        " --model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 --train-data " +
        (dir / "train_*.bin") + " " + c.flags + " > " + log + " 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(command.c_str());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string out = text.str();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124)
        << c.flags << " on " << c.ranks << " ranks:\n" << out;
    std::size_t count = 0;
    for (std::size_t at = out.find(c.message); at != std::string::npos; at = out.find(c.message, at + 1)) ++count;
    EXPECT_EQ(count, 1u) << c.flags << " on " << c.ranks << " ranks: expected '" << c.message << "' once in:\n" << out;
    EXPECT_LT(seconds, 30.0) << c.flags << " on " << c.ranks << " ranks took " << seconds << " s";
  }
}

// The step line says how long the run has taken and how long it will take
// (elapsed since start-up, ETA from the mean step time leaving the first
// out), compactly; the JSONL has both in seconds (issue 36, item 8).
TEST(TrainCliOutput, StepLineHasElapsedAndEta) {
  TempDir dir("train_cli_eta");
  write_corpus(dir);
  const Outcome ok = run_train(dir, "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 3 --device cpu "
                                    "--peak-tflops 1 --train-data " + (dir / "train_*.bin") + " --log-file " +
                                    (dir / "m.jsonl"));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const std::regex line(R"(step 3/3 \| .* \| mem [^|]+ \| elapsed [0-9]+s eta 0s)");
  EXPECT_TRUE(std::regex_search(ok.output, line)) << ok.output;
  EXPECT_TRUE(std::regex_search(ok.output, std::regex(R"(step 1/3 \| .* \| elapsed [0-9]+s eta [0-9]+s)"))) << ok.output;
  std::ifstream in(dir / "m.jsonl");
  int steps = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json r = nlohmann::json::parse(text);
    if (!r.contains("loss")) continue;
    ++steps;
    EXPECT_TRUE(r["elapsed_s"].is_number() && r["elapsed_s"].get<double>() > 0) << text;
    EXPECT_TRUE(r["eta_s"].is_number() && r["eta_s"].get<double>() >= 0) << text;
    if (r["step"] == 3) EXPECT_EQ(r["eta_s"].get<double>(), 0.0) << text;
  }
  EXPECT_EQ(steps, 3);
  // Counts agree with their nouns (issue 36, item 12).
  EXPECT_NE(ok.output.find(" tokens per micro-batch, 1 micro-batch per data-parallel rank,"), std::string::npos) << ok.output;
  EXPECT_EQ(launch::counted(1, "step"), "1 step");
  EXPECT_EQ(launch::counted(2, "micro-batch", "micro-batches"), "2 micro-batches");
  EXPECT_EQ(launch::MetricsLog::format_compact_duration(62.4), "1m02s");
  EXPECT_EQ(launch::MetricsLog::format_compact_duration(3 * 3600 + 7 * 60 + 20), "3h07m");
  EXPECT_EQ(launch::MetricsLog::format_compact_duration(4.6), "5s");
}

// Each line reaches a pipe as it is printed, not in a block with the first
// step line: the start-up lines are there while the CPU peak is measured (an
// empty cache: about a second), before step 1 (issue 36, item 8).
TEST(TrainCliOutput, StartUpLinesReachAPipeBeforeTheFirstStep) {
  TempDir dir("train_cli_pipe");
  write_corpus(dir);
  Child train({"sh", "-c",
               std::string(TRAIN_BIN) + " --model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu "
               "--train-data '" + (dir / "train_*.bin") + "' | cat"},
              dir / "piped.out", dir / "piped.err", {"ENGINE_CACHE_DIR=" + (dir / "cache")});
  std::string seen;
  ASSERT_TRUE(wait_until([&] { return (seen = read_text(dir / "piped.out")).find("model ") != std::string::npos; }, 120))
      << read_text(dir / "piped.err");
  EXPECT_EQ(seen.find("step 1/2"), std::string::npos)
      << "the start-up lines arrived only with the first step line:\n" << seen;
  EXPECT_EQ(train.wait(120), 0) << train.err();
  EXPECT_NE(train.out().find("step 2/2"), std::string::npos) << train.out();
}

// A resume that finds nothing is bad input (exit 65, one line) and writes
// nothing: no run folder, no metrics file, so a fresh start in that folder
// is not refused as another run's (issue 36, item 10).
TEST(TrainCliResume, ResumeThatFindsNothingWritesNothing) {
  TempDir dir("train_cli_resume_nothing");
  write_corpus(dir);
  const std::string run = "--model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --peak-tflops 1 "
                          "--train-data " + (dir / "train_*.bin");
  const std::pair<std::string, std::string> cases[] = {
      {" --run-dir " + (dir / "run"), dir / "run"},
      {" --checkpoint-dir " + (dir / "ckpt") + " --log-file " + (dir / "m.jsonl"), dir / "m.jsonl"}};
  for (const auto& [where, output] : cases) {
    const Outcome failed = run_train(dir, run + where + " --resume latest");
    EXPECT_EQ(failed.exit_code, launch::kExitBadInput) << where << "\n" << failed.output;
    EXPECT_NE(failed.output.find("error: --resume latest: no checkpoint to resume from"), std::string::npos)
        << failed.output;
    EXPECT_EQ(std::count(failed.output.begin(), failed.output.end(), '\n'), 1) << failed.output;
    EXPECT_FALSE(std::filesystem::exists(output)) << "a failed resume wrote " << output;
    EXPECT_FALSE(std::filesystem::exists(dir / "ckpt")) << "a failed resume created the checkpoint folder";
    const Outcome fresh = run_train(dir, run + where);
    EXPECT_EQ(fresh.exit_code, 0) << where << "\n" << fresh.output;
  }
}

// The step line's `mem` (the JSONL's peak_memory_bytes) is what the memory
// plan says a step holds, byte for byte, also after start-up measured the
// CPU peak (an empty cache: its GEMM operands, 48 MiB, are freed before step
// 1 and not counted) (issue 36, item 4).
TEST(TrainCliMemory, StepPeakEqualsThePlanAfterTheCpuPeakProbe) {
  TempDir dir("train_cli_mem");
  write_corpus(dir);
  const std::string log = dir / "out.log";
  const std::string command = "ENGINE_CACHE_DIR=" + (dir / "cache") + " timeout 120 " + std::string(TRAIN_BIN) +
                              " --model gpt-micro --micro-batch 2 --seq-len 16 --steps 2 --device cpu --train-data " +
                              (dir / "train_*.bin") + " --log-file " + (dir / "m.jsonl") + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  const std::string out = read_text(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  ASSERT_NE(out.find("measured"), std::string::npos) << "the CPU peak was not measured:\n" << out;
  std::ifstream in(dir / "m.jsonl");
  std::int64_t planned = -1;
  int steps = 0;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json r = nlohmann::json::parse(text);
    if (r.value("event", "") == "memory") planned = r["planned"]["total"].get<std::int64_t>();
    if (!r.contains("loss")) continue;
    ++steps;
    ASSERT_GT(planned, 0) << "no memory event before the steps";
    EXPECT_EQ(r["peak_memory_bytes"].get<std::int64_t>(), planned) << text << "\n" << out;
  }
  EXPECT_EQ(steps, 2);
}

// --layout auto (launch/run/auto_layout.h): the planner's choice for a
// cluster file, kept flags, the refusals.
namespace {
void write_cpu_cluster(const std::string& path, double memory_gib) {
  std::ofstream(path) << R"({"name": "test-cpu", "device": "cpu", "devices_per_node": 8, "peak_tflops": 0.02,
    "memory_gib": )" << memory_gib << R"(, "gemm_efficiency": 0.5, "memory_bandwidth_gb_per_s": 10, "op_overhead_us": 5,
    "intra_node": {"bandwidth_gb_per_s": 5, "latency_us": 2}, "inter_node": {"bandwidth_gb_per_s": 1, "latency_us": 20}})";
}
}  // namespace

TEST_F(TrainCli, LayoutAutoChoosesWithThePlannerAndKeepsFlagsGivenByHand) {
  write_cpu_cluster(dir_ / "cpu.json", 16);
  const std::string args = "--model gpt-micro --seq-len 16 --batch-tokens 128 --steps 2 --device cpu --peak-tflops 1 "
                           "--train-data " + (dir_ / "train_*.bin") + " --layout auto --cluster " + (dir_ / "cpu.json");
  const Outcome chosen = run_train(dir_, args);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("auto       tp 1 pp 1 dp 1 micro-batch "), std::string::npos) << chosen.output;
  EXPECT_NE(chosen.output.find("layouts the planner ranked for cluster file " + (dir_ / "cpu.json")), std::string::npos);
  EXPECT_NE(chosen.output.find("layout auto: predicted "), std::string::npos) << chosen.output;
  const Outcome kept = run_train(dir_, args + " --micro-batch 2 --recompute selective");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_NE(kept.output.find("micro-batch 2 zero 0 recompute selective"), std::string::npos) << kept.output;
}

TEST_F(TrainCli, LayoutAutoRefusals) {
  const std::string args = "--model gpt-micro --seq-len 16 --batch-tokens 128 --steps 2 --device cpu "
                           "--train-data " + (dir_ / "train_*.bin") + " --layout auto";
  write_cpu_cluster(dir_ / "tiny.json", 1e-6);
  expect_refused(args + " --cluster " + (dir_ / "tiny.json"), "--layout auto: no layout fits the ");
  expect_refused(args + " --calibrate-seconds 0", "must be in (0, 600]");
  expect_refused(args + " --cluster " + (dir_ / "tiny.json") + " --device cuda",
                 "--layout auto: --device cuda, but the plan's cluster file " + (dir_ / "tiny.json") +
                     " describes cpu devices");
  const Outcome nearest = run_train(dir_, args + " --cluster " + (dir_ / "tiny.json"));
  EXPECT_NE(nearest.output.find("nearest: tp 1 pp 1 dp 1 micro-batch 1"), std::string::npos) << nearest.output;
  expect_refused("--model gpt-micro --seq-len 16 --steps 2 --device cpu --train-data " + (dir_ / "train_*.bin") +
                     " --cluster " + (dir_ / "tiny.json"),
                 "--cluster is read by --layout auto only");
}

// --layout auto without --cluster: the job measures its machine (plan
// --calibrate's measurements at the model's width), caches the cluster file
// under ENGINE_CACHE_DIR and plans with it; the next job on the same machine
// reads the cache; a damaged cache file is measured again and replaced.
TEST_F(TrainCli, LayoutAutoWithoutAClusterCalibratesOnceAndCaches) {
  const std::string cache = dir_ / "cache";
  const std::string command = "ENGINE_CACHE_DIR=" + cache + " timeout 300 " + std::string(TRAIN_BIN) +
                              " --model gpt-micro --seq-len 16 --batch-tokens 128 --steps 2 --device cpu "
                              "--peak-tflops 1 --train-data " + (dir_ / "train_*.bin") +
                              " --layout auto --calibrate-seconds 0.2";
  const auto run = [&](const std::string& name) {
    const std::string log = dir_ / name;
    const int status = std::system((command + " > " + log + " 2>&1").c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);
    return read_text(log);
  };
  const std::string first = run("first.log");
  EXPECT_NE(first.find("layouts the planner ranked for this machine, calibrated now in "), std::string::npos) << first;
  EXPECT_NE(first.find("cached at " + cache + "/cluster-"), std::string::npos) << first;
  EXPECT_NE(first.find("layout auto: predicted "), std::string::npos) << first;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(cache))
    if (entry.path().filename().string().rfind("cluster-", 0) == 0) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  const std::string second = run("second.log");
  EXPECT_NE(second.find("ranked for this machine's cached calibration " + files.front().string()), std::string::npos)
      << second;
  EXPECT_EQ(second.find("calibrated now"), std::string::npos) << second;
  std::ofstream(files.front(), std::ios::trunc) << "{\"name\": \"damaged\"";
  const std::string third = run("third.log");
  EXPECT_NE(third.find("calibrated now in "), std::string::npos) << third;
  EXPECT_NE(third.find("the cached file was not used: it does not read as a cluster file"), std::string::npos) << third;
  EXPECT_NE(read_text(files.front()).find("-calibrated ["), std::string::npos) << "the damaged file was not replaced";
}

// --layout auto without --cluster when one rank fails before the others ask
// for the machine's calibration (a collective): nobody starts it, the job
// ends with that rank's error instead of waiting for it (two ranks, the second
// given a broken --init-from folder through mpirun's MPMD form).
TEST(TrainCliMpi, LayoutAutoCalibrationIsNotStartedWhenARankFailedFirst) {
  TempDir dir("train_cli_auto_calibration_failure");
  write_corpus(dir);
  std::filesystem::create_directories(dir / "broken");
  std::ofstream(std::filesystem::path(dir / "broken") / "config.json") << "{";
  const std::string common = " --model gpt-micro --seq-len 16 --batch-tokens 128 --steps 2 --device cpu --peak-tflops 1 "
                             "--train-data " + (dir / "train_*.bin") + " --layout auto";
  const std::string log = dir / "out.log";
  const std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ENGINE_CACHE_DIR=" +
                              (dir / "cache") + " timeout 60 " + std::string(MPIEXEC) + " --oversubscribe -np 1 " +
                              TRAIN_BIN + common + " : -np 1 " + TRAIN_BIN + common + " --init-from " + (dir / "broken") +
                              " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  const std::string out = read_text(log);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_NE(WEXITSTATUS(status), 124) << "the job hung until the timeout:\n" << out;
  EXPECT_NE(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("config.json' beside the model is not valid JSON"), std::string::npos) << out;
  EXPECT_EQ(out.find("calibrated now"), std::string::npos) << out;
}

// --layout auto on a pipeline: the planner chooses the interleaved
// schedule's chunks per rank (or the zero-bubble schedule) with the rest of
// the layout, and the run trains with what it chose. Four ranks, pp 4 given.
TEST(TrainCliMpi, LayoutAutoChoosesPipelineSchedulesAndVirtualStages) {
  TempDir dir("train_cli_auto_pipeline");
  write_corpus(dir);
  write_cpu_cluster(dir / "cpu.json", 16);
  struct Case {
    std::string flags, chosen;
  };
  const Case cases[] = {
      {"--pipeline-schedule interleaved", "pp 4 dp 1 micro-batch 1 zero 0 recompute none schedule interleaved x2"},
      {"--pipeline-schedule zb-h1", "schedule zb-h1"},
      // ZB-V: the auto layout is run with its two chunks per rank in a V.
      {"--pipeline-schedule zb-v", "schedule zb-v"},
  };
  for (const Case& c : cases) {
    const std::string log = dir / "auto.log";
    const std::string command =
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 120 " +
        std::string(MPIEXEC) + " --oversubscribe -np 4 " + TRAIN_BIN +
        " --model gpt-micro --n-layer 8 --seq-len 16 --batch-tokens 128 --steps 2 --device cpu --peak-tflops 1 "
        "--micro-batch 1 --recompute none --train-data " + (dir / "train_*.bin") + " --layout auto --cluster " +
        (dir / "cpu.json") + " --pp 4 " + c.flags + " > " + log + " 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    const std::string out = text.str();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << c.flags << ":\n" << out;
    EXPECT_NE(out.find(c.chosen), std::string::npos) << c.flags << ":\n" << out;
    EXPECT_NE(out.find("layout auto: predicted "), std::string::npos) << c.flags << ":\n" << out;
  }
}
