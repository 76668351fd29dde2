// Token shards on disk, in llm.c's format, so shards made by llm.c's data
// scripts and by our `prepare` program are interchangeable, plus a version of
// our own for vocabularies that do not fit 16 bits (Llama 3's 128256 tokens,
// Qwen2's 151936).
//
// Layout (little-endian):
//   header: 256 x int32 = 1024 bytes
//     header[0] = kShardMagic (20240520)
//     header[1] = version: kShardVersionU16 (1, llm.c's) or kShardVersionU32 (2, ours)
//     header[2] = number of tokens N
//     header[3] = version 1: 0 (reserved; not checked, llm.c's scripts write 0)
//                 version 2: bytes per token, 4 (checked: a reader that guessed
//                 the width from the version alone would read garbage ids
//                 from a file some other tool wrote with another width)
//     the rest  = 0 (reserved)
//   body:   N x uint16 token ids (version 1) or N x uint32 (version 2)
//
// llm.c has no version 2 (its readers refuse it, as they should: they read
// uint16). `prepare` writes version 1 whenever the tokenizer's ids all fit
// 16 bits, so shards stay llm.c's where they can and half the size.
//
// A shard is read with pread from a descriptor held open, not memory-mapped:
// a mapped file that shrinks under the run (`cp` over it truncates it in
// place) kills the process with SIGBUS on the next touch, while a short read
// is an error naming the shard, which the trainer turns into a stop with a
// checkpoint. Opening is still O(1) whatever the size, reads go through the
// page cache shared by the ranks of one node, and only the sequences a run
// touches are read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace launch {

inline constexpr std::int32_t kShardMagic = 20240520;
inline constexpr std::int32_t kShardVersionU16 = 1;  // uint16 ids (llm.c)
inline constexpr std::int32_t kShardVersionU32 = 2;  // uint32 ids, header[3] = 4
inline constexpr std::int32_t kShardBytesPerTokenU32 = 4;
inline constexpr std::int64_t kShardHeaderInts = 256;
inline constexpr std::int64_t kShardHeaderBytes = kShardHeaderInts * 4;  // 1024
// The loader cuts (input, target) pairs shifted by one token, so a shard needs
// at least two tokens to be of any use; the reader and the writer both insist.
inline constexpr std::int64_t kShardMinTokens = 2;

// The version `prepare` writes for a tokenizer whose ids are [0, vocab_size):
// version 1 when every id fits 16 bits (vocab_size <= 65536), else version 2.
std::int32_t shard_version_for_vocab(std::int64_t vocab_size);

// One open, validated shard. Move-only: it owns the file descriptor.
class TokenShard {
 public:
  // Opens and validates `path`: readable regular file (checked before
  // opening, so a FIFO is refused instead of blocking the open), at least a header,
  // magic, version (1 or 2), version 2's bytes per token, at least
  // kShardMinTokens tokens, and a size of exactly header + bytes_per_token * N
  // bytes (a truncated file and trailing bytes are both refused). Throws
  // engine::Error naming the file and the wrong value.
  explicit TokenShard(const std::string& path);
  ~TokenShard();

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t num_tokens() const { return num_tokens_; }
  std::int32_t version() const { return version_; }
  int bytes_per_token() const { return bytes_per_token_; }  // 2 or 4
  // Copies tokens [first, first + count) into `out`, widened to 32 bits
  // whatever the version (not range-checked against any vocabulary: the
  // loader does that as it reads, see DataLoader). Safe to call from several
  // threads. Throws engine::Error naming the file if the range is outside
  // [0, N) or the file has shrunk since it was opened.
  void read_tokens(std::int64_t first, std::int64_t count, std::uint32_t* out) const;
  // All N token ids.
  std::vector<std::uint32_t> read_all() const;

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;
  std::int64_t num_tokens_ = 0;
  std::int32_t version_ = kShardVersionU16;
  int bytes_per_token_ = 2;
};

// The files matching a POSIX glob pattern ("data/corpus_train_*.bin"),
// sorted by name so every rank and every run sees the same order. Throws
// engine::Error naming the pattern when nothing matches.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// Writes `tokens` as a shard at `path`, atomically: the bytes go to
// path + ".tmp", are fsync'ed, and the file is renamed over `path`, so a
// reader never sees a half-written shard even if the writer is killed.
// Refuses fewer than kShardMinTokens tokens or more than fit the int32 header.
// uint16 ids make a version 1 shard, uint32 ids a version 2 shard.
void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens);
void write_token_shard(const std::string& path, std::span<const std::uint32_t> tokens);

}  // namespace launch
