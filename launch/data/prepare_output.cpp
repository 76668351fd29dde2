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

void ShardWriter::add(std::span<const std::uint16_t> tokens) {
  while (!tokens.empty()) {
    const auto room = static_cast<std::size_t>(shard_tokens_) - buffer_.size();
    const std::size_t take = std::min(room, tokens.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(take));
    tokens = tokens.subspan(take);
    if (static_cast<std::int64_t>(buffer_.size()) == shard_tokens_) flush();
  }
}

void ShardWriter::finish() {
  if (static_cast<std::int64_t>(buffer_.size()) >= launch::kShardMinTokens) {
    flush();
  } else if (!buffer_.empty()) {
    std::cerr << "prepare: note: dropping the last " << buffer_.size() << " token(s) of " << prefix_
              << ": a shard needs at least " << launch::kShardMinTokens << "\n";
    buffer_.clear();
  }
}

void ShardWriter::flush() {
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), "_%06d.bin", shards_written_);
  launch::write_token_shard((dir_ / (prefix_ + suffix)).string(), buffer_);
  tokens_written_ += static_cast<std::int64_t>(buffer_.size());
  ++shards_written_;
  buffer_.clear();
}

}  // namespace launch::prepare
