// Byte-level BPE (GPT-2's tokenizer, Radford et al. 2019 section 2.2), loaded
// from a Hugging Face `tokenizer.json` and producing exactly the ids that
// Hugging Face `tokenizers` produces for it (tokenizer.encode(text,
// add_special_tokens=False): no post-processor template is applied).
//
// What a file must hold (anything else is refused with a one-line error that
// names the file and the key):
//   model:         {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...]
//                  or [["a", "b"], ...]}; dropout must be null, no
//                  continuing_subword_prefix / end_of_word_suffix;
//                  ignore_merges honoured (a pre-token that is itself in the
//                  vocabulary is one token). Ids (here and in added_tokens)
//                  in [0, 2^24): past 65535 `prepare` writes uint32 shards.
//   normalizer:    null.
//   pre_tokenizer: {"type": "ByteLevel", "add_prefix_space": bool,
//                  "use_regex": bool} (GPT-2: false, true).
//   decoder:       ByteLevel or null.
//   added_tokens:  [{"id", "content", ...}] e.g. <|endoftext|>; they are
//                  matched in the raw text before anything else (leftmost,
//                  longest first, as tokenizers' AddedVocabulary does);
//                  lstrip/rstrip/single_word are not supported (refused).
//   post_processor is ignored.
//
// Encoding, per stretch of text between added tokens:
//   1. ByteLevel's add_prefix_space: prepend " " unless it starts with one.
//   2. Split with GPT-2's pattern (byte_level.h: PCRE2, UTF + UCP):
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      Invalid UTF-8 (our input is bytes, Rust's is always valid) matches
//      nothing; each run of such bytes becomes a pre-token of its own.
//   3. Map each byte to its printable stand-in (GPT-2's bytes_to_unicode,
//      byte_level.h).
//   4. Apply merges by rank (lowest first, leftmost among equal ranks; a
//      min-heap of candidate pairs, O(n log n) in the pre-token's length) and
//      look the symbols up in the vocabulary. Results are cached per
//      pre-token of up to 256 bytes.
// Decoding: ids -> token strings -> bytes through the inverse byte map; added
// tokens give their content verbatim; the bytes are not required to be valid
// UTF-8. An id that is in no table gives U+FFFD (like ByteTokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace launch {

// GPT-2's end-of-text token: `prepare` puts it before every document when
// the tokenizer has it (as llm.c's data scripts do).
inline constexpr const char* kEndOfText = "<|endoftext|>";

class BpeTokenizer {
 public:
  // Throws engine::Error naming `path` and what is wrong.
  static BpeTokenizer from_file(const std::string& path);
  // `source` names the text in error messages.
  static BpeTokenizer from_json(std::string_view json_text, const std::string& source);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  // One more than the largest id of the vocabulary and the added tokens: the
  // smallest model vocabulary that can hold every id (GPT-2: 50257).
  int vocab_size() const { return vocab_size_; }

  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::int32_t> ids) const;
  std::string decode(std::span<const std::uint16_t> ids) const;

  // The id of a vocabulary or added token given as it is written in the file
  // (e.g. "<|endoftext|>"), or nullopt.
  std::optional<std::int32_t> token_to_id(const std::string& token) const;

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;

  std::unique_ptr<Impl> impl_;
  int vocab_size_ = 0;
};

}  // namespace launch
