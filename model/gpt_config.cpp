#include "model/gpt_config.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "engine/check.h"

namespace model {
namespace {

struct Preset {
  const char* name;
  GptConfig config;
};

GptConfig gpt2(std::int64_t T, std::int64_t V, std::int64_t L, std::int64_t H, std::int64_t C) {
  GptConfig c;
  c.max_seq_len = T;
  c.vocab_size = V;
  c.n_layer = L;
  c.n_head = H;
  c.n_embd = C;
  return c;
}

// A Llama-family shape as its config.json states it: max_position_embeddings,
// vocab_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// hidden_size, intermediate_size, rope_theta, rms_norm_eps.
GptConfig llama(std::int64_t T, std::int64_t V, std::int64_t L, std::int64_t H, std::int64_t KV, std::int64_t C,
                std::int64_t F, double theta, double eps) {
  GptConfig c = gpt2(T, V, L, H, C);
  c.arch = Architecture::kLlama;
  c.n_kv_head = KV;
  c.ffn_hidden = F;
  c.rope_theta = theta;
  c.norm_eps = eps;
  return c;
}

GptConfig with_qkv_bias(GptConfig c) {
  c.qkv_bias = true;
  return c;
}

GptConfig untied(GptConfig c) {
  c.tied_embeddings = false;
  return c;
}

GptConfig with_llama3_scaling(GptConfig c, double factor, double low, double high, std::int64_t original) {
  c.rope_scaling = RopeScaling{factor, low, high, original};
  return c;
}

// GPT-2 (Radford et al. 2019): 1024 positions, 50257 BPE tokens. The Llama
// family from the published config.json of HuggingFaceTB/SmolLM2-135M and
// -360M, Qwen/Qwen2.5-0.5B and -1.5B, meta-llama/Llama-3.2-1B (all tied).
const Preset kPresets[] = {
    {"gpt2-124m", gpt2(1024, 50257, 12, 12, 768)},
    {"gpt2-350m", gpt2(1024, 50257, 24, 16, 1024)},
    {"gpt2-774m", gpt2(1024, 50257, 36, 20, 1280)},
    {"gpt2-1558m", gpt2(1024, 50257, 48, 25, 1600)},
    {"smollm2-135m", llama(8192, 49152, 30, 9, 3, 576, 1536, 100000, 1e-5)},
    {"smollm2-360m", llama(8192, 49152, 32, 15, 5, 960, 2560, 100000, 1e-5)},
    {"qwen2.5-0.5b", with_qkv_bias(llama(32768, 151936, 24, 14, 2, 896, 4864, 1e6, 1e-6))},
    {"qwen2.5-1.5b", with_qkv_bias(llama(32768, 151936, 28, 12, 2, 1536, 8960, 1e6, 1e-6))},
    {"llama3.2-1b", with_llama3_scaling(llama(131072, 128256, 16, 32, 8, 2048, 8192, 500000, 1e-5), 32, 1, 4, 8192)},
    // Byte-level models: vocabulary of 256 (launch/data/byte_tokenizer.h).
    {"gpt-micro", gpt2(64, 256, 2, 2, 32)},
    {"gpt-demo", gpt2(128, 256, 4, 4, 128)},
    // llama-micro has every feature the family adds, for the tests: GQA, an
    // untied head and Qwen2's q/k/v bias.
    {"llama-micro", untied(with_qkv_bias(llama(64, 256, 2, 4, 2, 32, 64, 10000, 1e-5)))},
    {"llama-demo", llama(128, 256, 4, 4, 2, 128, 384, 10000, 1e-5)},
};

}  // namespace

const char* architecture_name(Architecture arch) { return arch == Architecture::kLlama ? "llama" : "gpt2"; }

void GptConfig::validate() const {
  ENGINE_CHECK(n_layer >= 1, "model: n_layer must be >= 1, got ", n_layer);
  ENGINE_CHECK(n_head >= 1, "model: n_head must be >= 1, got ", n_head);
  ENGINE_CHECK(n_embd >= 1, "model: n_embd must be >= 1, got ", n_embd);
  ENGINE_CHECK(vocab_size >= 2, "model: vocab_size must be >= 2, got ", vocab_size);
  // Token ids are i32 in memory (and at most 32 bits in a shard).
  ENGINE_CHECK(padded_vocab() <= std::numeric_limits<std::int32_t>::max(), "model: vocab_size ", vocab_size,
               " does not fit 32-bit token ids");
  ENGINE_CHECK(max_seq_len >= 1, "model: max_seq_len must be >= 1, got ", max_seq_len);
  ENGINE_CHECK(n_embd % n_head == 0, "model: n_head (", n_head, ") must divide n_embd (", n_embd,
               "); head size would be ", static_cast<double>(n_embd) / static_cast<double>(n_head));
  if (!is_llama()) {
    // GPT-2 has none of the llama fields: a value set there would be ignored.
    ENGINE_CHECK(n_kv_head == 0 || n_kv_head == n_head, "model: gpt2 has no grouped-query attention (n_kv_head ",
                 n_kv_head, "); use the llama architecture");
    ENGINE_CHECK(ffn_hidden == 0 || ffn_hidden == 4 * n_embd, "model: gpt2's MLP is 4 x n_embd wide (ffn_hidden ",
                 ffn_hidden, "); use the llama architecture");
    ENGINE_CHECK(!rope_scaling.enabled() && !qkv_bias,
                 "model: rope scaling and a q/k/v-only bias are llama settings, not gpt2's");
  }
  ENGINE_CHECK(norm_eps > 0 && std::isfinite(norm_eps), "model: norm_eps must be positive, got ", norm_eps);
  if (!is_llama()) return;
  ENGINE_CHECK(n_kv_head >= 1 && n_kv_head <= n_head && n_head % n_kv_head == 0, "model: n_head ", n_head,
               " is not a multiple of n_kv_head ", n_kv_head, " (each key/value head serves n_head / n_kv_head "
               "query heads)");
  ENGINE_CHECK(ffn_hidden >= 1, "model: ffn_hidden (the SwiGLU width) must be >= 1, got ", ffn_hidden);
  ENGINE_CHECK(head_size() % 2 == 0, "model: head size ", head_size(), " must be even for rotary embeddings");
  ENGINE_CHECK(rope_theta > 1 && std::isfinite(rope_theta), "model: rope_theta must be > 1, got ", rope_theta);
  if (rope_scaling.enabled())
    ENGINE_CHECK(rope_scaling.factor >= 1 && rope_scaling.low_freq_factor > 0 &&
                     rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
                     rope_scaling.original_max_position >= 1,
                 "model: llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position >= 1; got factor ",
                 rope_scaling.factor, ", low ", rope_scaling.low_freq_factor, ", high ",
                 rope_scaling.high_freq_factor, ", original ", rope_scaling.original_max_position);
}

std::int64_t GptConfig::num_parameters() const {
  const std::int64_t C = n_embd, L = n_layer, Vp = padded_vocab();
  if (is_llama()) {
    const std::int64_t per_block = C                                      // input_layernorm
                                   + qkv_width() * C                      // q, k, v
                                   + (qkv_bias ? qkv_width() : 0)         // Qwen2's q/k/v bias
                                   + C * C                                // o_proj
                                   + C                                    // post_attention_layernorm
                                   + 2 * ffn_hidden * C + C * ffn_hidden; // gate, up, down
    return Vp * C * (tied_embeddings ? 1 : 2) + L * per_block + C;
  }
  const std::int64_t per_block = 2 * C                 // ln_1
                                 + 3 * C * C + 3 * C   // qkv
                                 + C * C + C           // attention projection
                                 + 2 * C               // ln_2
                                 + 4 * C * C + 4 * C   // mlp fc
                                 + 4 * C * C + C;      // mlp projection
  return Vp * C * (tied_embeddings ? 1 : 2) + max_seq_len * C + L * per_block + 2 * C;
}

std::string GptConfig::describe() const {
  std::ostringstream out;
  out << "L=" << n_layer << " H=" << n_head << " C=" << n_embd << " V=" << vocab_size << "(" << padded_vocab()
      << ") T=" << max_seq_len;
  if (is_llama()) {
    out << " llama KV=" << kv_heads() << " F=" << ffn_hidden << " rope=" << rope_theta;
    if (rope_scaling.enabled())
      out << " llama3(" << rope_scaling.factor << "," << rope_scaling.low_freq_factor << ","
          << rope_scaling.high_freq_factor << "," << rope_scaling.original_max_position << ")";
    out << " eps=" << norm_eps;
    if (qkv_bias) out << " qkv-bias";
    if (!tied_embeddings) out << " untied";
  } else {
    // GPT-2's own eps and tied head go unsaid, so a GPT-2 checkpoint's
    // recorded model (this text) reads as it did before either could change.
    if (norm_eps != kGpt2NormEps) out << " eps=" << norm_eps;
    if (!tied_embeddings) out << " untied";
  }
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
