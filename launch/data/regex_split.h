// Splitting text with a PCRE2 pattern the way Hugging Face `tokenizers`
// splits with "Isolated" behaviour: every match is a piece, and so is every
// stretch between two matches. Used by GPT-2's ByteLevel split
// (byte_level.h) and by the Split and Digits pre-tokenizers of a
// tokenizer.json (pre_tokenizer.h).
//
// Our input is bytes, Rust's is always valid UTF-8: the pattern is matched
// over each stretch of valid UTF-8 on its own, and each run of bytes that
// starts no valid character is a piece of its own, a barrier no match
// crosses. Matching stretch by stretch with PCRE2_NO_UTF_CHECK keeps it
// linear in the text's length with or without the JIT (issue 37: with
// PCRE2_MATCH_INVALID_UTF over the whole text the interpreter re-checked the
// rest of the text at every call, 36 s for 200 kB of "  a").
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace launch {

// The length of the valid UTF-8 character at s[i] (RFC 3629, as PCRE2
// checks it: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_char_length(std::string_view s, std::size_t i);

// Calls on_valid(begin, end) for each maximal stretch of valid UTF-8 of
// `text` and on_invalid(begin, end) for each maximal run of bytes between
// them, in order.
void for_each_utf8_stretch(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_valid,
                           const std::function<void(std::size_t, std::size_t)>& on_invalid);

class RegexSplitter {
 public:
  // `pattern` is a regular expression in PCRE2's syntax, compiled with UTF
  // and UCP (\s, \p{L}, \d ... are Unicode's), or with `literal` a string
  // matched as it is. jit = false: PCRE2's interpreter only, what runs where
  // the JIT is unavailable (for tests). Throws engine::Error starting with
  // `what` (the file and the key it came from) if PCRE2 refuses the pattern
  // or it is empty.
  RegexSplitter(std::string_view pattern, bool literal, const std::string& what, bool jit = true);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&& other) noexcept;
  RegexSplitter& operator=(RegexSplitter&& other) noexcept;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls on_piece for every piece of `text`, in order; together they are
  // `text`, and none is empty. An empty match (a pattern such as "x*") cuts
  // the text there and the search goes on one character later, as in
  // tokenizers. Throws engine::Error (one line) if PCRE2 gives up on a match.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const;

 private:
  void* regex_ = nullptr;  // pcre2_code_8, kept out of this header
};

}  // namespace launch
