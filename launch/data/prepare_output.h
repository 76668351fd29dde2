// `prepare`'s output: the directory it writes to, and the train or
// validation shards it fills there (launch/prepare_main.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "launch/data/prepare_options.h"
#include "launch/data/token_shard.h"

namespace launch::prepare {

// Creates the output directory, checks it is writable, and deals with shards
// of the same name left by an earlier run: a later glob would mix them with
// the new ones, so they are refused unless --overwrite removes them.
void prepare_output_dir(const Options& options);

// Fills shards of at most `shard_tokens` tokens: DIR/NAME_SPLIT_000000.bin, ...
// in one shard version for all (token_shard.h), chosen before anything is
// written from the tokenizer's vocabulary (shard_version_for_vocab), so that
// a dataset is never half one width and half the other.
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path dir, std::string prefix, std::int64_t shard_tokens, std::int32_t version);

  // Throws engine::Error if a version 1 writer is given an id >= 65536 (the
  // version was chosen from a vocabulary that does not hold it: a bug).
  void add(std::span<const std::uint32_t> tokens);

  // Writes what is left. A leftover of one token cannot form an (input,
  // target) pair and the shard format refuses it, so it is dropped.
  void finish();

  std::int64_t tokens_written() const { return tokens_written_; }
  std::int32_t version() const { return wide_ ? launch::kShardVersionU32 : launch::kShardVersionU16; }
  int shards_written() const { return shards_written_; }

 private:
  void flush();
  std::size_t buffered() const { return wide_ ? buffer_.size() : narrow_.size(); }

  std::filesystem::path dir_;
  std::string prefix_;
  std::int64_t shard_tokens_;
  bool wide_;  // version 2: buffer_ holds the ids; version 1: narrow_ does (half the memory)
  std::vector<std::uint32_t> buffer_;
  std::vector<std::uint16_t> narrow_;
  std::int64_t tokens_written_ = 0;
  int shards_written_ = 0;
};

}  // namespace launch::prepare
