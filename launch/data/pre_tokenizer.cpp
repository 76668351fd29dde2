#include "launch/data/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/data/byte_level.h"

namespace launch {

namespace {

using json = nlohmann::json;

std::string type_of(const json& spec) {
  return spec.is_object() && spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "";
}

bool flag(const json& spec, const char* key, bool default_value, const std::string& where, const std::string& name) {
  if (!spec.contains(key) || spec[key].is_null()) return default_value;
  ENGINE_CHECK(spec[key].is_boolean(), where, name, ".", key, " is ", spec[key].dump(), ", expected true or false");
  return spec[key].get<bool>();
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const json& spec, const std::string& where) {
  PreTokenizer pre;
  auto add_byte_level = [&](const json& step, const std::string& name) {
    Step s;
    s.add_prefix_space = flag(step, "add_prefix_space", false, where, name);
    if (flag(step, "use_regex", true, where, name)) s.splitter.emplace(Gpt2Splitter());
    pre.steps_.push_back(std::move(s));
  };
  const std::string type = type_of(spec);
  if (type == "ByteLevel") {
    add_byte_level(spec, "pre_tokenizer");
    return pre;
  }
  ENGINE_CHECK(type == "Sequence", where, "pre_tokenizer.type is '", type,
               "', expected 'ByteLevel' or a 'Sequence' of 'Split' and 'Digits' steps ending with 'ByteLevel'");
  ENGINE_CHECK(spec.contains("pretokenizers") && spec["pretokenizers"].is_array() && !spec["pretokenizers"].empty(),
               where, "pre_tokenizer.pretokenizers is missing or empty, expected a list of steps");
  const json& steps = spec["pretokenizers"];
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const json& step = steps[i];
    const std::string name = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
    const std::string step_type = type_of(step);
    const bool last = i + 1 == steps.size();
    if (step_type == "ByteLevel") {
      ENGINE_CHECK(last, where, name, " is a ByteLevel before the last step, expected it last (its byte map is what "
                                      "the merges see)");
      add_byte_level(step, name);
    } else if (step_type == "Split") {
      const json& pattern = step.value("pattern", json());
      const bool regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string();
      const bool literal = pattern.is_object() && pattern.contains("String") && pattern["String"].is_string();
      ENGINE_CHECK(regex || literal, where, name, ".pattern is ", pattern.dump(),
                   ", expected {\"Regex\": PATTERN} or {\"String\": TEXT}");
      const std::string behavior = step.value("behavior", json()).is_string() ? step["behavior"].get<std::string>() : "";
      ENGINE_CHECK(behavior == "Isolated", where, name, ".behavior is '", behavior,
                   "', expected 'Isolated' (the only one supported)");
      ENGINE_CHECK(!flag(step, "invert", false, where, name), where, name, ".invert true is not supported");
      const std::string key = regex ? "Regex" : "String";
      pre.steps_.push_back(
          {RegexSplitter(pattern[key].get<std::string>(), literal, where + name + ".pattern." + key), false});
    } else if (step_type == "Digits") {
      // Rust's char::is_numeric is the general categories Nd, Nl and No: \p{N}.
      const bool individual = flag(step, "individual_digits", false, where, name);
      pre.steps_.push_back({RegexSplitter(individual ? R"(\p{N})" : R"(\p{N}+)", false, where + name), false});
    } else {
      ENGINE_FAIL(where, name, ".type is '", step_type, "', expected 'Split', 'Digits' or (last) 'ByteLevel'");
    }
  }
  ENGINE_CHECK(type_of(steps.back()) == "ByteLevel", where, "pre_tokenizer.pretokenizers has no ByteLevel step "
               "last, expected one (a byte-level BPE maps bytes to its alphabet there)");
  return pre;
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const {
  if (!text.empty()) apply(0, text, on_piece);
}

void PreTokenizer::apply(std::size_t step, std::string_view text,
                         const std::function<void(std::string_view)>& on_piece) const {
  if (step == steps_.size()) {
    on_piece(text);
    return;
  }
  const Step& s = steps_[step];
  std::string prefixed;
  if (s.add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  if (!s.splitter) {
    apply(step + 1, text, on_piece);
    return;
  }
  s.splitter->split(text, [&](std::string_view piece) { apply(step + 1, piece, on_piece); });
}

}  // namespace launch
