#include "launch/data/byte_level.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "engine/check.h"

namespace launch {

namespace {

// GPT-2's pre-tokenizer pattern (tokenizers' ByteLevel, openai/gpt-2 encoder.py).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

pcre2_code* code(void* regex) { return static_cast<pcre2_code*>(regex); }

}  // namespace

std::uint32_t byte_to_code_point(std::uint8_t byte) {
  // bytes_to_unicode() of openai/gpt-2 encoder.py: printable Latin-1 bytes
  // stand for themselves; the other 68 bytes map to U+0100, U+0101, ... in
  // byte order, so no stand-in is whitespace or a control character.
  static const std::vector<std::uint32_t> table = [] {
    std::vector<std::uint32_t> t(256);
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<std::uint32_t>(b) : next++;
    }
    return t;
  }();
  return table[byte];
}

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    for (int b = 0; b < 256; ++b) append_utf8(t[b], byte_to_code_point(static_cast<std::uint8_t>(b)));
    return t;
  }();
  return table;
}

std::string bytes_to_unicode_string(std::string_view bytes) {
  const auto& table = byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += table[static_cast<unsigned char>(c)];
  return out;
}

namespace {

// The length of the valid UTF-8 character at s[i] (RFC 3629, as PCRE2
// checks it: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
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

}  // namespace

// Compiled for valid UTF-8 only, and matched over each stretch of valid UTF-8
// with PCRE2_NO_UTF_CHECK. PCRE2_MATCH_INVALID_UTF, which let one call take
// the whole text, made the interpreter (the fallback where the JIT is
// unavailable) re-check the UTF-8 of the rest of the text at every call, even
// with PCRE2_NO_UTF_CHECK: quadratic, 36 s for 200 kB of "  a" (issue 37).
// Invalid bytes act as barriers in that mode, which is what cutting the text
// at them does.
Gpt2Splitter::Gpt2Splitter(bool jit) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (!regex) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    ENGINE_FAIL("tokenizer: PCRE2 refused GPT-2's pattern at offset ", error_offset, ": ",
                reinterpret_cast<const char*>(message));
  }
  // An optimisation: the interpreter is used if JIT is unavailable.
  if (jit) pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);
  regex_ = regex;
}

Gpt2Splitter::~Gpt2Splitter() {
  if (regex_) pcre2_code_free(code(regex_));
}

Gpt2Splitter::Gpt2Splitter(Gpt2Splitter&& other) noexcept : regex_(std::exchange(other.regex_, nullptr)) {}

Gpt2Splitter& Gpt2Splitter::operator=(Gpt2Splitter&& other) noexcept {
  std::swap(regex_, other.regex_);
  return *this;
}

void Gpt2Splitter::split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code(regex_), nullptr);
  ENGINE_CHECK(match != nullptr, "tokenizer: out of memory for PCRE2 match data");
  // The pieces of one stretch of valid UTF-8, text[begin, end).
  auto split_valid = [&](std::size_t begin, std::size_t end) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
    const std::size_t length = end - begin;
    std::size_t at = 0;
    while (at < length) {
      const int rc = pcre2_match(code(regex_), subject, length, at, PCRE2_NO_UTF_CHECK, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches one alternative
      if (rc < 0) {
        // A PCRE2 limit (match, depth, heap, JIT stack): the pattern has no nested repeats, so none has
        // been seen, even over 20 MB runs; refuse rather than split differently.
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        ENGINE_FAIL("tokenizer: PCRE2 could not split the text at byte ", begin + at, ": ",
                    reinterpret_cast<const char*>(message), " (error ", rc, ")");
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const std::size_t start = ovector[0], stop = ovector[1];
      if (start > at) on_piece(text.substr(begin + at, start - at));  // cannot happen either (see above)
      if (stop == start) {  // cannot happen with this pattern; guards against looping
        const std::size_t step = std::max<std::size_t>(1, utf8_char_length(text, begin + start));
        on_piece(text.substr(begin + start, step));
        at = start + step;
        continue;
      }
      on_piece(text.substr(begin + start, stop - start));
      at = stop;
    }
    if (at < length) on_piece(text.substr(begin + at, length - at));
  };
  try {
    // Alternate runs of bytes that start no valid character (each run one
    // pre-token, as the gaps between PCRE2's matches were) and stretches of
    // valid UTF-8 (split by the pattern).
    for (std::size_t at = 0; at < text.size();) {
      std::size_t end = at;
      while (end < text.size() && utf8_char_length(text, end) == 0) ++end;
      if (end > at) {
        on_piece(text.substr(at, end - at));
        at = end;
        continue;
      }
      for (std::size_t n; end < text.size() && (n = utf8_char_length(text, end)) != 0;) end += n;
      split_valid(at, end);
      at = end;
    }
  } catch (...) {
    pcre2_match_data_free(match);
    throw;
  }
  pcre2_match_data_free(match);
}

}  // namespace launch
