// Llama 3's, Qwen2's and SmolLM2's tokenizer.json recipes (Split and Digits
// pre-tokenizers, NFC, added tokens at large ids, the post-processor's
// template) against what Hugging Face `tokenizers` recorded
// (tests/data/tokenizers/make_tokenizer_data.py), NFC, invalid UTF-8, and
// `prepare` with each recipe. (test_bpe_tokenizer checks every recorded
// case's ids; test_tokenizer_steps each step and refusal.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/prepare_options.h"
#include "launch/data/prepare_split.h"
#include "launch/data/token_shard.h"
#include "launch/data/unicode_normalizer.h"

namespace {

using launch::BpeTokenizer;
using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kDir = TOKENIZER_DATA_DIR;
const std::vector<std::string> kRecipes = {"llama3_bpe.json", "qwen2_bpe.json", "smollm2_bpe.json"};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const json& expected() {
  static const json data = json::parse(read_text(kDir + "/expected_ids.json"));
  return data;
}

const BpeTokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, BpeTokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, BpeTokenizer::from_file(kDir + "/" + name)).first;
  return it->second;
}

std::string printable(const std::string& text) { return json(text).dump(); }

std::vector<std::int32_t> concat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The ids of each recipe's special tokens, as the published files have them.
TEST(BpePipelines, RecipesKeepThePublishedIdsAndDocumentStarts) {
  const BpeTokenizer& llama = tokenizer("llama3_bpe.json");
  EXPECT_EQ(llama.vocab_size(), 128256);
  EXPECT_EQ(llama.token_to_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(llama.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(llama.document_start(), (std::vector<std::int32_t>{128000}));
  EXPECT_TRUE(llama.document_start_from_template());
  EXPECT_EQ(llama.token_to_id("<|endoftext|>"), std::nullopt);

  const BpeTokenizer& qwen = tokenizer("qwen2_bpe.json");
  EXPECT_EQ(qwen.vocab_size(), 151665);
  EXPECT_EQ(qwen.document_start(), (std::vector<std::int32_t>{151643}));  // <|endoftext|>: no template
  EXPECT_FALSE(qwen.document_start_from_template());
  EXPECT_EQ(qwen.token_to_id("<tool_call>"), 151657);  // not special, matched all the same

  const BpeTokenizer& smol = tokenizer("smollm2_bpe.json");
  EXPECT_EQ(smol.vocab_size(), 600);
  EXPECT_EQ(smol.document_start(), (std::vector<std::int32_t>{0}));
  EXPECT_EQ(smol.token_to_id("<|im_start|>"), 1);
}

// tokenizers' encode(text) (add_special_tokens=True) is the template's
// tokens, then encode(text, add_special_tokens=False): what prepare writes
// for a document is document_start() then encode().
TEST(BpePipelines, TemplateGivesWhatTokenizersAddsAsSpecialTokens) {
  std::map<std::string, int> checked;
  for (const json& c : expected()["cases"]) {
    if (!c.contains("with_special_tokens")) continue;
    const std::string name = c["tokenizer"], text = c["text"];
    const BpeTokenizer& t = tokenizer(name);
    const auto want = c["with_special_tokens"].get<std::vector<std::int32_t>>();
    const std::vector<std::int32_t> prefix =
        t.document_start_from_template() ? t.document_start() : std::vector<std::int32_t>{};
    EXPECT_EQ(concat(prefix, t.encode(text)), want) << name << " " << printable(text);
    ++checked[name];
  }
  for (const std::string& name : kRecipes) EXPECT_GE(checked[name], 70) << name;
}

// Every text of the tokenizer tests, through tokenizers' NFC normalizer.
TEST(BpePipelines, NfcEqualsTokenizers) {
  int checked = 0;
  for (const json& c : expected()["nfc"]) {
    const std::string text = c["text"];
    EXPECT_EQ(launch::normalize_nfc(text), c["nfc"].get<std::string>()) << printable(text);
    ++checked;
  }
  EXPECT_GE(checked, 60);
}

// Invalid UTF-8: every run of bytes that is not valid UTF-8 is a pre-token of
// its own, so the text either side encodes as it would alone, and NFC leaves
// the bytes as they are. Nothing throws or crashes, and decoding gives back
// the bytes (NFC'd around them for Qwen2).
TEST(BpePipelines, InvalidUtf8IsABarrierAndRoundTrips) {
  const std::vector<std::string> bad = {"\xff", "\xfe\xff", "\xc3", "\xe6\x97", "\x80\x80\x80", "\xed\xa0\x80",
                                        "\xf4\x90\x80\x80", "\xc0\xaf"};
  const std::vector<std::pair<std::string, std::string>> around = {
      {"Hello", " world"}, {"I'M 12", "345 's"}, {"a\n\n", " b"}, {"e", "\u0301 caf\u00e9"}, {"", ""},
      {"<|endoftext|>", "<|im_start|>"}};
  for (const std::string& name : kRecipes) {
    const BpeTokenizer& t = tokenizer(name);
    for (const std::string& b : bad) {
      for (const auto& [left, right] : around) {
        const std::string text = left + b + right;
        SCOPED_TRACE(name + " " + printable(left) + " + bytes + " + printable(right));
        std::vector<std::int32_t> ids;
        ASSERT_NO_THROW(ids = t.encode(text));
        EXPECT_EQ(ids, concat(concat(t.encode(left), t.encode(b)), t.encode(right)));
        EXPECT_EQ(t.decode(ids), launch::normalize_nfc(left) + b + launch::normalize_nfc(right));
        if (name != "qwen2_bpe.json") EXPECT_EQ(t.decode(ids), text);
      }
    }
  }
  // Random bytes: no crash, and the bytes come back.
  std::mt19937 rng(5);
  for (int k = 0; k < 200; ++k) {
    std::string text(static_cast<std::size_t>(rng() % 64), '\0');
    for (char& c : text) c = static_cast<char>(rng() % 3 == 0 ? 0x80 + rng() % 0x80 : rng() % 0x80);
    for (const std::string& name : {std::string("llama3_bpe.json"), std::string("smollm2_bpe.json")})
      EXPECT_EQ(tokenizer(name).decode(tokenizer(name).encode(text)), text) << name << " " << k;
    const BpeTokenizer& qwen = tokenizer("qwen2_bpe.json");
    EXPECT_EQ(qwen.decode(qwen.encode(text)), launch::normalize_nfc(text)) << k;
  }
}

// ---- prepare with each recipe --------------------------------------------------

// prepare's cuts with a BPE (blocks of 1 MiB and each block's validation
// start, just past a '\n' between two printable non-space ASCII characters)
// fall where Llama 3's, Qwen2's and SmolLM2's pre-tokenizers split anyway, and
// NFC changes nothing across them, so the parts encode as the whole file
// does. (Llama 3's pattern keeps a '\n' with the punctuation before it,
// "end.\n", which still ends at the cut.)
TEST(BpePipelines, PrepareCutsEncodeAsTheWholeText) {
  std::mt19937 rng(32);
  const char* lines[] = {"a\n\n b", "  indented line", "\t\ttabbed", "word", "x\n \n y", "", "   ", "end.",
                         "I'M 12345 it's", "?!", "caf\u00e9 e\u0301", "\u65e5\u672c 3.14", "x\r", "'s"};
  std::string text;
  while (text.size() < (5u << 19)) {  // 2.5 MiB: three blocks
    text += lines[rng() % (sizeof lines / sizeof lines[0])];
    text += '\n';
  }
  launch::prepare::Options options;
  options.tokenizer = "tokenizer.json";  // any: bpe() is what matters
  options.val_fraction = 0.1;
  std::vector<std::string_view> parts;
  launch::prepare::for_each_block(text, options, [&](const launch::prepare::Block& b) {
    parts.push_back(b.train);
    parts.push_back(b.val);
  });
  ASSERT_GE(parts.size(), 6u);
  for (const std::string& name : kRecipes) {
    const BpeTokenizer& t = tokenizer(name);
    std::vector<std::int32_t> joined;
    for (std::string_view part : parts) joined = concat(std::move(joined), t.encode(part));
    EXPECT_TRUE(joined == t.encode(text)) << name << ": a cut changed the ids";
  }
}

int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Each document starts with what the recipe says (Llama 3: its template's
// <|begin_of_text|>; Qwen2, SmolLM2: <|endoftext|>), the ids are the
// tokenizer's, and the shard version follows the vocabulary.
TEST(BpePipelines, PrepareStartsEachDocumentAsTheRecipeSays) {
  const fs::path dir = fs::temp_directory_path() / ("test_bpe_pipelines_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "in");
  const std::string a = "Crème brûlée e\u0301, I'M 1234567 日本語 😀\n\n  trailing  \n";
  const std::string b = "<|im_start|>user\nWe'LL see.<|im_end|>\n";
  std::ofstream(dir / "in/a.txt") << a;
  std::ofstream(dir / "in/b.txt") << b;
  const std::map<std::string, std::pair<std::int32_t, std::int32_t>> recipes = {
      {"llama3_bpe.json", {128000, launch::kShardVersionU32}},
      {"qwen2_bpe.json", {151643, launch::kShardVersionU32}},
      {"smollm2_bpe.json", {0, launch::kShardVersionU16}}};
  for (const auto& [name, want] : recipes) {
    SCOPED_TRACE(name);
    const BpeTokenizer& t = tokenizer(name);
    const fs::path out = dir / name;
    const std::string log = (dir / "log.txt").string();
    ASSERT_EQ(run_command(std::string(PREPARE_BIN) + " --input " + (dir / "in").string() + " --output-dir " +
                          out.string() + " --val-fraction 0 --tokenizer " + kDir + "/" + name + " >" + log + " 2>&1"),
              0)
        << read_text(log);
    EXPECT_THAT(read_text(log), HasSubstr(t.decode(std::vector<std::int32_t>{want.first}) + " before each document"));
    const launch::TokenShard shard((out / "corpus_train_000000.bin").string());
    EXPECT_EQ(shard.version(), want.second);
    const std::vector<std::uint32_t> read = shard.read_all();
    const std::vector<std::int32_t> expected =
        concat(concat({want.first}, t.encode(a)), concat({want.first}, t.encode(b)));
    EXPECT_EQ(std::vector<std::int32_t>(read.begin(), read.end()), expected);
  }
  fs::remove_all(dir);
}

}  // namespace
