#include "launch/data/byte_level.h"

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

// Compiled by RegexSplitter: for valid UTF-8 only, matched over each stretch
// of valid UTF-8 (regex_split.h says why).
Gpt2Splitter::Gpt2Splitter(bool jit) : RegexSplitter(kGpt2Pattern, false, "tokenizer: GPT-2's pattern", jit) {}

}  // namespace launch
