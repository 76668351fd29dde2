// launch/data/byte_level.h's GPT-2 split (issue 37): the pieces equal those of
// the one-call PCRE2_MATCH_INVALID_UTF split it replaced (kept here as the
// reference) on random bytes with much invalid UTF-8, with the JIT and with
// the interpreter alone; and hostile text (long runs, many short pre-tokens)
// splits in bounded time with both, where the interpreter used to re-check
// the rest of the text at every match (36 s for 200 kB of "  a").
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "launch/data/byte_level.h"

namespace {

using launch::Gpt2Splitter;

// Far above linear time for a few hundred kB, far below what the quadratic
// interpreter path needed: a guard, not a benchmark.
// AddressSanitizer (the build-asan suite) makes it some 5x slower; the
// quadratic loops were slower still by far more.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kBoundSeconds = 10.0;
#else
constexpr double kBoundSeconds = 2.0;
#endif

std::vector<std::string> split(const Gpt2Splitter& splitter, std::string_view text) {
  std::vector<std::string> pieces;
  splitter.split(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  return pieces;
}

// The split before issue 37: one pattern compiled with PCRE2_MATCH_INVALID_UTF,
// matched over the whole text, the gaps between matches kept as pieces.
std::vector<std::string> reference_split(std::string_view text, bool jit) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* regex = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"),
      PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset, nullptr);
  EXPECT_NE(regex, nullptr);
  if (jit) pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex, nullptr);
  std::vector<std::string> pieces;
  std::size_t at = 0;
  while (at < text.size()) {
    const int rc =
        pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, 0, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    EXPECT_GE(rc, 0);
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    if (ovector[0] > at) pieces.emplace_back(text.substr(at, ovector[0] - at));
    pieces.emplace_back(text.substr(ovector[0], ovector[1] - ovector[0]));
    at = ovector[1];
  }
  if (at < text.size()) pieces.emplace_back(text.substr(at));
  pcre2_match_data_free(match);
  pcre2_code_free(regex);
  return pieces;
}

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
    out += ' ';
  }
  return out;
}

// Random text from pieces chosen to sit at the edges of UTF-8: valid
// characters of each length, truncated and overlong forms, surrogates, code
// points above U+10FFFF, stray continuation bytes, and the pattern's own
// material (spaces before letters, apostrophes, digits).
std::string random_bytes(std::mt19937& rng, std::size_t pieces) {
  static const std::vector<std::string> material = {
      "a", "Z", " ", "  ", "\n", "\t", "'", "'s", "'ll", "7", "!", ",", " x", "\xc3\xa9", "\xe6\x97\xa5",
      "\xf0\x9f\x98\x80", "\xc2\xa0", "\xe2\x80\x83", "\xcc\x81", "\xe6\x97", "\xf0\x9f\x98", "\xc3", "\x80",
      "\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xed\x9f\xbf", "\xf4\x90\x80\x80",
      "\xf4\x8f\xbf\xbf", "\xf5\x80\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe", "\xff", "\xef\xbf\xbe"};
  std::string text;
  for (std::size_t i = 0; i < pieces; ++i) {
    if (rng() % 5 == 0)
      text.push_back(static_cast<char>(rng() % 256));  // any byte at all
    else
      text += material[rng() % material.size()];
  }
  return text;
}

TEST(Gpt2Splitter, SplitsAsTheWholeTextMatchWithInvalidUtf8Barriers) {
  const Gpt2Splitter with_jit(true), interpreter(false);
  int texts = 0;
  for (std::uint32_t seed = 1; seed <= 400; ++seed) {
    std::mt19937 rng(seed);
    const std::string text = random_bytes(rng, 1 + rng() % 60);
    const std::vector<std::string> want = reference_split(text, /*jit=*/true);
    ASSERT_EQ(reference_split(text, /*jit=*/false), want) << "the reference's JIT and interpreter differ on "
                                                          << hex(text);
    ASSERT_EQ(split(with_jit, text), want) << "seed " << seed << ": " << hex(text);
    ASSERT_EQ(split(interpreter, text), want) << "seed " << seed << " (interpreter): " << hex(text);
    ++texts;
  }
  EXPECT_EQ(texts, 400);
  // The pieces always put the text back together, and none is empty.
  std::mt19937 rng(7);
  const std::string text = random_bytes(rng, 5000);
  std::string joined;
  for (const std::string& piece : split(with_jit, text)) {
    EXPECT_FALSE(piece.empty());
    joined += piece;
  }
  EXPECT_EQ(joined, text);
}

TEST(Gpt2Splitter, HostileTextSplitsInBoundedTimeWithAndWithoutTheJit) {
  constexpr std::size_t kBytes = 200 * 1000;
  auto repeat = [&](const std::string& unit) {
    std::string s;
    while (s.size() + unit.size() <= kBytes) s += unit;
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"spaces then a letter", std::string(kBytes, ' ') + "x"},
      {"letters", std::string(kBytes, 'a')},
      {"space space letter", repeat("  a")},
      {"space apostrophe", repeat(" '")},
      {"'s repeated", repeat("'s")},
      {"letter digit punctuation", repeat("a1!")},
      {"mixed whitespace then letters", repeat(" \t\r\nab")},
      {"invalid UTF-8 between letters", repeat("a\xff")},
      {"truncated sequences", repeat("\xe6\x97")},
      {"emoji and spaces", repeat("\xf0\x9f\x98\x80 ")},
  };
  for (const bool jit : {true, false}) {
    const Gpt2Splitter splitter(jit);
    for (const auto& [name, text] : cases) {
      const auto start = std::chrono::steady_clock::now();
      std::size_t bytes = 0;
      splitter.split(text, [&](std::string_view piece) { bytes += piece.size(); });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_EQ(bytes, text.size()) << name;
      EXPECT_LT(seconds, kBoundSeconds) << name << (jit ? " (JIT)" : " (interpreter)");
    }
  }
}

}  // namespace
