#include "launch/data/bpe_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "engine/check.h"
#include "launch/data/added_tokens.h"
#include "launch/data/byte_level.h"
#include "launch/data/post_processor.h"
#include "launch/data/pre_tokenizer.h"
#include "launch/data/unicode_normalizer.h"
#include "launch/files/untrusted_json.h"

namespace launch {

namespace {

using json = nlohmann::json;

// Ids at or above this are refused: the id -> token table is sized by the
// largest id, so a hostile file must not make it gigabytes. Real
// vocabularies are far below it (Llama 3: 128256, Qwen2: 151936, Gemma:
// 262144); shards hold them as uint32 (token_shard.h, version 2).
constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 24;
// A pre-token cache bigger than this is cleared rather than grown: a corpus
// of many gigabytes has an unbounded tail of rare words.
constexpr std::size_t kMaxCacheEntries = 1 << 20;
// Only pre-tokens up to this many bytes are cached (tokenizers caches words
// under 256 characters): a long one is rare, and caching it would let a
// corpus of long "words" hold gigabytes in the cache.
constexpr std::size_t kMaxCachedWordBytes = 256;

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// Splits valid UTF-8 into characters; a stray byte counts as one character
// (only used on vocabulary strings, which JSON guarantees are valid).
std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> chars;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    chars.push_back(s.substr(i, n));
    i += n;
  }
  return chars;
}

using MergeTable = std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>>;  // (a, b) -> (rank, merged id)

// Applies merges to one pre-token's symbols until no adjacent pair has one:
// each time the pair of lowest rank, leftmost among equal ranks (the order of
// tokenizers' word.rs merge_all and of GPT-2's encoder.py). The symbols form
// a doubly linked list over their starting positions and every adjacent pair
// with a merge is a candidate (rank, position) in a min-heap; a candidate is
// stale, and skipped when popped, if its left symbol was merged away or the
// pair now at its position has another rank. Every pair that exists has a
// candidate in the heap, and a candidate passes the check only if its pair is
// there now, so the first one that passes is the pair a scan of the whole
// word would pick. Each merge pushes at most two candidates: O(n log n) for
// n bytes, where a scan per merge was O(n^2) (issue 37: one 120 kB word took
// 10 s).
void merge_symbols(const MergeTable& merges, std::vector<std::int32_t>& symbols) {
  const std::size_t n = symbols.size();
  if (n < 2) return;
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  using Candidate = std::pair<std::int32_t, std::size_t>;  // (rank, position of the left symbol)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto rank_at = [&](std::size_t i) -> const std::pair<std::int32_t, std::int32_t>* {
    if (i == kNone || next[i] == kNone) return nullptr;
    const auto it = merges.find(pair_key(symbols[i], symbols[next[i]]));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto push = [&](std::size_t i) {
    if (const auto* m = rank_at(i)) queue.push({m->first, i});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, i] = queue.top();
    queue.pop();
    if (!alive[i]) continue;
    const auto* m = rank_at(i);
    if (m == nullptr || m->first != rank) continue;  // stale: the pair at i changed
    const std::size_t j = next[i];
    symbols[i] = m->second;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] != kNone) prev[next[j]] = i;
    push(i);
    if (prev[i] != kNone) push(prev[i]);
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i != kNone; i = next[i]) symbols[w++] = symbols[i];
  symbols.resize(w);
}

}  // namespace

struct BpeTokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, std::int32_t> vocab;
  std::vector<std::string> id_to_token;  // "" where no token has the id
  std::vector<bool> id_is_added;
  MergeTable merges;
  AddedTokens added;
  std::int32_t byte_ids[256];
  std::unordered_map<std::string, std::uint8_t> unicode_to_byte;
  bool nfc = false;  // the normalizer: NFC or none
  bool ignore_merges = false;
  std::optional<PreTokenizer> pre;
  DocumentTemplate document_template;
  std::vector<std::int32_t> document_start;
  // Pre-token -> ids; searched with a string_view, without a copy per pre-token.
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> cache;
};

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in, "tokenizer '", path, "': cannot open: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

// Its refusals quote the file (a token, a pattern, nlohmann-json's "last read: ..."), so each is made
// printable on the way out (launch/files/untrusted_json.h): one line of valid UTF-8 whatever the bytes.
BpeTokenizer BpeTokenizer::from_json(std::string_view json_text, const std::string& source) try {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.source = source;
  const std::string where = "tokenizer '" + source + "': ";
  json root;
  // Untrusted text: size and nesting bounded before parsing (launch/files/untrusted_json.h).
  check_json_text(json_text, "tokenizer '" + source + "'", kMaxLargeJsonBytes);
  try {
    root = json::parse(json_text);
  } catch (const json::exception& error) {
    ENGINE_FAIL(where, "not valid JSON: ", error.what());
  }
  ENGINE_CHECK(root.is_object(), where, "expected a JSON object (a Hugging Face tokenizer.json)");

  // ---- model ----
  ENGINE_CHECK(root.contains("model") && root["model"].is_object(), where, "missing \"model\"");
  const json& model = root["model"];
  ENGINE_CHECK(model.value("type", std::string("BPE")) == "BPE", where, "model.type is '",
               model.value("type", std::string()), "', expected 'BPE'");
  ENGINE_CHECK(model.contains("vocab") && model["vocab"].is_object(), where, "missing model.vocab (an object {token: id})");
  ENGINE_CHECK(model.contains("merges") && model["merges"].is_array(), where, "missing model.merges (a list)");
  ENGINE_CHECK(!model.contains("dropout") || model["dropout"].is_null(), where, "model.dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    ENGINE_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "", where, "model.", key,
                 " is not supported (not a byte-level BPE of GPT-2's kind)");
  }
  ENGINE_CHECK(!model.value("byte_fallback", false), where, "model.byte_fallback is not supported");
  t.ignore_merges = model.value("ignore_merges", false);

  std::int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    ENGINE_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < kMaxTokenId, where,
                 "model.vocab['", token, "'] is ", id.dump(), ", expected an id in [0, ", kMaxTokenId, ")");
    t.vocab[token] = id.get<std::int32_t>();
    max_id = std::max<std::int64_t>(max_id, id.get<std::int64_t>());
  }
  ENGINE_CHECK(!t.vocab.empty(), where, "model.vocab is empty");

  // ---- normalizer: before the added tokens, whose content it may change ----
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    const json& normalizer = root["normalizer"];
    const bool typed = normalizer.is_object() && normalizer.contains("type") && normalizer["type"].is_string();
    const std::string type = typed ? normalizer["type"].get<std::string>() : "";
    ENGINE_CHECK(type == "NFC", where, "normalizer.type is '", type, "', expected 'NFC' or a null normalizer");
    t.nfc = true;
  }

  // ---- added tokens ----
  t.added = AddedTokens::from_json(root.value("added_tokens", json()), where, t.nfc, kMaxTokenId);
  max_id = std::max(max_id, t.added.max_id());

  t.id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  t.id_is_added.assign(static_cast<std::size_t>(max_id + 1), false);
  for (const auto& [token, id] : t.vocab) t.id_to_token[id] = token;
  for (const auto* added : {&t.added.raw, &t.added.normalized}) {
    for (const auto& [content, id] : *added) {
      t.id_to_token[id] = content;
      t.id_is_added[id] = true;
    }
  }

  // ---- merges: "a b" strings or ["a", "b"] pairs ----
  const json& merges = model["merges"];
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      ENGINE_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, where, "merge ", rank,
                   " '", s, "' is not two tokens separated by one space");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      ENGINE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, "merge ", rank,
                   " is ", m.dump(), ", expected \"a b\" or [\"a\", \"b\"]");
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    const auto ia = t.vocab.find(a), ib = t.vocab.find(b), iab = t.vocab.find(a + b);
    ENGINE_CHECK(ia != t.vocab.end(), where, "merge ", rank, " ('", a, "', '", b, "'): '", a, "' is not in the vocab");
    ENGINE_CHECK(ib != t.vocab.end(), where, "merge ", rank, " ('", a, "', '", b, "'): '", b, "' is not in the vocab");
    ENGINE_CHECK(iab != t.vocab.end(), where, "merge ", rank, " ('", a, "', '", b, "'): the merged '", a + b,
                 "' is not in the vocab");
    // A repeated pair takes its later rank, as tokenizers' HashMap collect does.
    t.merges[pair_key(ia->second, ib->second)] = {static_cast<std::int32_t>(rank), iab->second};
  }

  // ---- pre-tokenizer, post-processor, decoder ----
  ENGINE_CHECK(root.contains("pre_tokenizer") && root["pre_tokenizer"].is_object(), where,
               "missing pre_tokenizer (expected {\"type\": \"ByteLevel\", ...} or a \"Sequence\")");
  t.pre = PreTokenizer::from_json(root["pre_tokenizer"], where);
  t.document_template = parse_post_processor(root.value("post_processor", json()), where, [&](std::int64_t id) {
    return id >= 0 && id < static_cast<std::int64_t>(t.id_to_token.size()) && !t.id_to_token[id].empty();
  });
  if (t.document_template.present) {
    t.document_start = t.document_template.prefix;
  } else {
    if (const std::optional<std::int32_t> id = t.added.find(kEndOfText)) {
      t.document_start = {*id};
    } else if (const auto it = t.vocab.find(kEndOfText); it != t.vocab.end()) {
      t.document_start = {it->second};
    }
  }
  if (root.contains("decoder") && !root["decoder"].is_null()) {
    ENGINE_CHECK(root["decoder"].value("type", std::string()) == "ByteLevel", where, "decoder.type is '",
                 root["decoder"].value("type", std::string()), "', expected 'ByteLevel' or null");
  }

  const auto& table = byte_to_unicode();
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = t.vocab.find(table[byte]);
    t.byte_ids[byte] = it == t.vocab.end() ? -1 : it->second;
    t.unicode_to_byte[table[byte]] = static_cast<std::uint8_t>(byte);
  }

  BpeTokenizer tokenizer(std::move(impl));
  tokenizer.vocab_size_ = static_cast<int>(max_id + 1);
  return tokenizer;
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
}

std::optional<std::int32_t> BpeTokenizer::token_to_id(const std::string& token) const {
  if (const std::optional<std::int32_t> id = impl_->added.find(token)) return id;
  const auto it = impl_->vocab.find(token);
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

const std::vector<std::int32_t>& BpeTokenizer::document_start() const { return impl_->document_start; }

bool BpeTokenizer::document_start_from_template() const { return impl_->document_template.present; }

// tokenizers' AddedVocabulary::extract_and_normalize, then the pre-tokenizer
// and the model: added tokens that are not normalized are found in the raw
// text; each stretch between them is normalized, then cut at the normalized
// added tokens; what is left is pre-tokenized and merged.
std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 1);
  const Impl& t = *impl_;
  split_at_added(text, t.added.raw, out, [&](std::string_view raw) {
    const std::string normalized = t.nfc ? normalize_nfc(raw) : std::string();
    split_at_added(t.nfc ? std::string_view(normalized) : raw, t.added.normalized, out,
                   [&](std::string_view piece) { encode_piece(piece, out); });
  });
  return out;
}

// A stretch of text with no added token in it: pre-tokens, then BPE.
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  impl_->pre->split(piece, [&](std::string_view word) { encode_word(word, out); });
}

// One pre-token: bytes -> byte tokens -> merges by rank -> ids.
void BpeTokenizer::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  Impl& t = *impl_;
  if (const auto hit = t.cache.find(word); hit != t.cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<std::int32_t> symbols;
  if (t.ignore_merges) {
    if (const auto it = t.vocab.find(bytes_to_unicode_string(word)); it != t.vocab.end())
      symbols.push_back(it->second);
  }
  if (symbols.empty()) {
    symbols.reserve(word.size());
    for (const char c : word) {
      const auto byte = static_cast<unsigned char>(c);
      ENGINE_CHECK(t.byte_ids[byte] >= 0, "tokenizer '", t.source, "': byte 0x", std::hex, int{byte},
                   " has no token in the vocab (not a complete byte-level vocabulary)");
      symbols.push_back(t.byte_ids[byte]);
    }
    merge_symbols(t.merges, symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (word.size() > kMaxCachedWordBytes) return;
  if (t.cache.size() >= kMaxCacheEntries) t.cache.clear();
  t.cache.emplace(std::string(word), std::move(symbols));
}

namespace {

template <typename Id>
std::string decode_ids(const BpeTokenizer& tokenizer, const std::vector<std::string>& id_to_token,
                       const std::vector<bool>& id_is_added,
                       const std::unordered_map<std::string, std::uint8_t>& unicode_to_byte, std::span<const Id> ids) {
  (void)tokenizer;
  std::string text;
  for (const Id id : ids) {
    const auto value = static_cast<std::int64_t>(id);
    if (value < 0 || value >= static_cast<std::int64_t>(id_to_token.size()) || id_to_token[value].empty()) {
      text.append("\xEF\xBF\xBD");  // U+FFFD, as ByteTokenizer::kReplacement
      continue;
    }
    const std::string& token = id_to_token[value];
    if (id_is_added[value]) {
      text.append(token);
      continue;
    }
    // Like tokenizers' ByteLevel decoder: a token with a character that is no
    // byte's stand-in is taken as its own UTF-8.
    std::string bytes;
    bool all_mapped = true;
    for (const std::string_view c : utf8_chars(token)) {
      const auto it = unicode_to_byte.find(std::string(c));
      if (it == unicode_to_byte.end()) {
        all_mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(it->second));
    }
    text.append(all_mapped ? bytes : token);
  }
  return text;
}

}  // namespace

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  return decode_ids(*this, impl_->id_to_token, impl_->id_is_added, impl_->unicode_to_byte, ids);
}

std::string BpeTokenizer::decode(std::span<const std::uint16_t> ids) const {
  return decode_ids(*this, impl_->id_to_token, impl_->id_is_added, impl_->unicode_to_byte, ids);
}

}  // namespace launch
