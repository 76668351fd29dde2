#include "launch/data/byte_level.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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

Gpt2Splitter::Gpt2Splitter() {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset,
                                    nullptr);
  if (!regex) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    ENGINE_FAIL("tokenizer: PCRE2 refused GPT-2's pattern at offset ", error_offset, ": ",
                reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);  // an optimisation: the interpreter is used if JIT is unavailable
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
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  try {
    while (at < text.size()) {
      const int rc = pcre2_match(code(regex_), subject, text.size(), at, 0, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      ENGINE_CHECK(rc >= 0, "tokenizer: PCRE2 match failed with code ", rc, " at byte ", at);
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const std::size_t start = ovector[0], end = ovector[1];
      if (start > at) on_piece(text.substr(at, start - at));  // invalid UTF-8 between matches
      if (end == start) {  // cannot happen with this pattern; guards against looping
        on_piece(text.substr(start, 1));
        at = start + 1;
        continue;
      }
      on_piece(text.substr(start, end - start));
      at = end;
    }
    if (at < text.size()) on_piece(text.substr(at));
  } catch (...) {
    pcre2_match_data_free(match);
    throw;
  }
  pcre2_match_data_free(match);
}

}  // namespace launch
