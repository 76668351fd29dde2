// GptConfig: the shape and architecture of a decoder-only transformer, its
// presets and its validation. Two architectures share one block
// (model/transformer_block.h):
//   gpt2   GPT-2 (Radford et al. 2019): LayerNorm, learned positions, GELU
//          MLP of width 4C, multi-head attention, a bias on every linear
//          layer, the LM head tied to the token embedding.
//   llama  Llama (Touvron et al. 2023) and its family (Qwen2, SmolLM2):
//          RMSNorm, rotary positions (Su et al. 2021) with an optional
//          Llama 3 frequency scaling, SwiGLU MLP of width ffn_hidden,
//          grouped-query attention with n_kv_head key/value heads, no biases
//          (Qwen2: a bias on q, k and v), tied or untied LM head.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace model {

enum class Architecture : std::uint8_t { kGpt2, kLlama };
const char* architecture_name(Architecture arch);  // "gpt2" | "llama"

// Llama 3's rope scaling ("rope_type": "llama3" in config.json): wavelengths
// longer than original_max_position / low_freq_factor are slowed down by
// `factor`, those shorter than original_max_position / high_freq_factor are
// kept, and the band between is interpolated (transformers'
// _compute_llama3_parameters). factor 0 means no scaling.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  std::int64_t original_max_position = 8192;
  bool enabled() const { return factor != 0; }
  bool operator==(const RopeScaling&) const = default;
};

struct GptConfig {
  std::int64_t max_seq_len = 1024;  // positions the model is trained for (rows of GPT-2's position table)
  std::int64_t vocab_size = 50257;  // real vocabulary; the table is padded (padded_vocab())
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;
  Architecture arch = Architecture::kGpt2;
  // Both architectures (a GPT2Config's layer_norm_epsilon and tie_word_embeddings):
  static constexpr double kGpt2NormEps = 1e-5;
  double norm_eps = kGpt2NormEps;  // the LayerNorm's (gpt2) or RMSNorm's (llama) epsilon
  bool tied_embeddings = true;     // false: a separate lm_head.weight
  // llama only (validate() refuses them on gpt2, which has none of them):
  std::int64_t n_kv_head = 0;   // key/value heads; 0 = n_head
  std::int64_t ffn_hidden = 0;  // SwiGLU width F (gate and up each F wide)
  double rope_theta = 10000;    // RoPE base
  RopeScaling rope_scaling;
  bool qkv_bias = false;        // Qwen2's bias on q, k and v

  // The embedding table and logits are padded to a multiple of 128 so the LM
  // head's matmul has a friendly width (llm.c pads 50257 to 50304 for this).
  static constexpr std::int64_t kVocabPadMultiple = 128;
  std::int64_t padded_vocab() const {
    return (vocab_size + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
  }
  bool is_llama() const { return arch == Architecture::kLlama; }
  std::int64_t head_size() const { return n_embd / n_head; }
  std::int64_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  // Width of the fused q|k|v output: (H + 2 KV) * head size.
  std::int64_t qkv_width() const { return (n_head + 2 * kv_heads()) * head_size(); }
  // The MLP's hidden width: 4C for GPT-2, F for SwiGLU.
  std::int64_t mlp_width() const { return is_llama() ? ffn_hidden : 4 * n_embd; }
  // Rows of the MLP's first weight: 4C, or gate and up fused (2F).
  std::int64_t fc_width() const { return is_llama() ? 2 * ffn_hidden : 4 * n_embd; }
  bool has_linear_biases() const { return !is_llama(); }  // GPT-2's biases on every linear layer and norm
  bool has_position_table() const { return !is_llama(); }

  // Throws engine::Error naming the first impossible value (non-positive
  // sizes, heads that do not divide the width, fields the architecture lacks).
  void validate() const;
  // Parameters held by the model, counting the padded vocabulary rows.
  std::int64_t num_parameters() const;
  // "L=12 H=12 C=768 V=50257(50304) T=1024", with the llama fields after it.
  std::string describe() const;
  bool operator==(const GptConfig&) const = default;
};

// Known presets: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m (OpenAI's GPT-2
// shapes), plus gpt-micro (tests) and gpt-demo (the CPU demo); the Llama
// family's published shapes (smollm2-135m, smollm2-360m, qwen2.5-0.5b,
// qwen2.5-1.5b, llama3.2-1b) and llama-micro (tests) and llama-demo (the CPU
// demo). The small ones use the byte-level vocabulary of 256.
GptConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace model
