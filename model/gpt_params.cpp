#include "model/gpt_params.h"

#include <cmath>

namespace model {

std::string block_unit_name(std::int64_t layer) { return "h." + std::to_string(layer); }

std::string block_param_name(std::int64_t layer, const char* suffix) {
  return block_unit_name(layer) + "." + suffix;
}

namespace {

// A Llama-family block under the same names as GPT-2's (HF names are mapped
// at import and export, launch/formats/): RMSNorm gains without biases, the
// fused q|k|v weight of (H + 2 KV) heads cut by heads in three unequal
// blocks, the fused gate|up weight cut in two, no biases but Qwen2's q/k/v one.
void add_llama_blocks(ParamRegistry& reg, const GptConfig& config, const StageRange& stage, TensorParallel tp,
                      double std, double proj_std) {
  const std::int64_t C = config.n_embd, F = config.ffn_hidden, D = config.head_size();
  const Split qkv_rows{0, 3, tp.rank, tp.size, config.n_head * D};  // q (H D) | k (KV D) | v (KV D)
  const Split gate_up_rows{0, 2, tp.rank, tp.size};                 // gate (F) | up (F)
  const Split columns{1, 1, tp.rank, tp.size};                      // row-parallel
  for (std::int64_t l = stage.first_layer; l < stage.last_layer; ++l) {
    auto name = [l](const char* suffix) { return block_param_name(l, suffix); };
    reg.begin_unit(block_unit_name(l));
    reg.add(name("ln_1.weight"), engine::Shape{C}, Init::kOnes, 0, false);
    reg.add(name("attn.qkv.weight"), engine::Shape{config.qkv_width(), C}, Init::kNormal, std, true, qkv_rows);
    if (config.qkv_bias)
      reg.add(name("attn.qkv.bias"), engine::Shape{config.qkv_width()}, Init::kZeros, 0, false, qkv_rows);
    reg.add(name("attn.proj.weight"), engine::Shape{C, C}, Init::kNormal, proj_std, true, columns);
    reg.add(name("ln_2.weight"), engine::Shape{C}, Init::kOnes, 0, false);
    reg.add(name("mlp.fc.weight"), engine::Shape{2 * F, C}, Init::kNormal, std, true, gate_up_rows);
    reg.add(name("mlp.proj.weight"), engine::Shape{C, F}, Init::kNormal, proj_std, true, columns);
  }
}

}  // namespace

ParamRegistry build_gpt_registry(const GptConfig& config, const StageRange& stage, TensorParallel tp,
                                 std::int64_t align_multiple) {
  return build_gpt_registry(config, std::vector<StageRange>{stage}, tp, align_multiple);
}

ParamRegistry build_gpt_registry(const GptConfig& config, const std::vector<StageRange>& chunks, TensorParallel tp,
                                 std::int64_t align_multiple) {
  config.validate();
  const StageRange stage = rank_range(chunks);
  const std::int64_t C = config.n_embd, L = config.n_layer;
  const double std = 0.02;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(L));
  const Split rows{0, 1, tp.rank, tp.size};       // column-parallel / vocabulary-parallel
  const Split qkv_rows{0, 3, tp.rank, tp.size};   // q|k|v blocks, each split by heads
  const Split columns{1, 1, tp.rank, tp.size};    // row-parallel
  ParamRegistry reg(ParamRegistry::kAlignElements * align_multiple);
  // Units (model/param_registry.h): the tied token embedding alone, so that
  // under ZeRO its chunks cover the same elements on the first and the last
  // pipeline stage, whose gradients are summed; each table and each block
  // is used as a whole.
  auto add_wte = [&] {
    reg.begin_unit("wte");
    reg.add("wte", engine::Shape{config.padded_vocab(), C}, Init::kNormal, std, true, rows);
  };
  if (stage.has_embedding) {
    add_wte();
    if (config.has_position_table()) {
      reg.begin_unit("wpe");
      reg.add("wpe", engine::Shape{config.max_seq_len, C}, Init::kNormal, std, true);
    }
  }
  for (const StageRange& chunk : chunks) {
    if (config.is_llama()) {
      add_llama_blocks(reg, config, chunk, tp, std, proj_std);
    } else {
      for (std::int64_t l = chunk.first_layer; l < chunk.last_layer; ++l) {
        auto name = [l](const char* suffix) { return block_param_name(l, suffix); };
        reg.begin_unit(block_unit_name(l));
        reg.add(name("ln_1.weight"), engine::Shape{C}, Init::kOnes, 0, false);
        reg.add(name("ln_1.bias"), engine::Shape{C}, Init::kZeros, 0, false);
        reg.add(name("attn.qkv.weight"), engine::Shape{3 * C, C}, Init::kNormal, std, true, qkv_rows);
        reg.add(name("attn.qkv.bias"), engine::Shape{3 * C}, Init::kZeros, 0, false, qkv_rows);
        reg.add(name("attn.proj.weight"), engine::Shape{C, C}, Init::kNormal, proj_std, true, columns);
        reg.add(name("attn.proj.bias"), engine::Shape{C}, Init::kZeros, 0, false);
        reg.add(name("ln_2.weight"), engine::Shape{C}, Init::kOnes, 0, false);
        reg.add(name("ln_2.bias"), engine::Shape{C}, Init::kZeros, 0, false);
        reg.add(name("mlp.fc.weight"), engine::Shape{4 * C, C}, Init::kNormal, std, true, rows);
        reg.add(name("mlp.fc.bias"), engine::Shape{4 * C}, Init::kZeros, 0, false, rows);
        reg.add(name("mlp.proj.weight"), engine::Shape{C, 4 * C}, Init::kNormal, proj_std, true, columns);
        reg.add(name("mlp.proj.bias"), engine::Shape{C}, Init::kZeros, 0, false);
      }
    }
  }
  if (stage.has_head) {
    reg.begin_unit("ln_f");
    reg.add("ln_f.weight", engine::Shape{C}, Init::kOnes, 0, false);
    if (config.has_linear_biases()) reg.add("ln_f.bias", engine::Shape{C}, Init::kZeros, 0, false);
    if (!config.tied_embeddings) {
      reg.begin_unit("lm_head");
      reg.add("lm_head.weight", engine::Shape{config.padded_vocab(), C}, Init::kNormal, std, true, rows);
    } else if (!stage.has_embedding) {
      add_wte();
    }
  }
  return reg;
}

}  // namespace model
