#include "launch/data/post_processor.h"

#include <nlohmann/json.hpp>

#include "engine/check.h"

namespace launch {

namespace {

using json = nlohmann::json;

std::string type_of(const json& spec) {
  return spec.is_object() && spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "";
}

// One TemplateProcessing, `name` its key path ("post_processor" or
// "post_processor.processors[1]").
void parse_template(const json& spec, const std::string& where, const std::string& name,
                    const std::function<bool(std::int64_t)>& is_token, DocumentTemplate& out) {
  ENGINE_CHECK(!out.present, where, name, " is a second TemplateProcessing, expected at most one");
  out.present = true;
  ENGINE_CHECK(spec.contains("single") && spec["single"].is_array(), where, name,
               ".single is missing, expected the single-sequence template (a list)");
  const json& specials = spec.value("special_tokens", json::object());
  ENGINE_CHECK(specials.is_object(), where, name, ".special_tokens is ", specials.dump(), ", expected an object");
  bool seen_a = false;
  for (std::size_t i = 0; i < spec["single"].size(); ++i) {
    const json& piece = spec["single"][i];
    const std::string at = name + ".single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& sequence = piece["Sequence"];
      const std::string id = sequence.is_object() && sequence.value("id", json()).is_string() ? sequence["id"].get<std::string>() : "";
      ENGINE_CHECK(id == "A" && !seen_a, where, at, " is ", piece.dump(), ", expected one sequence, $A");
      seen_a = true;
      continue;
    }
    ENGINE_CHECK(piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
                     piece["SpecialToken"].value("id", json()).is_string(),
                 where, at, " is ", piece.dump(), ", expected {\"SpecialToken\": {\"id\": NAME}} or {\"Sequence\": ...}");
    const std::string token = piece["SpecialToken"]["id"].get<std::string>();
    ENGINE_CHECK(!seen_a, where, at, ": special token '", token, "' after $A is not supported (prepare marks a "
                 "document by the tokens that start it)");
    ENGINE_CHECK(specials.contains(token) && specials[token].is_object() && specials[token].contains("ids") &&
                     specials[token]["ids"].is_array(),
                 where, name, ".special_tokens has no ids for '", token, "', which ", at, " names");
    for (const json& id : specials[token]["ids"]) {
      ENGINE_CHECK(id.is_number_integer() && is_token(id.get<std::int64_t>()), where, name, ".special_tokens['",
                   token, "'].ids holds ", id.dump(), ", expected ids of the tokenizer's tokens");
      out.prefix.push_back(id.get<std::int32_t>());
      out.prefix_tokens.push_back(token);
    }
  }
  ENGINE_CHECK(seen_a, where, name, ".single has no $A, expected the text's place in the template");
}

void parse_one(const json& spec, const std::string& where, const std::string& name,
               const std::function<bool(std::int64_t)>& is_token, DocumentTemplate& out) {
  const std::string type = type_of(spec);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    parse_template(spec, where, name, is_token, out);
    return;
  }
  ENGINE_FAIL(where, name, ".type is '", type, "', expected null, 'ByteLevel', 'TemplateProcessing' or a "
              "'Sequence' of them");
}

}  // namespace

DocumentTemplate parse_post_processor(const json& spec, const std::string& where,
                                      const std::function<bool(std::int64_t)>& is_token) {
  DocumentTemplate out;
  if (spec.is_null()) return out;
  if (type_of(spec) != "Sequence") {
    parse_one(spec, where, "post_processor", is_token, out);
    return out;
  }
  ENGINE_CHECK(spec.contains("processors") && spec["processors"].is_array(), where,
               "post_processor.processors is missing, expected a list");
  for (std::size_t i = 0; i < spec["processors"].size(); ++i)
    parse_one(spec["processors"][i], where, "post_processor.processors[" + std::to_string(i) + "]", is_token, out);
  return out;
}

}  // namespace launch
