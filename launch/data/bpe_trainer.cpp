#include "launch/data/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"

namespace launch {

namespace {

using PairKey = std::uint64_t;  // (left id << 32) | right id: orders pairs as tokenizers' (u32, u32) tuples do

PairKey pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<PairKey>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}
std::int32_t left_of(PairKey p) { return static_cast<std::int32_t>(p >> 32); }
std::int32_t right_of(PairKey p) { return static_cast<std::int32_t>(p & 0xFFFFFFFFu); }

// A candidate merge in the max-heap: trainer.rs's `Merge`. Its word list
// lives in a pool (`positions`) so that heap moves stay cheap.
struct Candidate {
  std::int64_t count;
  PairKey pair;
  std::uint32_t positions;  // index into the pool of word lists
  std::uint64_t sequence;   // push order: breaks the one tie tokenizers leaves to its heap
};

// "a is popped after b": the highest count first, then the smallest pair
// (trainer.rs: `other.pair.cmp(&self.pair)`), then the older entry.
struct PopsLater {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.count != b.count) return a.count < b.count;
    if (a.pair != b.pair) return a.pair > b.pair;
    return a.sequence > b.sequence;
  }
};

}  // namespace

// Merges every (c1, c2) of `word` left to right into `replacement` and
// reports the pairs that lost or gained an occurrence: word.rs `Word::merge`
// step for step (the merged pair itself is not reported, as there). word.rs
// removes each merged pair from the middle of a vector, O(n) per occurrence
// and so O(n^2) for one long word ("aaaa..."); here one pass copies each
// symbol once, reading ahead of where it writes: the symbol before a pair is
// the last one written (perhaps a replacement, as in word.rs), the one after
// it the next one read, so the changes are the same, in the same order.
void bpe_merge_word(std::vector<std::int32_t>& word, std::int32_t c1, std::int32_t c2, std::int32_t replacement,
                    std::vector<BpePairChange>& changes) {
  const std::size_t n = word.size();
  std::size_t w = 0;
  for (std::size_t r = 0; r < n;) {
    if (word[r] != c1 || r + 1 >= n || word[r + 1] != c2) {
      word[w++] = word[r++];
      continue;
    }
    if (w > 0) {
      changes.push_back({pair_key(word[w - 1], c1), -1});
      changes.push_back({pair_key(word[w - 1], replacement), +1});
    }
    if (r + 2 < n) {
      changes.push_back({pair_key(c2, word[r + 2]), -1});
      changes.push_back({pair_key(replacement, word[r + 2]), +1});
    }
    word[w++] = replacement;
    r += 2;
  }
  word.resize(w);
}

namespace {

// A set of word indices (tokenizers' HashSet<usize>): sorted, no repeats.
void make_set(std::vector<std::int32_t>& words) {
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
}

}  // namespace

void BpeTrainer::add_text(std::string_view text) {
  splitter_.split(text, [&](std::string_view word) {
    auto it = word_counts_.find(word);
    if (it == word_counts_.end()) it = word_counts_.emplace(std::string(word), 0).first;
    ++it->second;
  });
}

LearnedBpe BpeTrainer::train(int vocab_size) const {
  ENGINE_CHECK(vocab_size >= kMinVocab && vocab_size <= kMaxVocab, "a byte-level BPE of ", vocab_size,
               " tokens: expected ", kMinVocab, " (the 256 bytes and ", kEndOfText, ") to ", kMaxVocab,
               " (ids that fit 16 bits, llm.c's shards)");
  LearnedBpe bpe;
  std::unordered_map<std::string, std::int32_t> ids;  // token (raw bytes) -> id
  auto add_token = [&](std::string token) {
    const auto id = static_cast<std::int32_t>(bpe.tokens.size());
    ids.emplace(token, id);
    bpe.tokens.push_back(std::move(token));
    return id;
  };
  // 1. Special tokens first, 2. the alphabet sorted by code point (trainer.rs
  // add_special_tokens, compute_alphabet).
  add_token(kEndOfText);
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  std::sort(bytes.begin(), bytes.end(), [](int a, int b) {
    return byte_to_code_point(static_cast<std::uint8_t>(a)) < byte_to_code_point(static_cast<std::uint8_t>(b));
  });
  std::int32_t byte_id[256];
  for (const int b : bytes) byte_id[b] = add_token(std::string(1, static_cast<char>(b)));

  // 3. Words as byte symbols with their counts; 4. pair counts and, per
  // pair, the words holding it.
  std::vector<std::vector<std::int32_t>> words;
  std::vector<std::int64_t> counts;
  words.reserve(word_counts_.size());
  counts.reserve(word_counts_.size());
  std::unordered_map<PairKey, std::int64_t> pair_counts;
  std::unordered_map<PairKey, std::vector<std::int32_t>> where_to_update;
  for (const auto& [text, count] : word_counts_) {
    const auto w = static_cast<std::int32_t>(words.size());
    std::vector<std::int32_t>& word = words.emplace_back();
    for (const char c : text) word.push_back(byte_id[static_cast<unsigned char>(c)]);
    counts.push_back(count);
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const PairKey p = pair_key(word[i], word[i + 1]);
      pair_counts[p] += count;
      where_to_update[p].push_back(w);
    }
  }
  std::vector<std::vector<std::int32_t>> positions;  // the pool Candidate::positions points into
  std::priority_queue<Candidate, std::vector<Candidate>, PopsLater> queue;
  std::uint64_t pushed = 0;
  // Every pair that gained words becomes a candidate with its current total
  // count and the words it gained (trainer.rs: where_to_update.drain()).
  auto push_updates = [&] {
    for (auto& [pair, where] : where_to_update) {
      const std::int64_t count = pair_counts[pair];
      if (count <= 0) continue;
      make_set(where);
      positions.push_back(std::move(where));
      queue.push({count, pair, static_cast<std::uint32_t>(positions.size() - 1), pushed++});
    }
    where_to_update.clear();
  };
  push_updates();

  // 5. Merges until the vocabulary is full.
  std::vector<BpePairChange> changes;
  while (static_cast<int>(ids.size()) < vocab_size && !queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    const std::int64_t current = pair_counts[top.pair];
    if (top.count != current) {  // stale: counts fell since it was pushed
      top.count = current;
      queue.push(top);
      continue;
    }
    if (top.count < 1) break;
    const std::int32_t a = left_of(top.pair), b = right_of(top.pair);
    std::string merged = bpe.tokens[a] + bpe.tokens[b];
    const auto found = ids.find(merged);
    const std::int32_t new_id = found != ids.end() ? found->second : add_token(std::move(merged));
    bpe.merges.emplace_back(a, b);
    bpe.merged.push_back(new_id);

    std::vector<std::int32_t> where = std::move(positions[top.positions]);
    positions[top.positions] = {};
    for (const std::int32_t w : where) {
      changes.clear();
      bpe_merge_word(words[w], a, b, new_id, changes);
      for (const BpePairChange& c : changes) {
        pair_counts[c.pair] += c.change * counts[w];
        if (c.change > 0) where_to_update[c.pair].push_back(w);
      }
    }
    push_updates();
  }
  ENGINE_CHECK(static_cast<int>(ids.size()) >= vocab_size, "a byte-level BPE of ", vocab_size,
               " tokens: the text gives only ", ids.size(), " (", kMinVocab, " + ", ids.size() - kMinVocab,
               " merges before no adjacent pair is left; ", word_counts_.size(), " distinct words)");
  return bpe;
}

std::string LearnedBpe::to_json() const {
  using json = nlohmann::json;
  auto quoted = [](const std::string& s) { return json(s).dump(); };
  std::vector<std::string> written(tokens.size());  // each token in its byte stand-ins, quoted
  for (std::size_t id = 0; id < tokens.size(); ++id)
    written[id] = quoted(id == 0 ? tokens[id] : bytes_to_unicode_string(tokens[id]));
  std::ostringstream out;
  out << "{\n"
      << "  \"version\": \"1.0\",\n"
      << "  \"truncation\": null,\n"
      << "  \"padding\": null,\n"
      << "  \"added_tokens\": [\n"
      << "    {\"id\": 0, \"content\": " << quoted(kEndOfText)
      << ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}\n"
      << "  ],\n"
      << "  \"normalizer\": null,\n"
      << "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
         "\"use_regex\": true},\n"
      << "  \"post_processor\": null,\n"
      << "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
         "\"use_regex\": true},\n"
      << "  \"model\": {\n"
      << "    \"type\": \"BPE\",\n"
      << "    \"dropout\": null,\n"
      << "    \"unk_token\": null,\n"
      << "    \"continuing_subword_prefix\": null,\n"
      << "    \"end_of_word_suffix\": null,\n"
      << "    \"fuse_unk\": false,\n"
      << "    \"byte_fallback\": false,\n"
      << "    \"ignore_merges\": false,\n"
      << "    \"vocab\": {";
  for (std::size_t id = 0; id < tokens.size(); ++id)
    out << (id ? ",\n" : "\n") << "      " << written[id] << ": " << id;
  out << "\n    },\n    \"merges\": [";
  for (std::size_t i = 0; i < merges.size(); ++i)
    out << (i ? ",\n" : "\n") << "      [" << written[merges[i].first] << ", " << written[merges[i].second] << "]";
  out << (merges.empty() ? "]\n" : "\n    ]\n") << "  }\n}\n";
  return out.str();
}

}  // namespace launch
