// A tokenizer.json (`prepare --tokenizer`, `train --tokenizer`): the JSON, its
// model (vocabulary, merges as strings or pairs), normalizer, pre-tokenizer
// (Split patterns compiled by PCRE2, ByteLevel, Sequence), added tokens and
// post-processor template. An accepted file then encodes and decodes a text
// of ASCII, accented and CJK letters, digits, an emoji and special-token
// look-alikes, as `prepare` would.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<launch::BpeTokenizer> tokenizer;
  const auto parse = [&] { tokenizer.emplace(launch::BpeTokenizer::from_json(fuzz::as_text(data, size), "f.json")); };
  if (!fuzz::accepts(parse)) return 0;
  static const std::string text =
      "Hello world's 12345 numbers,\n\tcafé naïve 東京 🙂 <|endoftext|><|begin_of_text|> don't  stop";
  std::vector<std::int32_t> ids;
  if (!fuzz::accepts([&] { ids = tokenizer->encode(text); })) return 0;
  fuzz::accepts([&] { (void)tokenizer->decode(ids); });
  fuzz::accepts([&] { (void)tokenizer->decode(tokenizer->document_start()); });
  (void)tokenizer->token_to_id("<|endoftext|>");
  return 0;
}
