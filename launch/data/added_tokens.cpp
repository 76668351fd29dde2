#include "launch/data/added_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/data/unicode_normalizer.h"

namespace launch {

AddedTokens AddedTokens::from_json(const nlohmann::json& list, const std::string& where, bool nfc,
                                   std::int64_t max_id_bound) {
  using json = nlohmann::json;
  AddedTokens tokens;
  if (list.is_null()) return tokens;
  ENGINE_CHECK(list.is_array(), where, "added_tokens must be a list");
  for (const json& a : list) {
    ENGINE_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                     a["content"].is_string(),
                 where, "an added token lacks an integer \"id\" or a string \"content\": ", a.dump());
    const auto id = a["id"].get<std::int64_t>();
    const auto content = a["content"].get<std::string>();
    ENGINE_CHECK(id >= 0 && id < max_id_bound, where, "added token '", content, "' has id ", id, ", expected [0, ",
                 max_id_bound, ")");
    ENGINE_CHECK(!content.empty(), where, "added token ", id, " has empty content");
    for (const char* key : {"lstrip", "rstrip", "single_word", "special", "normalized"})
      ENGINE_CHECK(!a.contains(key) || a[key].is_boolean() || a[key].is_null(), where, "added token '", content,
                   "': ", key, " is ", a[key].dump(), ", expected true or false");
    auto flag = [&](const char* key) -> std::optional<bool> {
      if (!a.contains(key) || a[key].is_null()) return std::nullopt;
      return a[key].get<bool>();
    };
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      ENGINE_CHECK(!flag(key).value_or(false), where, "added token '", content, "': ", key, " is not supported");
    // tokenizers' default: a special token is matched in the raw text.
    const bool normalized = flag("normalized").value_or(!flag("special").value_or(false));
    if (normalized) {
      tokens.normalized.emplace_back(nfc ? normalize_nfc(content) : content, static_cast<std::int32_t>(id));
    } else {
      tokens.raw.emplace_back(content, static_cast<std::int32_t>(id));
    }
  }
  // Longest first: among tokens found at the same position the longest wins.
  for (List* added : {&tokens.raw, &tokens.normalized})
    std::stable_sort(added->begin(), added->end(),
                     [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  return tokens;
}

std::optional<std::int32_t> AddedTokens::find(std::string_view content) const {
  for (const List* added : {&raw, &normalized})
    for (const auto& [text, id] : *added)
      if (text == content) return id;
  return std::nullopt;
}

std::int64_t AddedTokens::max_id() const {
  std::int64_t largest = -1;
  for (const List* added : {&raw, &normalized})
    for (const auto& entry : *added) largest = std::max<std::int64_t>(largest, entry.second);
  return largest;
}

void split_at_added(std::string_view text, const AddedTokens::List& added, std::vector<std::int32_t>& out,
                    const std::function<void(std::string_view)>& on_text) {
  // Next occurrence of each added token at or after `pos` (npos: none left).
  std::vector<std::size_t> next(added.size(), 0);
  for (std::size_t i = 0; i < added.size(); ++i) next[i] = text.find(added[i].first);
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t best = std::string_view::npos, best_i = 0;
    for (std::size_t i = 0; i < added.size(); ++i) {
      if (next[i] != std::string_view::npos && next[i] < pos) next[i] = text.find(added[i].first, pos);
      if (next[i] < best) {  // strict: the longer token (earlier in `added`) wins a tie
        best = next[i];
        best_i = i;
      }
    }
    const std::size_t end = std::min(best, text.size());
    if (end > pos) on_text(text.substr(pos, end - pos));
    if (best == std::string_view::npos) break;
    out.push_back(added[best_i].second);
    pos = best + added[best_i].first.size();
  }
}

}  // namespace launch
