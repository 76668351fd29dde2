// GPT-2's byte-level pre-tokenization (Radford et al. 2019 section 2.2), the
// part that Hugging Face `tokenizers` calls the ByteLevel pre-tokenizer: the
// split pattern and the byte -> printable character map. Shared by the BPE
// that encodes with a tokenizer.json (bpe_tokenizer.h) and the one that
// learns it (bpe_trainer.h), so both see the same pre-tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launch/data/regex_split.h"

namespace launch {

// GPT-2's pattern, compiled once with PCRE2 (UTF + UCP, JIT when available):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// split() (regex_split.h) calls on_piece for every pre-token of a text, in
// order; together they are the text. Invalid UTF-8 matches nothing; each run
// of such bytes becomes a pre-token of its own, as tokenizers' "isolated"
// split keeps the gaps between matches. Linear in the text's length with or
// without the JIT.
class Gpt2Splitter : public RegexSplitter {
 public:
  // jit = false: PCRE2's interpreter only, what runs where the JIT is
  // unavailable (for tests).
  explicit Gpt2Splitter(bool jit = true);
};

// GPT-2's bytes_to_unicode: byte -> the UTF-8 of its printable stand-in.
const std::vector<std::string>& byte_to_unicode();
// The same stand-ins as code points (what tokenizers sorts its alphabet by).
std::uint32_t byte_to_code_point(std::uint8_t byte);
// A string of bytes as its stand-ins: how a byte-level token is written in a
// tokenizer.json.
std::string bytes_to_unicode_string(std::string_view bytes);

}  // namespace launch
