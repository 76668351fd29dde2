// launch/data/unicode_normalizer.h: NFC as Hugging Face `tokenizers`' NFC
// normalizer gives it (each expected string below is what tokenizers 0.23.3's
// normalizers.NFC().normalize_str returned), invalid UTF-8 kept as it is, and
// a long run of combining marks in linear time where utf8proc's own ordering
// is quadratic. (test_bpe_pipelines checks every text the tokenizer tests use
// against tokenizers' NFC.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "launch/data/unicode_normalizer.h"

namespace {

using launch::normalize_nfc;

TEST(Nfc, ComposesReordersAndKeepsWhatNfcKeeps) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"e\u0301", "\u00e9"},                          // composition
      {"\u212b", "\u00c5"},                           // ANGSTROM SIGN: a singleton
      {"\u1100\u1161\u11a8", "\uac01"},               // Hangul jamo -> one syllable
      {"\u0958", "\u0915\u093c"},                     // excluded from composition
      {"a\u0316\u0301", "\u00e1\u0316"},              // composes past a lower class
      {"a\u0301\u0316", "\u00e1\u0316"},              // reordered, then composed
      {"\u0344", "\u0308\u0301"},                     // decomposes, does not recompose
      {"\u1fef", "`"},                                // to ASCII
      {"\u037e", ";"},                                // GREEK QUESTION MARK -> ';'
      {"Tie\u0302\u0301ng Vie\u0323\u0302t", "Ti\u1ebfng Vi\u1ec7t"},
      {"\u1e0b\u0323", "\u1e0d\u0307"},               // reordered: the dot below composes
      {"q\u0307\u0323", "q\u0323\u0307"},             // reordered, nothing to compose with
      {">\u0338", "\u226f"},                          // ASCII + mark -> one character
      {"\ufb01\u2460", "\ufb01\u2460"},               // compatibility forms stay (NFC, not NFKC)
      {"plain ASCII\n", "plain ASCII\n"},
      {"", ""},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(normalize_nfc(text), want) << text;
}

TEST(Nfc, InvalidUtf8StaysAndBarsComposition) {
  EXPECT_EQ(normalize_nfc("e\xff\u0301"), "e\xff\u0301");  // nothing composes across the byte
  EXPECT_EQ(normalize_nfc("e\u0301\xc3"), "\u00e9\xc3");
  EXPECT_EQ(normalize_nfc("\xe6\x97 cafe\u0301 \xed\xa0\x80"), "\xe6\x97 caf\u00e9 \xed\xa0\x80");
}

// utf8proc's own canonical ordering is an exchange sort (64 kB of marks: 5 s;
// 1 MB: some 1000 s); ours sorts. AddressSanitizer is some 5x slower.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kBoundSeconds = 10.0;
#else
constexpr double kBoundSeconds = 2.0;
#endif

TEST(Nfc, LongRunOfCombiningMarksIsLinear) {
  const int n = 250000;
  std::string text = "a";
  for (int i = 0; i < n; ++i) text += "\u0301";  // combining class 230
  for (int i = 0; i < n; ++i) text += "\u0316";  // 220: sorts before all of the above
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = normalize_nfc(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, kBoundSeconds);
  // As tokenizers gives for small n: a + U+0301 composes past the 220s.
  std::string want = "\u00e1";
  for (int i = 0; i < n; ++i) want += "\u0316";
  for (int i = 1; i < n; ++i) want += "\u0301";
  EXPECT_TRUE(out == want) << out.size() << " bytes, wanted " << want.size();
}

}  // namespace
