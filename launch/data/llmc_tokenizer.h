// llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin, written by llm.c's
// train_gpt2.py and read by its tokenizer.h): a header of 256 uint32
// [20240328, version 1 or 2, vocab_size, end-of-text id (version 2)], then
// for each id a uint8 length (at least 1) and that many bytes. Version 1
// files are GPT-2's own (50257 tokens, end-of-text 50256).
//
// It holds each token's bytes and no merges, so it decodes but cannot
// encode: `train --tokenizer FILE.bin` decodes its samples with it and
// starts them at <|endoftext|>, and refuses a --sample-prompt.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace launch {

class LlmcTokenizer {
 public:
  // Whether `path` starts with the llm.c tokenizer magic (false for a file too short or unreadable).
  static bool is_llmc_file(const std::string& path);
  // Throws engine::Error naming `path` and what is wrong with it.
  static LlmcTokenizer from_file(const std::string& path);

  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  std::int32_t end_of_text() const { return end_of_text_; }
  // The tokens' bytes, concatenated; an id outside the vocabulary gives U+FFFD.
  std::string decode(std::span<const std::int32_t> ids) const;

 private:
  std::vector<std::string> tokens_;
  std::int32_t end_of_text_ = 0;
};

}  // namespace launch
