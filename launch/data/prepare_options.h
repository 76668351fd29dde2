// What `prepare` was asked to do: its flags' values (launch/prepare_main.cpp
// parses them), read by each of its steps (launch/data/prepare_*.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace launch::prepare {

struct Options {
  std::vector<std::string> inputs;
  std::string output_dir;
  double val_fraction = 0.05;
  std::int64_t shard_tokens = 100'000'000;
  std::string name = "corpus";
  bool overwrite = false;
  std::string tokenizer;  // tokenizer.json; "" = bytes
  std::optional<int> train_tokenizer;  // learn a BPE of this many tokens
  std::string tokenizer_out;  // where the learned one goes; "" = DIR/NAME_tokenizer.json
  int threads = 1;  // encoding threads (prepare_encode.h); the shards are the same for every count

  bool bpe() const { return !tokenizer.empty() || train_tokenizer; }
  std::string learned_tokenizer_path() const {
    return tokenizer_out.empty() ? (std::filesystem::path(output_dir) / (name + "_tokenizer.json")).string()
                                 : tokenizer_out;
  }
};

}  // namespace launch::prepare
