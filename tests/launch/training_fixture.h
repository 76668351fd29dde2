// Shared set-up of the training tests: a small fixed English corpus written as
// token shards in a fresh temporary directory, and a tiny-GPT TrainConfig.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "launch/data/byte_tokenizer.h"
#include "launch/data/token_shard.h"
#include "launch/run/train_config.h"
#include "launch/run/trainer.h"

namespace test_support {

// A few paragraphs of plain English; repeated, they make a corpus a tiny
// model can learn well within a few hundred steps.
inline const char* kCorpusText =
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.\n"
    "All that glitters is not gold. Fortune favours the bold, and the early bird catches the worm.\n"
    "Time and tide wait for no man. Actions speak louder than words. Practice makes perfect.\n"
    "Where there is a will there is a way. Knowledge is power, and a penny saved is a penny earned.\n";

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            (tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

inline std::vector<std::uint16_t> corpus_tokens(int repeats) {
  std::string text;
  for (int i = 0; i < repeats; ++i) text += kCorpusText;
  return launch::ByteTokenizer().encode(text);
}

// Writes train and val shards of the corpus into `dir`.
inline void write_corpus(const TempDir& dir) {
  const auto tokens = corpus_tokens(40);
  launch::write_token_shard(dir / "train_000.bin", tokens);
  launch::write_token_shard(dir / "val_000.bin", corpus_tokens(3));
}

// The device the training tests run on: the CPU, unless ENGINE_TEST_DEVICE
// names another (cuda: on a GPU machine the same checks run on CUDA tensors in
// fp32, ranks sharing the GPU; examples/gpu/checks.sh). The ranks then talk
// through the MPI communicator, or with ENGINE_TEST_COMM=nccl-double through
// NCCL's stream protocol over the test double (parallel/nccl_host_double.h).
inline void use_test_device(launch::TrainConfig& c) {
  const char* env = std::getenv("ENGINE_TEST_DEVICE");
  c.device = env != nullptr && *env != '\0' ? env : "cpu";
  if (c.device != "cpu") {
    c.precision = "fp32";  // the parity rules are float32's
    // Ranks share the one GPU, which NCCL itself refuses (the H100 run of 2026-11-23).
    const char* comm = std::getenv("ENGINE_TEST_COMM");
    c.comm = comm != nullptr && *comm != '\0' ? comm : "mpi";
  }
}

// The GPU count to resolve a test's config with: the visible GPUs when
// ENGINE_TEST_DEVICE names one, else none (CPU runs never look for a GPU).
inline int test_cuda_devices() {
  const char* env = std::getenv("ENGINE_TEST_DEVICE");
  return env != nullptr && *env != '\0' && std::string(env) != "cpu" ? engine::cuda_device_count() : 0;
}

// A tiny GPT on that corpus, fp32, deterministic (CPU unless ENGINE_TEST_DEVICE).
inline launch::TrainConfig tiny_config(const TempDir& dir, std::int64_t steps) {
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.micro_batch = 4;
  c.seq_len = 32;
  c.batch_tokens = 4 * 32 * 2;  // two micro-batches: gradient accumulation is exercised
  c.steps = steps;
  c.lr = 3e-3;
  c.warmup_steps = 5;
  c.train_data = dir / "train_*.bin";
  c.val_data = dir / "val_*.bin";
  use_test_device(c);
  c.peak_tflops = 1.0;  // skip the start-up measurement
  return c;
}

// Trains `config` in this process alone; `log` (optional) receives what the
// trainer printed.
inline launch::RunSummary train_one_process(launch::TrainConfig config, std::string* log = nullptr) {
  config.resolve(test_cuda_devices(), 1);
  std::ostringstream out;
  launch::Trainer trainer(config, out, MPI_COMM_SELF);
  launch::RunSummary summary = trainer.run();
  if (log) *log = out.str();
  return summary;
}

}  // namespace test_support
