// The added_tokens of a tokenizer.json (<|endoftext|>, Llama 3's
// <|begin_of_text|>, Qwen2's <|im_start|>, ...) and how they are found in a
// text, as Hugging Face `tokenizers`' AddedVocabulary does: before anything
// else, each one a token of its own whatever the merges would make of it.
//
// Each entry: {"id": N, "content": TEXT, "special": bool, "normalized": bool,
// "lstrip"/"rstrip"/"single_word": false (true is refused)}. A token with
// normalized false (tokenizers' default for a special one) is matched in the
// raw text; one with normalized true in the text after the normalizer, with
// its content normalized too. "special" only changes decoding with
// skip_special_tokens, which we never do: special and non-special tokens
// (Qwen2's <tool_call> is not special) encode alike.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace launch {

struct AddedTokens {
  using List = std::vector<std::pair<std::string, std::int32_t>>;  // (content, id), longest first
  List raw;         // normalized false: matched in the raw text
  List normalized;  // normalized true: matched after the normalizer

  // From the value of tokenizer.json's "added_tokens" (null: none). `nfc`:
  // the tokenizer's normalizer is NFC. Ids must be in [0, max_id_bound).
  // Error messages start with `where`.
  static AddedTokens from_json(const nlohmann::json& list, const std::string& where, bool nfc,
                               std::int64_t max_id_bound);

  // The id of the added token with this content (as the file writes it), or nullopt.
  std::optional<std::int32_t> find(std::string_view content) const;
  // The largest id, or -1 when there is none.
  std::int64_t max_id() const;
};

// Cuts `text` at the tokens of `added`: each one found goes to `out` as its
// id, each stretch between them to on_text. Leftmost first, the longest
// among those at one position (tokenizers' Aho-Corasick, LeftmostLongest).
void split_at_added(std::string_view text, const AddedTokens::List& added, std::vector<std::int32_t>& out,
                    const std::function<void(std::string_view)>& on_text);

}  // namespace launch
