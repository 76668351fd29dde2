#include "model/gpt_config.h"

#include <sstream>

#include "engine/check.h"

namespace model {
namespace {

struct Preset {
  const char* name;
  GptConfig config;
};

// GPT-2 (Radford et al. 2019): 1024 positions, 50257 BPE tokens.
const Preset kPresets[] = {
    {"gpt2-124m", {1024, 50257, 12, 12, 768}},
    {"gpt2-350m", {1024, 50257, 24, 16, 1024}},
    {"gpt2-774m", {1024, 50257, 36, 20, 1280}},
    {"gpt2-1558m", {1024, 50257, 48, 25, 1600}},
    // Byte-level models: vocabulary of 256 (launch/data/byte_tokenizer.h).
    {"gpt-micro", {64, 256, 2, 2, 32}},
    {"gpt-demo", {128, 256, 4, 4, 128}},
};

}  // namespace

void GptConfig::validate() const {
  ENGINE_CHECK(n_layer >= 1, "model: n_layer must be >= 1, got ", n_layer);
  ENGINE_CHECK(n_head >= 1, "model: n_head must be >= 1, got ", n_head);
  ENGINE_CHECK(n_embd >= 1, "model: n_embd must be >= 1, got ", n_embd);
  ENGINE_CHECK(vocab_size >= 2, "model: vocab_size must be >= 2, got ", vocab_size);
  ENGINE_CHECK(vocab_size <= 65536, "model: vocab_size ", vocab_size,
               " does not fit the uint16 tokens of the shard format (max 65536)");
  ENGINE_CHECK(max_seq_len >= 1, "model: max_seq_len must be >= 1, got ", max_seq_len);
  ENGINE_CHECK(n_embd % n_head == 0, "model: n_head (", n_head, ") must divide n_embd (", n_embd,
               "); head size would be ", static_cast<double>(n_embd) / static_cast<double>(n_head));
}

std::int64_t GptConfig::num_parameters() const {
  const std::int64_t C = n_embd, L = n_layer;
  const std::int64_t per_block = 2 * C                 // ln_1
                                 + 3 * C * C + 3 * C   // qkv
                                 + C * C + C           // attention projection
                                 + 2 * C               // ln_2
                                 + 4 * C * C + 4 * C   // mlp fc
                                 + 4 * C * C + C;      // mlp projection
  return padded_vocab() * C + max_seq_len * C + L * per_block + 2 * C;
}

std::string GptConfig::describe() const {
  std::ostringstream out;
  out << "L=" << n_layer << " H=" << n_head << " C=" << n_embd << " V=" << vocab_size << "("
      << padded_vocab() << ") T=" << max_seq_len;
  return out.str();
}

GptConfig gpt_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.config;
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  ENGINE_FAIL("unknown model preset '", name, "'; known presets: ", known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace model
