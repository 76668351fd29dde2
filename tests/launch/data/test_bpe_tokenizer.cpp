// launch/data/bpe_tokenizer.h against ids recorded from Hugging Face `tokenizers`
// (tests/data/tokenizers/make_tokenizer_data.py writes them): exact encode,
// exact round trip, both merge formats, add_prefix_space, GPT-2's own
// tokenizer, and one-line errors for bad files. (Llama 3's, Qwen2's and
// SmolLM2's recipes are checked here too; test_bpe_pipelines has the rest.)
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "tests/support/hostile_json.h"

namespace {

using launch::BpeTokenizer;
using json = nlohmann::json;

const std::string kDir = TOKENIZER_DATA_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const BpeTokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, BpeTokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, BpeTokenizer::from_file(kDir + "/" + name)).first;
  return it->second;
}

std::string printable(const std::string& text) { return json(text).dump(); }

TEST(BpeTokenizer, EncodesExactlyAsHuggingFaceTokenizers) {
  const json expected = json::parse(read_text(kDir + "/expected_ids.json"));
  std::map<std::string, int> checked;
  for (const json& c : expected["cases"]) {
    const std::string name = c["tokenizer"], text = c["text"];
    const auto want = c["ids"].get<std::vector<std::int32_t>>();
    const BpeTokenizer& t = tokenizer(name);
    const std::vector<std::int32_t> got = t.encode(text);
    EXPECT_EQ(got, want) << name << " encoding " << printable(text);
    // decode() agrees with tokenizers' decode (skip_special_tokens=False), which is the text itself but for
    // add_prefix_space's leading " " and Qwen2's NFC.
    EXPECT_EQ(t.decode(got), c["decoded"].get<std::string>()) << name << " decoding " << printable(text);
    if (name != "tiny_bpe_prefix.json" && name != "qwen2_bpe.json")
      EXPECT_EQ(t.decode(got), text) << name << " round trip of " << printable(text);
    ++checked[name];
  }
  // Every tokenizer the generator writes, GPT-2's included, was checked.
  for (const char* name : {"tiny_bpe.json", "tiny_bpe_strmerges.json", "tiny_bpe_prefix.json", "gpt2.json",
                           "llama3_bpe.json", "qwen2_bpe.json", "smollm2_bpe.json"})
    EXPECT_GE(checked[name], 30) << name;
}

TEST(BpeTokenizer, Gpt2KnownIdsAndSize) {
  const BpeTokenizer& t = tokenizer("gpt2.json");
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(t.encode("Hello world"), (std::vector<std::int32_t>{15496, 995}));
}

TEST(BpeTokenizer, BothMergeFormatsGiveTheSameTokenizer) {
  const std::string text = "Crème brûlée, it's 1234 日本語 😀  \n\n";
  EXPECT_EQ(tokenizer("tiny_bpe.json").encode(text), tokenizer("tiny_bpe_strmerges.json").encode(text));
}

TEST(BpeTokenizer, InvalidUtf8PassesThroughAsBytes) {
  const BpeTokenizer& t = tokenizer("gpt2.json");
  for (const std::string text : {std::string("ab\xff\xfe cd"), std::string("\xe6\x97"), std::string("x\xc3"),
                                 std::string("\x80 trailing \xe2\x82")}) {
    EXPECT_EQ(t.decode(t.encode(text)), text) << printable(std::string(text.begin(), text.end()));
  }
  // Tokens that cut a multi-byte character decode to its raw bytes, in pieces.
  const std::vector<std::int32_t> ids = t.encode("日");
  ASSERT_EQ(ids.size(), 2u);
  const std::string first = t.decode(std::vector<std::int32_t>{ids[0]});
  const std::string second = t.decode(std::vector<std::int32_t>{ids[1]});
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(first + second, "日");
}

TEST(BpeTokenizer, UnknownIdsDecodeToReplacementCharacter) {
  const BpeTokenizer& t = tokenizer("tiny_bpe.json");
  const std::vector<std::int32_t> ids{-1, t.vocab_size(), 70000};
  EXPECT_EQ(t.decode(ids), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  const std::vector<std::uint16_t> small{static_cast<std::uint16_t>(t.vocab_size())};
  EXPECT_EQ(t.decode(small), "\xEF\xBF\xBD");
}

// The message of the engine::Error that loading `json_text` throws.
std::string load_error(const std::string& json_text) {
  try {
    BpeTokenizer::from_json(json_text, "bad.json");
  } catch (const engine::Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(BpeTokenizer, BadFilesGiveOneLineErrors) {
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false})";
  struct Case {
    std::string json, expect;
  };
  const std::vector<Case> cases{
      {"not json", "not valid JSON"},
      {"{" + byte_level + "}", "missing \"model\""},
      {R"({"model": {"type": "BPE", "merges": []}, )" + byte_level + "}", "missing model.vocab"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}, )" + byte_level + "}", "missing model.merges"},
      {R"({"model": {"type": "WordPiece", "vocab": {"a": 0}, "merges": []}, )" + byte_level + "}",
       "model.type is 'WordPiece'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a c"]}, )" + byte_level + "}",
       "'c' is not in the vocab"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}, )" + byte_level + "}",
       "the merged 'ab' is not in the vocab"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["ab"]}, )" + byte_level + "}",
       "not two tokens separated by one space"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "missing pre_tokenizer"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Whitespace"}})",
       "pre_tokenizer.type is 'Whitespace'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}, )" + byte_level + "}",
       "expected an id in [0, 16777216)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 16777216}, "merges": []}, )" + byte_level + "}",
       "model.vocab['a'] is 16777216, expected an id in [0, 16777216)"},
  };
  for (const Case& c : cases) {
    const std::string message = load_error(c.json);
    EXPECT_NE(message.find(c.expect), std::string::npos) << "got: " << message << "\nwanted: " << c.expect;
    EXPECT_NE(message.find("bad.json"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  try {
    BpeTokenizer::from_file(kDir + "/no_such_file.json");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const engine::Error& error) {
    EXPECT_NE(std::string(error.what()).find("no_such_file.json"), std::string::npos);
  }
}

// Hostile tokenizer.json files (tests/support/hostile_json.h) are each loaded
// or refused in one line, and none crashes or runs long.
TEST(BpeTokenizer, HostileFilesAreLoadedOrRefusedInOneLine) {
  std::ifstream in(kDir + "/tiny_bpe.json");
  const std::string valid((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(valid.empty());
  const auto variants = engine_test::hostile_json_variants(valid);
  const std::size_t refused = engine_test::expect_accepted_or_one_line(variants, [](const std::string& text) {
    BpeTokenizer::from_json(text, "hostile.json").encode("hello world, 123!");
  });
  EXPECT_GT(refused, variants.size() / 2);
}

TEST(BpeTokenizer, IncompleteByteVocabularyIsAnErrorAtEncode) {
  const BpeTokenizer t = BpeTokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}})",
      "small.json");
  EXPECT_EQ(t.encode("abab"), (std::vector<std::int32_t>{2, 2}));
  EXPECT_THROW(t.encode("abc"), engine::Error);
}

}  // namespace
