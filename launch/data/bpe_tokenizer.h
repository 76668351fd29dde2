// Byte-level BPE (GPT-2's tokenizer, Radford et al. 2019 section 2.2, and
// the same kind in Llama 3, Qwen2 and SmolLM2), loaded from a Hugging Face
// `tokenizer.json` and producing exactly the ids that Hugging Face
// `tokenizers` produces for it (tokenizer.encode(text,
// add_special_tokens=False); document_start() says what the post-processor's
// template would put first).
//
// What a file must hold (anything else is refused with a one-line error that
// names the file and the key):
//   model:          {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...]
//                   or [["a", "b"], ...]}; dropout must be null, no
//                   continuing_subword_prefix / end_of_word_suffix;
//                   ignore_merges honoured (Llama 3: a pre-token that is
//                   itself in the vocabulary is one token). Ids (here and in
//                   added_tokens) in [0, 2^24): past 65535 `prepare` writes
//                   uint32 shards.
//   normalizer:     null, or {"type": "NFC"} (Qwen2; unicode_normalizer.h).
//   pre_tokenizer:  ByteLevel (GPT-2), or a Sequence of Split (Llama 3,
//                   Qwen2) or Digits (SmolLM2) steps ending with ByteLevel
//                   (pre_tokenizer.h).
//   post_processor: null, ByteLevel, TemplateProcessing of special tokens
//                   then $A, or a Sequence of those (post_processor.h).
//   decoder:        ByteLevel or null.
//   added_tokens:   [{"id", "content", "special", "normalized", ...}]
//                   (added_tokens.h); lstrip/rstrip/single_word refused.
//
// Encoding:
//   1. Added tokens with normalized false are found in the raw text (leftmost,
//      longest first, as tokenizers' AddedVocabulary does); each stretch
//      between them is
//   2. normalized (NFC, or as it is), then cut at the added tokens with
//      normalized true; each stretch left is
//   3. pre-tokenized (pre_tokenizer.h: GPT-2's, Llama 3's or Qwen2's PCRE2
//      pattern, digits); each run of bytes that is not valid UTF-8 (our
//      input is bytes, Rust's is always valid text) is a pre-token of its own;
//   4. each pre-token's bytes are mapped to their printable stand-ins (GPT-2's
//      bytes_to_unicode, byte_level.h), merged by rank (lowest first,
//      leftmost among equal ranks; a min-heap of candidate pairs, O(n log n)
//      in the pre-token's length) and looked up in the vocabulary. Results
//      are cached per pre-token of up to 256 bytes.
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
// the tokenizer has it and no template says otherwise (as llm.c's data
// scripts do).
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
  // What `prepare` puts before each document: the special tokens before $A
  // in the post_processor's template (Llama 3: <|begin_of_text|>), else
  // <|endoftext|> when the tokenizer has it (GPT-2, Qwen2, SmolLM2), else
  // nothing.
  const std::vector<std::int32_t>& document_start() const;
  // Whether document_start() is a post_processor's template's.
  bool document_start_from_template() const;
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
