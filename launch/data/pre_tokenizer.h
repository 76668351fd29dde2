// The pre_tokenizer of a byte-level BPE tokenizer.json: how Hugging Face
// `tokenizers` cuts text into pre-tokens before the merges, for GPT-2,
// Llama 3, Qwen2 and SmolLM2 alike.
//
// Supported, each step splitting every piece the step before it made:
//   {"type": "ByteLevel", "add_prefix_space": bool, "use_regex": bool}
//       GPT-2: prepend " " to each piece that does not start with one (when
//       add_prefix_space), then split with GPT-2's pattern (when use_regex,
//       byte_level.h). trim_offsets only moves offsets: ignored.
//   {"type": "Sequence", "pretokenizers": [STEP, ..., ByteLevel]} with STEP:
//     {"type": "Split", "pattern": {"Regex": R} or {"String": S},
//      "behavior": "Isolated", "invert": false}
//       Llama 3, Qwen2: matches and the stretches between them are pieces.
//       R is compiled by PCRE2 (UTF + UCP), where tokenizers uses Oniguruma:
//       the two agree on the constructs of Llama 3's and Qwen2's patterns
//       ((?i:...), \p{L}, \p{N}, \s, [^...], {1,3}, (?!...)), tested against
//       tokenizers; a construct whose meaning differs between the two
//       (Oniguruma's \h is a hex digit, PCRE2's horizontal space) is not.
//     {"type": "Digits", "individual_digits": bool}
//       SmolLM2: each numeric character (\p{N}, Rust's char::is_numeric) a
//       piece of its own, or each run of them one piece.
//   The Sequence must end with a ByteLevel (the byte map makes this a
//   byte-level BPE) and hold no other; Llama 3's and Qwen2's have
//   use_regex false, SmolLM2's true.
// Anything else is refused in one line naming the key: another type, another
// behavior (Removed, MergedWithPrevious, ...), invert true, a nested
// Sequence.
//
// Invalid UTF-8 (our input is bytes, tokenizers' is valid text): every run of
// bytes that starts no valid character is a piece of its own at every step
// (regex_split.h), so it never joins the text around it.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/data/regex_split.h"

namespace launch {

class PreTokenizer {
 public:
  // From the value of tokenizer.json's "pre_tokenizer". Error messages start
  // with `where` (e.g. "tokenizer 'FILE': ").
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& where);

  // Calls on_piece for every pre-token of `text` (its bytes, before the byte
  // map), in order. The pieces are `text`, plus the spaces add_prefix_space
  // adds; none is empty.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const;

 private:
  struct Step {
    std::optional<RegexSplitter> splitter;  // none: the piece goes on whole
    bool add_prefix_space = false;
  };
  void apply(std::size_t step, std::string_view text, const std::function<void(std::string_view)>& on_piece) const;

  std::vector<Step> steps_;
};

}  // namespace launch
