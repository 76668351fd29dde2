// Rotary position embedding frequencies (Su et al. 2021), as Hugging Face
// transformers computes them for LlamaForCausalLM and Qwen2ForCausalLM:
//   inv_freq[i] = 1 / theta^(2i / D),  i < D/2
// and, with Llama 3's scaling (transformers' _compute_llama3_parameters,
// Meta's Llama 3.1 release), for wavelength w = 2 pi / inv_freq[i] and the
// original context L0:
//   w < L0 / high_freq_factor:  kept
//   w > L0 / low_freq_factor:   inv_freq / factor
//   between:                    (1 - s) inv_freq / factor + s inv_freq,
//                               s = (L0 / w - low) / (high - low)
// The op (engine/ops.h rope_forward) takes these D/2 numbers as an f32
// tensor; the angle at position p is p * inv_freq[i].
#pragma once

#include <vector>

#include "model/gpt_config.h"
#include "model/transformer_block.h"

namespace model {

// The D/2 frequencies of `config` (llama), computed in double and rounded to f32.
std::vector<float> rope_inv_freq(const GptConfig& config);

// Writes them into scratch.rope_inv_freq (on its device); a no-op for gpt2
// or a planning arena's null views.
void fill_rope_frequencies(const BlockScratch& scratch, const GptConfig& config);

}  // namespace model
