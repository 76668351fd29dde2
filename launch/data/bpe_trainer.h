// Learns a byte-level BPE (GPT-2's kind, Radford et al. 2019 section 2.2;
// BPE after Sennrich et al. 2016) from text and writes it as a Hugging Face
// `tokenizer.json` that BpeTokenizer::from_file and tokenizers'
// Tokenizer.from_file both load.
//
// It is Hugging Face tokenizers' BpeTrainer (tokenizers/src/models/bpe/
// trainer.rs, word.rs) run as
//   Tokenizer(models.BPE()), pre_tokenizer ByteLevel(add_prefix_space=False),
//   decoder ByteLevel(), BpeTrainer(vocab_size=N, min_frequency=0,
//   special_tokens=["<|endoftext|>"], initial_alphabet=ByteLevel.alphabet()),
// with each add_text() one sequence of train_from_iterator, and gives the same
// vocabulary and merges in the same order (tested against a file written by
// tokenizers 0.23.3). That means:
//   - ids: <|endoftext|> is 0 (tokenizers adds special tokens first), then the
//     256 byte stand-ins sorted by code point (the printable bytes '!'..'ÿ'
//     first, then the other 68 as U+0100...), then one token per merge;
//   - each step merges the pair of adjacent symbols with the highest count
//     over all words (a word's count is how often the pre-token occurred),
//     ties going to the smallest (left id, right id) (trainer.rs, Merge's
//     Ord: count, then the pair in reverse);
//   - pair counts are updated incrementally from the words that held the
//     merged pair (an index pair -> words, a max-heap with stale entries
//     refreshed when popped), exactly as trainer.rs does, including its quirk
//     that a pair can be merged twice when another merge already made the
//     same string (then the merges list repeats and the vocabulary does not
//     grow). Only the order in which two heap entries of the same pair and
//     count pop is ours (older first); tokenizers leaves it to its heap.
// N counts the whole vocabulary (256 bytes + merges + <|endoftext|>), as
// tokenizers' vocab_size does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launch/data/byte_level.h"

namespace launch {

struct LearnedBpe {
  std::vector<std::string> tokens;                          // by id, as raw bytes; tokens[0] is <|endoftext|>
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;  // in rank order: (left id, right id)
  std::vector<std::int32_t> merged;                         // merges[i] makes token merged[i]

  // The Hugging Face tokenizer.json, as tokenizers 0.23 writes it (keys in its
  // order, merges as [left, right] pairs, tokens in their byte stand-ins).
  std::string to_json() const;
};

// A pair of adjacent symbols, (left id << 32) | right id, that lost (-1) or
// gained (+1) one occurrence in a word.
struct BpePairChange {
  std::uint64_t pair;
  int change;
};

// One step of training inside one word (tokenizers' word.rs Word::merge):
// merges every (c1, c2) left to right into `replacement` and appends to
// `changes` the pairs around each merge that lost or gained an occurrence,
// in word.rs's order. Linear in the word's length. Public for its test.
void bpe_merge_word(std::vector<std::int32_t>& word, std::int32_t c1, std::int32_t c2, std::int32_t replacement,
                    std::vector<BpePairChange>& changes);

class BpeTrainer {
 public:
  // Smallest vocabulary: the 256 bytes and <|endoftext|>, no merges.
  static constexpr int kMinVocab = 257;
  // Ids that fit 16 bits, so that `prepare` writes llm.c's version 1 shards
  // (token_shard.h) for the tokenizers it learns.
  static constexpr int kMaxVocab = 65536;

  // Counts the pre-tokens of one text (one sequence of tokenizers'
  // train_from_iterator: the pattern never matches across two texts).
  void add_text(std::string_view text);
  std::int64_t distinct_words() const { return static_cast<std::int64_t>(word_counts_.size()); }

  // Learns a vocabulary of exactly `vocab_size` tokens. Throws engine::Error
  // when vocab_size is outside [kMinVocab, kMaxVocab] or the text cannot give
  // that many (no adjacent pair left to merge), naming how many it can.
  LearnedBpe train(int vocab_size) const;

 private:
  // Lets word_counts_ be searched with a string_view, without a copy per pre-token.
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  Gpt2Splitter splitter_;
  std::unordered_map<std::string, std::int64_t, StringHash, std::equal_to<>> word_counts_;  // pre-token (raw bytes) -> occurrences
};

}  // namespace launch
