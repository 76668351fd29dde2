// llm.c's tokenizer file (gpt2_tokenizer.bin, `train --tokenizer FILE.bin`):
// the 1024-byte header (magic, version, vocabulary size, end-of-text id) and
// the tokens' lengths and bytes. An accepted file then decodes ids inside
// and outside its vocabulary.
#include <cstdint>
#include <optional>
#include <vector>

#include "launch/data/llmc_tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::input_file(data, size, "tokenizer.bin");
  (void)launch::LlmcTokenizer::is_llmc_file(path);
  std::optional<launch::LlmcTokenizer> tokenizer;
  if (!fuzz::accepts([&] { tokenizer.emplace(launch::LlmcTokenizer::from_file(path)); })) return 0;
  const std::vector<std::int32_t> ids = {0, tokenizer->end_of_text(), tokenizer->vocab_size() - 1,
                                         tokenizer->vocab_size(), -1};
  fuzz::accepts([&] { (void)tokenizer->decode(ids); });
  return 0;
}
