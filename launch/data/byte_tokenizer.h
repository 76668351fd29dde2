// Byte-level tokenizer: token id = the value of one byte of UTF-8 text.
//
// Why bytes and not BPE: the corpus is built from text that ships in Debian
// packages, and a byte vocabulary needs no merges file to train, ship or keep
// in sync with the shards. Every input is representable (no unknown token),
// encode/decode are trivially exact inverses, and a vocabulary of 256 keeps
// the embedding and LM head small, which suits the CPU backend. The price is
// about 4x longer sequences than GPT-2's BPE for English text.
//
// There is no end-of-text token: all 256 ids are bytes. `prepare` simply
// concatenates documents.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace launch {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  // What decode writes for an id that is not a byte: U+FFFD REPLACEMENT
  // CHARACTER in UTF-8, the same thing a UTF-8 decoder shows for bad input.
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

  int vocab_size() const { return kVocabSize; }

  // One token per byte, in order.
  std::vector<std::uint16_t> encode(std::string_view text) const;

  // One byte per id; an id outside [0, 256) (e.g. from a model whose
  // vocabulary is padded past 256) becomes kReplacement rather than being
  // dropped, so the output shows where it was. Bytes are emitted as they are,
  // so ids that cut a multi-byte UTF-8 character give invalid UTF-8, exactly
  // as the model produced it.
  std::string decode(std::span<const std::int32_t> ids) const;
  std::string decode(std::span<const std::uint16_t> ids) const;
};

}  // namespace launch
