// llm.c's gpt2_tokenizer.bin (launch/data/llmc_tokenizer.h): a file written as
// llm.c's train_gpt2.py writes it (each id's bytes, as the GPT-2 tokenizer
// decodes that id alone) decodes any id sequence to the bytes that the
// tokenizer.json it came from decodes it to; bad files are refused naming
// what is wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/data/bpe_tokenizer.h"
#include "launch/data/llmc_tokenizer.h"
#include "tests/launch/training_fixture.h"

using launch::LlmcTokenizer;
using test_support::TempDir;

namespace {

// llm.c's layout: 256 uint32 of header, then per token a uint8 length and the bytes.
std::string llmc_file_bytes(std::uint32_t version, const std::vector<std::string>& tokens, std::uint32_t eot) {
  std::vector<std::uint32_t> header(256, 0);
  header[0] = 20240328;
  header[1] = version;
  header[2] = static_cast<std::uint32_t>(tokens.size());
  header[3] = eot;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (const std::string& t : tokens) {
    bytes.push_back(static_cast<char>(t.size()));
    bytes += t;
  }
  return bytes;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<std::string> gpt2_token_bytes(const launch::BpeTokenizer& gpt2) {
  std::vector<std::string> tokens;
  for (std::int32_t id = 0; id < gpt2.vocab_size(); ++id) tokens.push_back(gpt2.decode(std::vector<std::int32_t>{id}));
  return tokens;
}

void expect_refused(const std::string& path, const std::string& fragment) {
  try {
    LlmcTokenizer::from_file(path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const engine::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

}  // namespace

TEST(LlmcTokenizer, Gpt2FileDecodesLikeTheTokenizerJsonItWasWrittenFrom) {
  const launch::BpeTokenizer gpt2 = launch::BpeTokenizer::from_file(TOKENIZER_DATA_DIR "/gpt2.json");
  TempDir dir("llmc_tokenizer");
  const std::vector<std::string> tokens = gpt2_token_bytes(gpt2);
  for (std::uint32_t version : {1u, 2u}) {
    const std::string path = write(dir, "v" + std::to_string(version) + ".bin", llmc_file_bytes(version, tokens, 50256));
    ASSERT_TRUE(LlmcTokenizer::is_llmc_file(path));
    const LlmcTokenizer llmc = LlmcTokenizer::from_file(path);
    EXPECT_EQ(llmc.vocab_size(), 50257);
    EXPECT_EQ(llmc.end_of_text(), 50256);
    const std::string text =
        "<|endoftext|>Hello, world! Don't panic:  3.14159 and 1,000,000 \xC3\xA9t\xC3\xA9s, \xE4\xBD\xA0\xE5\xA5\xBD\n\n\tend";
    const std::vector<std::int32_t> ids = gpt2.encode(text);
    EXPECT_EQ(llmc.decode(ids), text);
    EXPECT_EQ(llmc.decode(ids), gpt2.decode(ids));
    // Ids outside the vocabulary decode to U+FFFD, as the other tokenizers do.
    EXPECT_EQ(llmc.decode(std::vector<std::int32_t>{50257, -1}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  }
  EXPECT_FALSE(LlmcTokenizer::is_llmc_file(TOKENIZER_DATA_DIR "/gpt2.json"));
  EXPECT_FALSE(LlmcTokenizer::is_llmc_file(dir / "missing.bin"));
}

TEST(LlmcTokenizer, SmallVersion2FileKeepsItsEndOfText) {
  TempDir dir("llmc_tokenizer");
  const LlmcTokenizer t = LlmcTokenizer::from_file(write(dir, "small.bin", llmc_file_bytes(2, {"a", "bc", "\n", "<eot>"}, 3)));
  EXPECT_EQ(t.vocab_size(), 4);
  EXPECT_EQ(t.end_of_text(), 3);
  EXPECT_EQ(t.decode(std::vector<std::int32_t>{3, 0, 1, 2, 1}), "<eot>abc\nbc");
}

TEST(LlmcTokenizer, BadFilesAreRefusedNamingTheProblem) {
  TempDir dir("llmc_tokenizer");
  const std::vector<std::string> tokens = {"a", "b", "c"};
  std::string bytes = llmc_file_bytes(2, tokens, 2);
  std::string bad = bytes;
  bad[0] = 'x';
  expect_refused(write(dir, "magic.bin", bad), "magic");
  expect_refused(write(dir, "version.bin", llmc_file_bytes(3, tokens, 2)), "version 3");
  expect_refused(write(dir, "v1.bin", llmc_file_bytes(1, tokens, 2)), "version 1 files are GPT-2's 50257 tokens");
  expect_refused(write(dir, "eot.bin", llmc_file_bytes(2, tokens, 3)), "end-of-text id 3 outside");
  expect_refused(write(dir, "short.bin", bytes.substr(0, 100)), "shorter than its 1024-byte header");
  expect_refused(write(dir, "truncated.bin", bytes.substr(0, bytes.size() - 1)), "truncated in token 2");
  expect_refused(write(dir, "missing.bin", bytes.substr(0, bytes.size() - 2)), "truncated at token 2");
  expect_refused(write(dir, "empty_token.bin", llmc_file_bytes(2, {"a", "", "c"}, 2)), "token 1 has length 0");
  expect_refused(write(dir, "trailing.bin", bytes + "zz"), "2 bytes after its last token");
  expect_refused(dir / "absent.bin", "cannot open");
}
