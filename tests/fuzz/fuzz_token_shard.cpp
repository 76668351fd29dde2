// A token shard (`--train-data`, `prepare`'s output): the 1024-byte header
// (magic, version 1 or 2, token count, bytes per token) against the file's
// size. An accepted shard then reads all its tokens, and a range past its end
// is refused.
#include <cstdint>
#include <optional>
#include <vector>

#include "launch/data/token_shard.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::input_file(data, size, "shard.bin");
  std::optional<launch::TokenShard> shard;
  if (!fuzz::accepts([&] { shard.emplace(path); })) return 0;
  std::vector<std::uint32_t> tokens;
  if (!fuzz::accepts([&] { tokens = shard->read_all(); })) fuzz::finding("an accepted shard could not be read");
  if (static_cast<std::int64_t>(tokens.size()) != shard->num_tokens()) fuzz::finding("read_all's count differs");
  std::uint32_t one = 0;
  if (fuzz::accepts([&] { shard->read_tokens(shard->num_tokens(), 1, &one); }))
    fuzz::finding("a read past the shard's end was not refused");
  return 0;
}
