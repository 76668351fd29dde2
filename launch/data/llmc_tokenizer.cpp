#include "launch/data/llmc_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>

#include "engine/check.h"

namespace launch {

namespace {
constexpr std::uint32_t kMagic = 20240328;
constexpr std::size_t kHeaderWords = 256;
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

bool LlmcTokenizer::is_llmc_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::uint32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kMagic;
}

LlmcTokenizer LlmcTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in.good(), "llm.c tokenizer '", path, "': cannot open it");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ENGINE_CHECK(bytes.size() >= kHeaderWords * 4, "llm.c tokenizer '", path, "': ", bytes.size(),
               " bytes, shorter than its 1024-byte header");
  std::array<std::uint32_t, kHeaderWords> header{};
  std::copy_n(bytes.data(), kHeaderWords * 4, reinterpret_cast<char*>(header.data()));
  ENGINE_CHECK(header[0] == kMagic, "llm.c tokenizer '", path, "': magic ", header[0], ", expected ", kMagic);
  const std::uint32_t version = header[1], vocab = header[2];
  ENGINE_CHECK(version == 1 || version == 2, "llm.c tokenizer '", path, "': version ", version, ", expected 1 or 2");
  ENGINE_CHECK(vocab >= 1 && vocab <= 65536, "llm.c tokenizer '", path, "': vocabulary of ", vocab,
               " tokens, expected 1 to 65536 (token shards hold uint16 ids)");
  LlmcTokenizer t;
  if (version == 1) {
    // Version 1 did not record the end-of-text id; llm.c assumes GPT-2's.
    ENGINE_CHECK(vocab == 50257, "llm.c tokenizer '", path, "': version 1 files are GPT-2's 50257 tokens, this has ",
                 vocab);
    t.end_of_text_ = 50256;
  } else {
    ENGINE_CHECK(header[3] < vocab, "llm.c tokenizer '", path, "': end-of-text id ", header[3],
                 " outside its vocabulary of ", vocab);
    t.end_of_text_ = static_cast<std::int32_t>(header[3]);
  }
  std::size_t at = kHeaderWords * 4;
  t.tokens_.reserve(vocab);
  for (std::uint32_t id = 0; id < vocab; ++id) {
    ENGINE_CHECK(at < bytes.size(), "llm.c tokenizer '", path, "': truncated at token ", id, " of ", vocab);
    const std::size_t length = static_cast<unsigned char>(bytes[at++]);
    ENGINE_CHECK(length > 0, "llm.c tokenizer '", path, "': token ", id, " has length 0");
    ENGINE_CHECK(at + length <= bytes.size(), "llm.c tokenizer '", path, "': truncated in token ", id, " of ", vocab);
    t.tokens_.emplace_back(bytes.substr(at, length));
    at += length;
  }
  ENGINE_CHECK(at == bytes.size(), "llm.c tokenizer '", path, "': ", bytes.size() - at,
               " bytes after its last token");
  return t;
}

std::string LlmcTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (std::int32_t id : ids)
    text += id >= 0 && id < vocab_size() ? tokens_[static_cast<std::size_t>(id)] : std::string(kReplacement);
  return text;
}

}  // namespace launch
