// Text encoded by real tokenizers (`prepare` over any corpus): the first
// byte picks GPT-2's, Llama 3's, Qwen2's (NFC normalizer) or SmolLM2's
// tokenizer from tests/data/tokenizers, the rest is the text, any bytes
// (invalid UTF-8, NULs, huge runs of one character class for PCRE2's
// patterns). For the byte-level tokenizers without a normalizer, decoding
// what was encoded gives the text back, byte for byte, when it is valid
// UTF-8 (Hugging Face tokenizers' behaviour; tests/launch/data checks it on
// their ids).
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

struct Loaded {
  launch::BpeTokenizer tokenizer;
  bool round_trips;  // byte-level, no normalizer, no prefix space
};

const std::vector<Loaded>& tokenizers() {
  static const std::vector<Loaded> all = [] {
    std::vector<Loaded> v;
    const std::string dir = TOKENIZER_DATA_DIR;
    v.push_back({launch::BpeTokenizer::from_file(dir + "/gpt2.json"), true});
    v.push_back({launch::BpeTokenizer::from_file(dir + "/llama3_bpe.json"), true});
    v.push_back({launch::BpeTokenizer::from_file(dir + "/qwen2_bpe.json"), false});
    v.push_back({launch::BpeTokenizer::from_file(dir + "/smollm2_bpe.json"), true});
    return v;
  }();
  return all;
}

bool valid_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Loaded& loaded = tokenizers()[data[0] % tokenizers().size()];
  const std::string text(fuzz::as_text(data + 1, size - 1));
  std::vector<std::int32_t> ids;
  if (!fuzz::accepts([&] { ids = loaded.tokenizer.encode(text); })) return 0;
  for (std::int32_t id : ids)
    if (id < 0 || id >= loaded.tokenizer.vocab_size())
      fuzz::finding("encode gave id " + std::to_string(id) + " outside the vocabulary");
  std::string decoded;
  if (!fuzz::accepts([&] { decoded = loaded.tokenizer.decode(ids); })) return 0;
  if (loaded.round_trips && valid_utf8(text) && decoded != text)
    fuzz::finding("decode(encode(text)) != text for tokenizer " + std::to_string(data[0] % tokenizers().size()) +
                  ": " + nlohmann::json(text).dump() + " -> " +
                  nlohmann::json(decoded).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}
