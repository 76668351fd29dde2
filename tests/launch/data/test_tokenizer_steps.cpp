// The steps of a tokenizer.json that Llama 3's, Qwen2's and SmolLM2's
// recipes add (launch/data/pre_tokenizer.h, post_processor.h, the NFC
// normalizer, added tokens): the pieces each pre-tokenizer step gives, as
// Hugging Face `tokenizers` gives them; the recipes' patterns on hostile text
// in bounded time, with PCRE2's JIT and without; one-line refusals naming the
// key of what is not supported; hostile recipe files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/pre_tokenizer.h"
#include "launch/data/regex_split.h"
#include "tests/support/hostile_json.h"

namespace {

using launch::BpeTokenizer;
using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kDir = TOKENIZER_DATA_DIR;
// A time bound far above linear time and far below quadratic (a guard, not a
// benchmark); AddressSanitizer (the build-asan suite) is some 5x slower.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kBoundSeconds = 10.0;
#else
constexpr double kBoundSeconds = 2.0;
#endif

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Llama 3's and Qwen2's patterns (as their recipe files hold them) split
// hostile text in linear time, with PCRE2's JIT and with its interpreter
// (what runs where the JIT is unavailable): 200 kB each in well under the
// bound.
TEST(BpePipelines, RecipePatternsSplitHostileTextInBoundedTime) {
  constexpr std::size_t kBytes = 200 * 1000;
  auto repeat = [&](const std::string& unit) {
    std::string s;
    while (s.size() + unit.size() <= kBytes) s += unit;
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"spaces then a letter", std::string(kBytes, ' ') + "x"},
      {"newline, spaces, letter", "\n" + std::string(kBytes, ' ') + "x"},
      {"spaces then newlines", std::string(kBytes / 2, ' ') + std::string(kBytes / 2, '\n') + "x"},
      {"letters", std::string(kBytes, 'a')},
      {"digits", std::string(kBytes, '7')},
      {"space newline", repeat(" \n")},
      {"space space newline letter", repeat("  \na")},
      {"punctuation newline", repeat("!\n")},
      {"punctuation then newlines", std::string(kBytes / 2, '!') + std::string(kBytes / 2, '\r')},
      {"apostrophe S", repeat("'S")},
      {"mixed whitespace then letters", repeat(" \t\r\nab")},
      {"combining marks", "a" + repeat("\u0301")},
      {"invalid UTF-8 between letters", repeat("a\xff")},
  };
  for (const std::string& name : {std::string("llama3_bpe.json"), std::string("qwen2_bpe.json")}) {
    const json spec = json::parse(read_text(kDir + "/" + name));
    const std::string pattern = spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
    for (const bool jit : {true, false}) {
      const launch::RegexSplitter splitter(pattern, false, name, jit);
      for (const auto& [what, text] : cases) {
        const auto start = std::chrono::steady_clock::now();
        std::size_t bytes = 0;
        splitter.split(text, [&](std::string_view piece) { bytes += piece.size(); });
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_EQ(bytes, text.size()) << name << " " << what;
        EXPECT_LT(seconds, kBoundSeconds) << name << " " << what << (jit ? " (JIT)" : " (interpreter)");
      }
    }
  }
}

// The pieces tokenizers 0.23.3 gives (pre_tokenize_str) for the steps that
// the recipes above do not use: Digits of runs, a String pattern, and
// ByteLevel's add_prefix_space, which applies to every piece before it.
std::vector<std::string> pieces(const std::string& spec, const std::string& text) {
  const launch::PreTokenizer pre = launch::PreTokenizer::from_json(json::parse(spec), "t: ");
  std::vector<std::string> out;
  pre.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

TEST(BpePipelines, PreTokenizerStepsSplitAsTokenizers) {
  const std::string byte_level = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})";
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": false}, )" +
                       byte_level + "]}",
                   "a12b\u00bd\u00b2c\u0663\u0664"),
            (std::vector<std::string>{"a", "12", "b", "\u00bd\u00b2", "c", "\u0663\u0664"}));
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": "ab"},
                       "behavior": "Isolated", "invert": false}, )" + byte_level + "]}",
                   "xxabyyab"),
            (std::vector<std::string>{"xx", "ab", "yy", "ab"}));
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
                       {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}]})",
                   "a12b c"),
            (std::vector<std::string>{" a", " 1", " 2", " b", " c"}));
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d"},
                       "behavior": "Isolated"}, {"type": "ByteLevel", "add_prefix_space": true, "use_regex": false}]})",
                   "a12b c"),
            (std::vector<std::string>{" a", " 1", " 2", " b c"}));
  // A pattern that matches the empty string still moves on, one character at a time.
  EXPECT_EQ(pieces(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "x*"},
                       "behavior": "Isolated"}, )" + byte_level + "]}",
                   "axxb\u00e9"),
            (std::vector<std::string>{"a", "xx", "b", "\u00e9"}));
  EXPECT_EQ(pieces(R"J({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?=b)"},
                       "behavior": "Isolated"}, )J" + byte_level + "]}",
                   "abab"),
            (std::vector<std::string>{"a", "ba", "b"}));
}

// The message of the engine::Error that loading llama3_bpe.json with `edit`
// applied throws.
template <typename Edit>
std::string error_after(Edit&& edit) {
  json spec = json::parse(read_text(kDir + "/llama3_bpe.json"));
  edit(spec);
  try {
    BpeTokenizer::from_json(spec.dump(), "bad.json");
  } catch (const engine::Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(BpePipelines, UnsupportedStepsAreRefusedInOneLineNamingTheKey) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  const json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  const json last = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  auto steps = [](std::vector<json> list) { return json{{"type", "Sequence"}, {"pretokenizers", list}}; };
  const std::vector<Case> cases{
      {[&](json& s) { s["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type is 'Metaspace'"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior is 'Removed', expected 'Isolated'"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious"; },
       "pre_tokenizer.pretokenizers[0].behavior is 'MergedWithPrevious'"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "pre_tokenizer.pretokenizers[0].invert true is not supported"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}}; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: PCRE2 refused the pattern at offset 9"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", ""}}; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex is empty"},
      {[&](json& s) { s["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "\\s+"; },
       "pre_tokenizer.pretokenizers[0].pattern is \"\\\\s+\", expected {\"Regex\": PATTERN} or {\"String\": TEXT}"},
      {[&](json& s) { s["pre_tokenizer"] = steps({last, split}); },
       "pre_tokenizer.pretokenizers[0] is a ByteLevel before the last step"},
      {[&](json& s) { s["pre_tokenizer"] = steps({split}); }, "pre_tokenizer.pretokenizers has no ByteLevel step last"},
      {[&](json& s) { s["pre_tokenizer"] = steps({steps({split}), last}); },
       "pre_tokenizer.pretokenizers[0].type is 'Sequence', expected 'Split', 'Digits' or (last) 'ByteLevel'"},
      {[&](json& s) { s["pre_tokenizer"] = steps({{{"type", "Punctuation"}}, last}); },
       "pre_tokenizer.pretokenizers[0].type is 'Punctuation'"},
      {[&](json& s) { s["pre_tokenizer"] = steps({{{"type", "Digits"}, {"individual_digits", "yes"}}, last}); },
       "pre_tokenizer.pretokenizers[0].individual_digits is \"yes\", expected true or false"},
      {[&](json& s) { s["pre_tokenizer"] = steps({}); }, "pre_tokenizer.pretokenizers is missing or empty"},
      {[&](json& s) { s["normalizer"] = {{"type", "NFKC"}}; }, "normalizer.type is 'NFKC', expected 'NFC'"},
      {[&](json& s) { s["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}; },
       "normalizer.type is 'Sequence'"},
      {[&](json& s) { s["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "post_processor.type is 'RobertaProcessing'"},
      {[&](json& s) { s["post_processor"]["processors"][1]["single"].push_back(
                          {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}); },
       "post_processor.processors[1].single[2]: special token '<|begin_of_text|>' after $A is not supported"},
      {[&](json& s) { s["post_processor"]["processors"][1]["single"].erase(1); },
       "post_processor.processors[1].single has no $A"},
      {[&](json& s) { s["post_processor"]["processors"][1]["single"][1]["Sequence"]["id"] = "B"; },
       "post_processor.processors[1].single[1] is"},
      {[&](json& s) { s["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = {999999}; },
       "post_processor.processors[1].special_tokens['<|begin_of_text|>'].ids holds 999999"},
      {[&](json& s) { s["post_processor"]["processors"][1]["special_tokens"].erase("<|begin_of_text|>"); },
       "post_processor.processors[1].special_tokens has no ids for '<|begin_of_text|>'"},
      {[&](json& s) { s["post_processor"]["processors"][0] = s["post_processor"]["processors"][1]; },
       "post_processor.processors[1] is a second TemplateProcessing"},
      {[&](json& s) { s["added_tokens"][0]["normalized"] = "no"; },
       "added token '<|begin_of_text|>': normalized is \"no\", expected true or false"},
      {[&](json& s) { s["added_tokens"][0]["lstrip"] = true; }, "added token '<|begin_of_text|>': lstrip is not supported"},
  };
  for (const Case& c : cases) {
    const std::string message = error_after(c.edit);
    EXPECT_THAT(message, HasSubstr(c.expect));
    EXPECT_THAT(message, HasSubstr("tokenizer 'bad.json': "));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(BpePipelines, HostileRecipeFilesAreLoadedOrRefusedInOneLine) {
  for (const char* name : {"llama3_bpe.json", "qwen2_bpe.json"}) {
    const auto variants = engine_test::hostile_json_variants(read_text(kDir + "/" + name));
    engine_test::expect_accepted_or_one_line(variants, [](const std::string& text) {
      BpeTokenizer::from_json(text, "hostile.json").encode("Hello <|endoftext|> I'M 1234 caf\u00e9 e\u0301\n\n x");
    });
  }
}

}  // namespace
