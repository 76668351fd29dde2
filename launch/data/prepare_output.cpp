#include "launch/data/prepare_output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <regex>

#include "engine/check.h"
#include "launch/data/token_shard.h"

namespace fs = std::filesystem;

namespace launch::prepare {

void prepare_output_dir(const Options& options) {
  const fs::path dir(options.output_dir);
  std::error_code error;
  fs::create_directories(dir, error);
  ENGINE_CHECK(!error, "cannot create output directory '", options.output_dir, "': ", error.message());
  ENGINE_CHECK(fs::is_directory(dir), "output path '", options.output_dir, "' exists and is not a directory");
  ENGINE_CHECK(::access(dir.c_str(), W_OK) == 0, "output directory '", options.output_dir, "' is not writable");

  const std::regex ours(options.name + "_(train|val)_[0-9]{6}\\.bin(\\.tmp)?");
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (std::regex_match(entry.path().filename().string(), ours)) stale.push_back(entry.path());
  }
  if (options.train_tokenizer && fs::exists(options.learned_tokenizer_path())) {
    ENGINE_CHECK(options.overwrite, "the learned tokenizer's file '", options.learned_tokenizer_path(),
                 "' already exists; pass --overwrite to replace it, or choose another --tokenizer-out or --name");
  }
  if (stale.empty()) return;
  ENGINE_CHECK(options.overwrite, "output directory '", options.output_dir, "' already holds ", stale.size(),
               " shard(s) named '", options.name, "_*' (e.g. ", stale.front().filename().string(),
               "); pass --overwrite to replace them, or choose another --name or --output-dir");
  for (const fs::path& path : stale) fs::remove(path);
}

ShardWriter::ShardWriter(fs::path dir, std::string prefix, std::int64_t shard_tokens, std::int32_t version)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      shard_tokens_(shard_tokens),
      wide_(version == launch::kShardVersionU32) {
  ENGINE_CHECK(version == launch::kShardVersionU16 || version == launch::kShardVersionU32, "shard writer: version ",
               version, ", expected ", launch::kShardVersionU16, " or ", launch::kShardVersionU32);
}

void ShardWriter::add(std::span<const std::uint32_t> tokens) {
  while (!tokens.empty()) {
    const auto room = static_cast<std::size_t>(shard_tokens_) - buffered();
    const std::size_t take = std::min(room, tokens.size());
    if (wide_) {
      buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(take));
    } else {
      for (std::size_t i = 0; i < take; ++i) {
        ENGINE_CHECK(tokens[i] <= 0xFFFF, "prepare: id ", tokens[i], " does not fit the 16-bit shards of ", prefix_);
        narrow_.push_back(static_cast<std::uint16_t>(tokens[i]));
      }
    }
    tokens = tokens.subspan(take);
    if (static_cast<std::int64_t>(buffered()) == shard_tokens_) flush();
  }
}

void ShardWriter::finish() {
  if (static_cast<std::int64_t>(buffered()) >= launch::kShardMinTokens) {
    flush();
  } else if (buffered() > 0) {
    std::cerr << "prepare: note: dropping the last " << buffered() << " token(s) of " << prefix_
              << ": a shard needs at least " << launch::kShardMinTokens << "\n";
    buffer_.clear();
    narrow_.clear();
  }
}

void ShardWriter::flush() {
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), "_%06d.bin", shards_written_);
  const std::string path = (dir_ / (prefix_ + suffix)).string();
  if (wide_) {
    launch::write_token_shard(path, std::span<const std::uint32_t>(buffer_));
  } else {
    launch::write_token_shard(path, std::span<const std::uint16_t>(narrow_));
  }
  tokens_written_ += static_cast<std::int64_t>(buffered());
  ++shards_written_;
  buffer_.clear();
  narrow_.clear();
}

}  // namespace launch::prepare
