// launch/data/bpe_trainer.h against Hugging Face tokenizers' BpeTrainer
// (tests/data/tokenizers/make_trainer_data.py wrote the reference files): the
// same vocabulary and merges in the same order, the whole tokenizer.json equal
// as JSON, a round trip through BpeTokenizer with the ids tokenizers gives for
// the file, and one-line refusals of sizes the text cannot give.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/bpe_trainer.h"

namespace {

using launch::BpeTokenizer;
using launch::BpeTrainer;
using json = nlohmann::json;
using testing::HasSubstr;

const std::string kDir = TOKENIZER_DATA_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string& corpus() {
  static const std::string text = read_text(kDir + "/bpe_train_corpus.txt");
  return text;
}

int reference_vocab_size() { return json::parse(read_text(kDir + "/hf_trained_ids.json"))["vocab_size"].get<int>(); }

// The corpus's lines, each keeping its "\n" (Python's splitlines(keepends=True) for "\n"-only text).
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t newline = text.find('\n', at);
    const std::size_t end = newline == std::string::npos ? text.size() : newline + 1;
    out.push_back(text.substr(at, end - at));
    at = end;
  }
  return out;
}

std::string learned_json(const std::vector<std::string>& texts, int vocab_size) {
  BpeTrainer trainer;
  for (const std::string& text : texts) trainer.add_text(text);
  return trainer.train(vocab_size).to_json();
}

void expect_same_as_reference(const std::string& ours_text, const std::string& reference_file) {
  const json ours = json::parse(ours_text);
  const json hf = json::parse(read_text(kDir + "/" + reference_file));
  // Merges first, element by element, so that a difference names its rank.
  const json& our_merges = ours["model"]["merges"];
  const json& hf_merges = hf["model"]["merges"];
  ASSERT_EQ(our_merges.size(), hf_merges.size());
  for (std::size_t rank = 0; rank < hf_merges.size(); ++rank)
    ASSERT_EQ(our_merges[rank], hf_merges[rank]) << "merge " << rank << " of " << reference_file;
  EXPECT_EQ(ours["model"]["vocab"], hf["model"]["vocab"]);
  EXPECT_EQ(ours, hf) << "the rest of the file (pre-tokenizer, decoder, added tokens, model options)";
}

TEST(BpeTrainer, LearnsTheMergesAndVocabOfHuggingFaceTokenizers) {
  expect_same_as_reference(learned_json({corpus()}, reference_vocab_size()), "hf_trained_bpe.json");
}

TEST(BpeTrainer, TextsFedOneByOneAsTokenizersSequences) {
  expect_same_as_reference(learned_json(lines(corpus()), reference_vocab_size()), "hf_trained_bpe_lines.json");
}

TEST(BpeTrainer, VocabularyOrderAndSize) {
  BpeTrainer trainer;
  trainer.add_text(corpus());
  const launch::LearnedBpe bpe = trainer.train(reference_vocab_size());
  ASSERT_EQ(static_cast<int>(bpe.tokens.size()), reference_vocab_size());
  EXPECT_EQ(bpe.tokens[0], launch::kEndOfText);
  // Sorted by stand-in: the 188 printable bytes ('!' = U+0021 ... 0xFF = U+00FF), then the other 68 in byte order
  // (0x00 = U+0100 ... 0x20 = U+0120 ... 0xAD = U+0143).
  EXPECT_EQ(bpe.tokens[1], "!");
  EXPECT_EQ(bpe.tokens[188], "\xFF");
  EXPECT_EQ(bpe.tokens[189], std::string(1, '\0'));
  EXPECT_EQ(bpe.tokens[221], " ");
  EXPECT_EQ(bpe.tokens[256], "\xAD");
  EXPECT_EQ(bpe.merges.size(), bpe.tokens.size() - BpeTrainer::kMinVocab);
}

TEST(BpeTrainer, RoundTripThroughBpeTokenizerWithTheIdsOfTokenizers) {
  const json cases = json::parse(read_text(kDir + "/hf_trained_ids.json"))["cases"];
  int checked = 0;
  for (const std::string& name : {std::string("hf_trained_bpe.json"), std::string("hf_trained_bpe_lines.json")}) {
    const std::vector<std::string> texts = name == "hf_trained_bpe.json" ? std::vector<std::string>{corpus()}
                                                                         : lines(corpus());
    const BpeTokenizer tokenizer = BpeTokenizer::from_json(learned_json(texts, reference_vocab_size()), name);
    EXPECT_EQ(tokenizer.vocab_size(), reference_vocab_size());
    EXPECT_EQ(tokenizer.token_to_id(launch::kEndOfText), 0);
    for (const json& c : cases) {
      if (c["tokenizer"] != name) continue;
      const std::string text = c["text"];
      const std::vector<std::int32_t> ids = tokenizer.encode(text);
      EXPECT_EQ(ids, c["ids"].get<std::vector<std::int32_t>>()) << name << " encoding " << json(text).dump();
      EXPECT_EQ(tokenizer.decode(ids), text) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8);
}

TEST(BpeTrainer, SmallestVocabularyHasNoMerges) {
  BpeTrainer trainer;
  trainer.add_text(corpus());
  const launch::LearnedBpe bpe = trainer.train(BpeTrainer::kMinVocab);
  EXPECT_EQ(bpe.tokens.size(), 257u);
  EXPECT_TRUE(bpe.merges.empty());
  const BpeTokenizer tokenizer = BpeTokenizer::from_json(bpe.to_json(), "bytes only");
  EXPECT_EQ(tokenizer.encode("ab").size(), 2u);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(corpus())), corpus());
}

std::string error_of(const std::string& text, int vocab_size) {
  BpeTrainer trainer;
  trainer.add_text(text);
  try {
    trainer.train(vocab_size);
  } catch (const engine::Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(BpeTrainer, RefusesSizesItCannotGiveOnOneLine) {
  EXPECT_THAT(error_of(corpus(), 256), HasSubstr("a byte-level BPE of 256 tokens: expected 257"));
  EXPECT_THAT(error_of(corpus(), 65537), HasSubstr("65536"));
  // tokenizers stops at 981 on this corpus (make_trainer_data.py's corpus fed whole): no pair is left.
  EXPECT_NO_THROW(learned_json({corpus()}, 981));
  const std::string message = error_of(corpus(), 982);
  EXPECT_THAT(message, HasSubstr("a byte-level BPE of 982 tokens: the text gives only 981"));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_THAT(error_of("", 300), HasSubstr("the text gives only 257"));
}

// word.rs's Word::merge as it is written there (and as bpe_trainer.cpp had it
// before issue 37): each merged pair removed from the middle of the vector,
// O(n) per occurrence. The reference for bpe_merge_word.
void reference_merge_word(std::vector<std::int32_t>& word, std::int32_t c1, std::int32_t c2, std::int32_t replacement,
                          std::vector<launch::BpePairChange>& changes) {
  auto key = [](std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  };
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (word[i] != c1 || i + 1 >= word.size() || word[i + 1] != c2) continue;
    const std::int32_t second = word[i + 1];
    if (i > 0) {
      changes.push_back({key(word[i - 1], c1), -1});
      changes.push_back({key(word[i - 1], replacement), +1});
    }
    word[i] = replacement;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    if (i + 1 < word.size()) {
      changes.push_back({key(second, word[i + 1]), -1});
      changes.push_back({key(replacement, word[i + 1]), +1});
    }
  }
}

TEST(BpeTrainer, MergeWordEqualsWordRsMergeOnRandomWords) {
  for (std::uint32_t seed = 1; seed <= 2000; ++seed) {
    std::mt19937 rng(seed);
    const int letters = 1 + static_cast<int>(rng() % 4);  // few symbols: many overlapping pairs ("aaa")
    std::vector<std::int32_t> word(rng() % 40);
    for (std::int32_t& s : word) s = static_cast<std::int32_t>(rng() % letters);
    const auto c1 = static_cast<std::int32_t>(rng() % letters), c2 = static_cast<std::int32_t>(rng() % letters);
    // The replacement is sometimes a symbol already in the word (a merge that remade an existing string).
    const auto replacement = static_cast<std::int32_t>(rng() % 3 == 0 ? rng() % letters : 100 + rng() % 5);
    std::vector<std::int32_t> ours = word, theirs = word;
    std::vector<launch::BpePairChange> our_changes, their_changes;
    launch::bpe_merge_word(ours, c1, c2, replacement, our_changes);
    reference_merge_word(theirs, c1, c2, replacement, their_changes);
    ASSERT_EQ(ours, theirs) << "seed " << seed;
    ASSERT_EQ(our_changes.size(), their_changes.size()) << "seed " << seed;
    for (std::size_t i = 0; i < our_changes.size(); ++i) {
      ASSERT_EQ(our_changes[i].pair, their_changes[i].pair) << "seed " << seed << ", change " << i;
      ASSERT_EQ(our_changes[i].change, their_changes[i].change) << "seed " << seed << ", change " << i;
    }
  }
}

// One 200 kB pre-token: word.rs's merge, one vector erase per occurrence, took
// O(n^2) for its first merge of "aaaa...". A guard, not a benchmark.
TEST(BpeTrainer, OneLongWordTrainsInBoundedTime) {
  constexpr std::size_t kBytes = 200 * 1000;
  std::mt19937 rng(37);
  std::string letters(kBytes, 'a');
  for (char& c : letters) c = static_cast<char>('a' + rng() % 26);
  for (const auto& [name, text, vocab_size] : {std::tuple{"one letter repeated", std::string(kBytes, 'a'), 267},
                                               std::tuple{"random letters", letters, 400}}) {
    const auto start = std::chrono::steady_clock::now();
    BpeTrainer trainer;
    trainer.add_text(text);
    EXPECT_EQ(trainer.distinct_words(), 1) << name;
    const launch::LearnedBpe bpe = trainer.train(vocab_size);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(static_cast<int>(bpe.tokens.size()), vocab_size) << name;
#if defined(__SANITIZE_ADDRESS__)
    EXPECT_LT(seconds, 10.0) << name;  // AddressSanitizer: some 5x slower
#else
    EXPECT_LT(seconds, 2.0) << name;
#endif
  }
}

}  // namespace
