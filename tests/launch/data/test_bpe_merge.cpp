// The merge loop of launch/data/bpe_tokenizer.h (issue 37): the heap merge
// against the straightforward one it replaced (kept here only, as the
// reference) on random vocabularies and strings with fixed seeds, GPT-2's own
// tokenizer against the same reference on random text, and guards that one
// long pre-token, and hostile text for the PCRE2 split, encode in bounded
// time (a scan per merge took 10 s for one 120 kB word).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "launch/data/bpe_tokenizer.h"
#include "launch/data/byte_level.h"

namespace {

using launch::BpeTokenizer;
using json = nlohmann::json;

const std::string kDir = TOKENIZER_DATA_DIR;

// Far above what O(n log n) needs for 200 kB (tens of milliseconds) and far
// below what the quadratic loop needed (minutes): a guard, not a benchmark.
// AddressSanitizer (the build-asan suite) makes it some 5x slower; the
// quadratic loops were slower still by far more.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kBoundSeconds = 10.0;
#else
constexpr double kBoundSeconds = 2.0;
#endif

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string printable(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The reference: a tokenizer's vocabulary and merges as ids, and the loop the
// encoder used before issue 37 (one scan of the word per merge).
struct ReferenceBpe {
  std::int32_t byte_ids[256];
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges;  // (a, b) -> (rank, merged id)

  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  // From a tokenizer.json whose tokens are written in their byte stand-ins.
  explicit ReferenceBpe(const json& root) {
    const json& model = root["model"];
    std::unordered_map<std::string, std::int32_t> vocab;
    for (const auto& [token, id] : model["vocab"].items()) vocab[token] = id.get<std::int32_t>();
    const auto& table = launch::byte_to_unicode();
    for (int b = 0; b < 256; ++b) byte_ids[b] = vocab.at(table[b]);
    const json& list = model["merges"];
    for (std::size_t rank = 0; rank < list.size(); ++rank) {
      std::string a, b;
      if (list[rank].is_string()) {
        const std::string s = list[rank];
        a = s.substr(0, s.find(' '));
        b = s.substr(s.find(' ') + 1);
      } else {
        a = list[rank][0];
        b = list[rank][1];
      }
      merges[key(vocab.at(a), vocab.at(b))] = {static_cast<std::int32_t>(rank), vocab.at(a + b)};
    }
  }

  std::vector<std::int32_t> encode_word(const std::string& word) const {
    std::vector<std::int32_t> symbols;
    for (const char c : word) symbols.push_back(byte_ids[static_cast<unsigned char>(c)]);
    for (;;) {
      std::int32_t best_rank = std::numeric_limits<std::int32_t>::max(), merged = -1;
      std::size_t best_at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = merges.find(key(symbols[i], symbols[i + 1]));
        if (it != merges.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          merged = it->second.second;
          best_at = i;
        }
      }
      if (merged < 0) break;
      symbols[best_at] = merged;
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    return symbols;
  }
};

// A random byte-level BPE over a few bytes (so that many merges apply): the
// 256 bytes in a shuffled id order, then merges of random pairs of tokens,
// some of them repeating an earlier pair (the later rank counts), some making
// a string that is already a token, and with `alias_ids` some new tokens
// sharing an id with an older one (a hostile file the loader accepts).
json random_tokenizer(std::mt19937& rng, const std::string& alphabet, int num_merges, bool alias_ids,
                      bool string_merges) {
  std::vector<int> ids(256);
  for (int b = 0; b < 256; ++b) ids[b] = b;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::map<std::string, int> vocab;  // raw bytes -> id
  std::vector<std::string> tokens;   // raw bytes, the candidates for merging
  for (int b = 0; b < 256; ++b) vocab[std::string(1, static_cast<char>(b))] = ids[b];
  for (const char c : alphabet) tokens.emplace_back(1, c);
  int next_id = 256;
  std::vector<std::pair<std::string, std::string>> merges;
  auto pick = [&] { return tokens[std::uniform_int_distribution<std::size_t>(0, tokens.size() - 1)(rng)]; };
  std::uniform_real_distribution<double> coin(0, 1);
  for (int m = 0; m < num_merges; ++m) {
    if (!merges.empty() && coin(rng) < 0.05) {  // a repeated pair
      merges.push_back(merges[std::uniform_int_distribution<std::size_t>(0, merges.size() - 1)(rng)]);
      continue;
    }
    const std::string a = pick(), b = pick();
    if (!vocab.count(a + b)) {
      const bool alias = alias_ids && next_id > 256 && coin(rng) < 0.1;
      vocab[a + b] = alias ? std::uniform_int_distribution<int>(256, next_id - 1)(rng) : next_id++;
      tokens.push_back(a + b);
    }
    merges.emplace_back(a, b);
  }
  json root;
  root["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", json::object()}, {"merges", json::array()}};
  for (const auto& [token, id] : vocab) root["model"]["vocab"][launch::bytes_to_unicode_string(token)] = id;
  for (const auto& [a, b] : merges) {
    const std::string sa = launch::bytes_to_unicode_string(a), sb = launch::bytes_to_unicode_string(b);
    if (string_merges)
      root["model"]["merges"].push_back(sa + " " + sb);
    else
      root["model"]["merges"].push_back(json::array({sa, sb}));
  }
  root["normalizer"] = nullptr;
  // No regex split: the whole text is one pre-token, so the merge loop sees long words.
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  root["decoder"] = nullptr;
  return root;
}

std::string random_text(std::mt19937& rng, const std::string& alphabet, std::size_t max_length) {
  std::string text(std::uniform_int_distribution<std::size_t>(1, max_length)(rng), ' ');
  // Runs of one byte now and then: the repeated pairs ("aaaa") that merge in chains.
  std::uniform_int_distribution<std::size_t> letter(0, alphabet.size() - 1);
  for (std::size_t i = 0; i < text.size();) {
    const char c = alphabet[letter(rng)];
    const std::size_t run = rng() % 8 == 0 ? 1 + rng() % 12 : 1;
    for (std::size_t k = 0; k < run && i < text.size(); ++k) text[i++] = c;
  }
  return text;
}

TEST(BpeMerge, HeapMergeEqualsTheScanOnRandomVocabulariesAndStrings) {
  int words = 0;
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(seed);
    std::string alphabet;
    const int letters = 2 + static_cast<int>(rng() % 6);
    if (seed % 10 == 0) {  // every byte can occur, multi-byte stand-ins included
      for (int b = 0; b < 256; ++b) alphabet.push_back(static_cast<char>(b));
    } else {
      for (int k = 0; k < letters; ++k) alphabet.push_back(static_cast<char>(rng() % 256));
    }
    const int num_merges = static_cast<int>(rng() % 400);
    const json root = random_tokenizer(rng, alphabet, num_merges, seed % 3 == 0, seed % 2 == 0);
    const BpeTokenizer tokenizer = BpeTokenizer::from_json(root.dump(), "random seed " + std::to_string(seed));
    const ReferenceBpe reference(root);
    for (int i = 0; i < 60; ++i) {
      // Mostly short words, some long ones (the reference is quadratic: a few thousand bytes at most).
      const std::string text = random_text(rng, alphabet, i % 10 == 0 ? 3000 : 64);
      ASSERT_EQ(tokenizer.encode(text), reference.encode_word(text))
          << "seed " << seed << ", " << num_merges << " merges, text " << printable(text);
      ++words;
    }
    // The cache gives the same ids the second time.
    const std::string again = random_text(rng, alphabet, 64);
    ASSERT_EQ(tokenizer.encode(again), tokenizer.encode(again)) << "seed " << seed;
  }
  EXPECT_EQ(words, 60 * 60);
}

const BpeTokenizer& gpt2() {
  static const BpeTokenizer t = BpeTokenizer::from_file(kDir + "/gpt2.json");
  return t;
}

TEST(BpeMerge, Gpt2EqualsTheScanOnRandomText) {
  const json root = json::parse(read_text(kDir + "/gpt2.json"));
  const ReferenceBpe reference(root);
  launch::Gpt2Splitter splitter;
  const std::vector<std::string> pieces = {"the", " the", "ing", " a", "aaaa", "  ", "\n", "123", "'s", ",",
                                           "é",   "日本", "😀", " Zürich", "xx", "ll", "!!", "\t"};
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    std::string text;
    const std::size_t n = 1 + rng() % 200;
    for (std::size_t i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    std::vector<std::int32_t> want;
    splitter.split(text, [&](std::string_view word) {
      const std::vector<std::int32_t> ids = reference.encode_word(std::string(word));
      want.insert(want.end(), ids.begin(), ids.end());
    });
    ASSERT_EQ(gpt2().encode(text), want) << "seed " << seed << ": " << printable(text);
  }
}

// Encodes `text` with GPT-2, checks the round trip and the time, twice (the
// second time would come from the cache, which long words do not enter).
void expect_bounded(const std::string& name, const std::string& text) {
  for (int pass = 0; pass < 2; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::int32_t> ids = gpt2().encode(text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, kBoundSeconds) << name << " (" << text.size() << " bytes, pass " << pass << ")";
    EXPECT_FALSE(ids.empty()) << name;
    EXPECT_TRUE(gpt2().decode(ids) == text) << name << ": the round trip changed the text";
  }
}

TEST(BpeMerge, OneLongPreTokenEncodesInBoundedTime) {
  constexpr std::size_t kBytes = 200 * 1000;
  std::mt19937 rng(37);
  std::string letters(kBytes, 'a');
  for (char& c : letters) c = static_cast<char>('a' + rng() % 26);
  // Each is a single pre-token (one match of " ?\p{L}+", or no regex match at all).
  std::size_t count = 0;
  launch::Gpt2Splitter().split(letters, [&](std::string_view) { ++count; });
  ASSERT_EQ(count, 1u);
  expect_bounded("random letters", letters);
  expect_bounded("one letter repeated", std::string(kBytes, 'a'));
  expect_bounded("two letters alternating", [&] {
    std::string s(kBytes, 'a');
    for (std::size_t i = 1; i < s.size(); i += 2) s[i] = 'b';
    return s;
  }());
  expect_bounded("invalid UTF-8 (one pre-token of stray bytes)", std::string(kBytes, '\xff'));
}

TEST(BpeMerge, HostileTextForTheSplitPatternEncodesInBoundedTime) {
  constexpr std::size_t kBytes = 200 * 1000;
  auto repeat = [&](const std::string& unit) {
    std::string s;
    while (s.size() + unit.size() <= kBytes) s += unit;
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"spaces", std::string(kBytes, ' ')},
      {"spaces then a letter", std::string(kBytes, ' ') + "x"},
      {"newlines then a letter", std::string(kBytes, '\n') + "x"},
      {"mixed whitespace", repeat(" \t\r\n\v\f")},
      {"digits", std::string(kBytes, '7')},
      {"punctuation", std::string(kBytes, '!')},
      {"apostrophes", std::string(kBytes, '\'')},
      {"'s repeated", repeat("'s")},
      {"letter space", repeat("a ")},
      {"space space letter", repeat("  a")},
      {"space apostrophe", repeat(" '")},
      {"emoji", repeat("😀")},
      {"combining marks", repeat("e\xcc\x81")},
      {"no-break spaces", repeat("\xc2\xa0")},
      {"invalid UTF-8 between letters", repeat("a\xff")},
      {"truncated sequences", repeat("\xe6\x97")},
      {"overlong encodings", repeat("\xc0\xaf")},
      {"surrogates in UTF-8", repeat("\xed\xa0\x80")},
  };
  for (const auto& [name, text] : cases) expect_bounded(name, text);
}

}  // namespace
