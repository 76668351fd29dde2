// `prepare`'s output: the directory it writes to, and the train or
// validation shards it fills there (launch/prepare_main.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "launch/data/prepare_options.h"

namespace launch::prepare {

// Creates the output directory, checks it is writable, and deals with shards
// of the same name left by an earlier run: a later glob would mix them with
// the new ones, so they are refused unless --overwrite removes them.
void prepare_output_dir(const Options& options);

// Fills shards of at most `shard_tokens` tokens: DIR/NAME_SPLIT_000000.bin, ...
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path dir, std::string prefix, std::int64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {}

  void add(std::span<const std::uint16_t> tokens);

  // Writes what is left. A leftover of one token cannot form an (input,
  // target) pair and the shard format refuses it, so it is dropped.
  void finish();

  std::int64_t tokens_written() const { return tokens_written_; }
  int shards_written() const { return shards_written_; }

 private:
  void flush();

  std::filesystem::path dir_;
  std::string prefix_;
  std::int64_t shard_tokens_;
  std::vector<std::uint16_t> buffer_;
  std::int64_t tokens_written_ = 0;
  int shards_written_ = 0;
};

}  // namespace launch::prepare
