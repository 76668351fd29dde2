// What a tokenizer.json's post_processor puts around one text (Hugging Face
// `tokenizers`' encode(text, add_special_tokens=True)): for `prepare`, what
// starts each document.
//
// Supported (anything else is refused in one line naming the key):
//   null
//   {"type": "ByteLevel", ...}            moves offsets only: adds no id (GPT-2, Qwen2, SmolLM2)
//   {"type": "TemplateProcessing", "single": [...], "special_tokens": {...}}
//       whose single-sequence template is special tokens, then $A (Llama 3:
//       "<|begin_of_text|> $A"); each special token's ids come from
//       special_tokens, as tokenizers takes them. The pair template is not
//       used (prepare encodes one document at a time). A special token after
//       $A (an end-of-document token) is refused: prepare marks documents by
//       what starts them.
//   {"type": "Sequence", "processors": [...]} of the above, at most one
//       TemplateProcessing (Llama 3.2: ByteLevel, then the template).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace launch {

struct DocumentTemplate {
  bool present = false;                 // a TemplateProcessing says what starts a text
  std::vector<std::int32_t> prefix;     // its ids before $A, in order (may be empty)
  std::vector<std::string> prefix_tokens;  // their names, for messages
};

// From the value of tokenizer.json's "post_processor". `is_token(id)` says
// whether an id is in the tokenizer's vocabulary or added tokens; a template
// naming another id is refused. Error messages start with `where`.
DocumentTemplate parse_post_processor(const nlohmann::json& spec, const std::string& where,
                                      const std::function<bool(std::int64_t)>& is_token);

}  // namespace launch
