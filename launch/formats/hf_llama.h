// Hugging Face Llama-family checkpoints: transformers' LlamaForCausalLM, and
// Qwen2ForCausalLM for a model with a q/k/v bias (GptConfig::qkv_bias). The
// engine's fused tensors are cut into Hugging Face's separate ones by rows;
// both store Linear weights as (out, in), and the engine's RoPE is
// transformers' rotate-half layout, so no tensor is transposed or permuted.
//
//   engine (registry)          Hugging Face (model.layers.{l}. before each block tensor)   engine rows
//   wte (Vp, C)                model.embed_tokens.weight (V, C)             [0, V): padded rows dropped
//   h.{l}.ln_1.weight (C)      input_layernorm.weight
//   h.{l}.attn.qkv.weight      self_attn.q_proj.weight (H D, C)             [0, H D)
//     ((H + 2 KV) D, C)        self_attn.k_proj.weight (KV D, C)            [H D, (H + KV) D)
//                              self_attn.v_proj.weight (KV D, C)            [(H + KV) D, (H + 2 KV) D)
//   h.{l}.attn.qkv.bias        self_attn.{q,k,v}_proj.bias (Qwen2)          the same blocks
//   h.{l}.attn.proj.weight     self_attn.o_proj.weight (C, C)
//   h.{l}.ln_2.weight          post_attention_layernorm.weight
//   h.{l}.mlp.fc.weight        mlp.gate_proj.weight (F, C)                  [0, F)
//     (2F, C)                  mlp.up_proj.weight (F, C)                    [F, 2F)
//   h.{l}.mlp.proj.weight      mlp.down_proj.weight (C, F)
//   ln_f.weight                model.norm.weight
//   lm_head.weight (Vp, C)     lm_head.weight (V, C), untied models only    [0, V)
//
// A tied model's lm_head.weight is not written (save_pretrained leaves it
// out too); read, it must equal model.embed_tokens.weight. Reading also
// ignores the rotary_emb.inv_freq buffers older exports hold (the engine
// computes them from rope_theta). A folder may hold model.safetensors or the
// shards of model.safetensors.index.json (launch/formats/safetensors_shards.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launch/formats/hf_folder.h"
#include "launch/formats/safetensors.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"

namespace launch {

// Writes DIR/model.safetensors, DIR/config.json (LlamaForCausalLM, or
// Qwen2ForCausalLM under qkv_bias), DIR/generation_config.json and, with a
// tokenizer, its files, as write_hf_gpt2 does (launch/formats/hf_gpt2.h).
// `master` is the whole model laid out by `registry` (model::build_gpt_registry).
void write_hf_llama(const std::string& dir, const model::GptConfig& config, const model::ParamRegistry& registry,
                    const float* master, SafetensorsDType dtype, const HfTokenizer& tokenizer = {});

// The model a config.json of model_type "llama" or "qwen2" describes (shape,
// norm epsilon, RoPE base and Llama 3 scaling, tied head; qwen2 has the q/k/v
// bias). Refused on one line starting with `source` and naming the field:
// a size that is not a positive integer, a missing size, and whatever the
// engine would compute otherwise than transformers: hidden_act other than
// silu, attention_bias or mlp_bias on llama, a head_dim other than
// hidden_size / num_attention_heads, rope_scaling other than llama3's,
// partial_rotary_factor, use_sliding_window on qwen2, mixture-of-experts
// fields.
model::GptConfig hf_llama_config(const nlohmann::json& config, const std::string& source);
// The config.json of write_hf_llama (without bos/eos, which the tokenizer gives).
nlohmann::ordered_json hf_llama_config_json(const model::GptConfig& config, SafetensorsDType dtype);

// Refuses, on one line naming it, a folder that does not hold `expected`: a
// config.json of another architecture or shape (naming the first field that
// differs) or one hf_llama_config refuses, a missing, unexpected or
// misshapen tensor, a tied model's lm_head.weight that is not its embedding.
void check_hf_llama(const std::string& path, const model::GptConfig& expected);
void read_hf_llama(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                   float* master);

}  // namespace launch
