// Token shards on disk, in llm.c's format, so shards made by llm.c's data
// scripts and by our `prepare` program are interchangeable.
//
// Layout (little-endian):
//   header: 256 x int32 = 1024 bytes
//     header[0] = kShardMagic (20240520)
//     header[1] = kShardVersion (1)
//     header[2] = number of tokens N
//     the rest  = 0 (reserved)
//   body:   N x uint16 token ids
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
inline constexpr std::int32_t kShardVersion = 1;
inline constexpr std::int64_t kShardHeaderInts = 256;
inline constexpr std::int64_t kShardHeaderBytes = kShardHeaderInts * 4;  // 1024
// The loader cuts (input, target) pairs shifted by one token, so a shard needs
// at least two tokens to be of any use; the reader and the writer both insist.
inline constexpr std::int64_t kShardMinTokens = 2;

// One open, validated shard. Move-only: it owns the file descriptor.
class TokenShard {
 public:
  // Opens and validates `path`: readable regular file (checked before
  // opening, so a FIFO is refused instead of blocking the open), at least a header,
  // magic, version, at least kShardMinTokens tokens, and a size of exactly
  // header + 2 * N bytes (a truncated file and trailing bytes are both
  // refused). Throws engine::Error naming the file and the wrong value.
  explicit TokenShard(const std::string& path);
  ~TokenShard();

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t num_tokens() const { return num_tokens_; }
  // Copies tokens [first, first + count) into `out` (not range-checked
  // against any vocabulary: the loader does that as it reads, see
  // DataLoader). Safe to call from several threads. Throws engine::Error
  // naming the file if the range is outside [0, N) or the file has shrunk
  // since it was opened.
  void read_tokens(std::int64_t first, std::int64_t count, std::uint16_t* out) const;
  // All N token ids.
  std::vector<std::uint16_t> read_all() const;

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;
  std::int64_t num_tokens_ = 0;
};

// The files matching a POSIX glob pattern ("data/corpus_train_*.bin"),
// sorted by name so every rank and every run sees the same order. Throws
// engine::Error naming the pattern when nothing matches.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// Writes `tokens` as a shard at `path`, atomically: the bytes go to
// path + ".tmp", are fsync'ed, and the file is renamed over `path`, so a
// reader never sees a half-written shard even if the writer is killed.
// Refuses fewer than kShardMinTokens tokens or more than fit the int32 header.
void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens);

}  // namespace launch
