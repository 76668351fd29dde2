// GptConfig: the shape of a GPT-2 style model, its presets and its validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace model {

struct GptConfig {
  std::int64_t max_seq_len = 1024;  // rows of the position table
  std::int64_t vocab_size = 50257;  // real vocabulary; the table is padded (padded_vocab())
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;

  // The embedding table and logits are padded to a multiple of 128 so the LM
  // head's matmul has a friendly width (llm.c pads 50257 to 50304 for this).
  static constexpr std::int64_t kVocabPadMultiple = 128;
  std::int64_t padded_vocab() const {
    return (vocab_size + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
  }
  std::int64_t head_size() const { return n_embd / n_head; }
  std::int64_t mlp_width() const { return 4 * n_embd; }

  // Throws engine::Error naming the first impossible value (non-positive
  // sizes, heads that do not divide the width).
  void validate() const;
  // Parameters held by the model, counting the padded vocabulary rows.
  std::int64_t num_parameters() const;
  std::string describe() const;  // "L=12 H=12 C=768 V=50257(50304) T=1024"
  bool operator==(const GptConfig&) const = default;
};

// Known presets: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m (OpenAI's GPT-2
// shapes), plus gpt-micro (tests) and gpt-demo (the CPU demo); the small ones
// use the byte-level vocabulary of 256.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace model
