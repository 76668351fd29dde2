#include "launch/data/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "engine/check.h"

namespace launch {

namespace {

pcre2_code* code(void* regex) { return static_cast<pcre2_code*>(regex); }

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(error_code, message, sizeof(message));
  return reinterpret_cast<const char*>(message);
}

// Frees PCRE2's match data on every path out of split().
struct MatchData {
  pcre2_match_data* data;
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

std::size_t utf8_char_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const std::size_t left = s.size() - i;
  auto continuation = [&](std::size_t k) { return (byte(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && continuation(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3) return 0;
    const unsigned char c1 = byte(i + 1);
    const bool second_ok = c == 0xE0 ? (c1 >= 0xA0 && c1 <= 0xBF) : c == 0xED ? (c1 >= 0x80 && c1 <= 0x9F)
                                                                              : continuation(i + 1);
    return second_ok && continuation(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4) return 0;
    const unsigned char c1 = byte(i + 1);
    const bool second_ok = c == 0xF0 ? (c1 >= 0x90 && c1 <= 0xBF) : c == 0xF4 ? (c1 >= 0x80 && c1 <= 0x8F)
                                                                              : continuation(i + 1);
    return second_ok && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
  }
  return 0;
}

void for_each_utf8_stretch(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_valid,
                           const std::function<void(std::size_t, std::size_t)>& on_invalid) {
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = at;
    while (end < text.size() && utf8_char_length(text, end) == 0) ++end;
    if (end > at) {
      on_invalid(at, end);
      at = end;
      continue;
    }
    for (std::size_t n; end < text.size() && (n = utf8_char_length(text, end)) != 0;) end += n;
    on_valid(at, end);
    at = end;
  }
}

// Compiled for valid UTF-8 only, and matched over each stretch of valid UTF-8
// with PCRE2_NO_UTF_CHECK (see the top of regex_split.h).
RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, const std::string& what, bool jit) {
  ENGINE_CHECK(!pattern.empty(), what, " is empty, expected a pattern to split at");
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 refuses UCP with LITERAL, which has no classes for it to change.
  const std::uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                    &error_code, &error_offset, nullptr);
  ENGINE_CHECK(regex != nullptr, what, ": PCRE2 refused the pattern at offset ", error_offset, ": ",
               pcre2_message(error_code));
  // An optimisation: the interpreter is used if JIT is unavailable.
  if (jit) pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);
  regex_ = regex;
}

RegexSplitter::~RegexSplitter() {
  if (regex_) pcre2_code_free(code(regex_));
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept : regex_(std::exchange(other.regex_, nullptr)) {}

RegexSplitter& RegexSplitter::operator=(RegexSplitter&& other) noexcept {
  std::swap(regex_, other.regex_);
  return *this;
}

void RegexSplitter::split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const {
  MatchData match{pcre2_match_data_create_from_pattern(code(regex_), nullptr)};
  ENGINE_CHECK(match.data != nullptr, "tokenizer: out of memory for PCRE2 match data");
  // The pieces of one stretch of valid UTF-8, text[begin, end): each match,
  // and each stretch between two matches (from `prev`).
  auto split_valid = [&](std::size_t begin, std::size_t end) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
    const std::size_t length = end - begin;
    std::size_t prev = 0, search = 0;
    while (search < length) {
      const int rc = pcre2_match(code(regex_), subject, length, search, PCRE2_NO_UTF_CHECK, match.data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        // A PCRE2 limit (match, depth, heap, JIT stack): GPT-2's, Llama 3's
        // and Qwen2's patterns have no nested repeats, so none has been seen,
        // even over 20 MB runs; refuse rather than split differently.
        ENGINE_FAIL("tokenizer: PCRE2 could not split the text at byte ", begin + search, ": ", pcre2_message(rc),
                    " (error ", rc, ")");
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
      const std::size_t start = ovector[0], stop = ovector[1];
      if (start > prev) on_piece(text.substr(begin + prev, start - prev));
      prev = start;
      if (stop == start) {
        // An empty match (a pattern such as "x*" or "(?=b)") cuts there but
        // is no piece, and the search moves one character on, as
        // Oniguruma's iteration in tokenizers does.
        search = start + std::max<std::size_t>(1, utf8_char_length(text, begin + start));
        continue;
      }
      on_piece(text.substr(begin + start, stop - start));
      prev = search = stop;
    }
    if (prev < length) on_piece(text.substr(begin + prev, length - prev));
  };
  for_each_utf8_stretch(
      text, split_valid, [&](std::size_t begin, std::size_t end) { on_piece(text.substr(begin, end - begin)); });
}

}  // namespace launch
