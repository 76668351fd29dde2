// Model FLOPs of a training step, the convention MFU is measured against, and
// the recomputed FLOPs that hardware FLOPs (HFU) add to them.
//
// Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", section 5.1, without recomputation):
//   F = 72 * B * s * l * h^2 * (1 + s / (6 h) + V / (12 l h))
// for B sequences of s tokens through l layers of width h and vocabulary V.
// It counts every matmul of forward and backward (backward = 2x forward):
// per layer and token 2*12h^2 for the qkv, projection, fc and fc-projection
// weights, 2*2*s*h for the attention scores (q k^T) and the probabilities
// times the values, and 2*h*V per token for the LM head. We use the padded
// vocabulary, which is what the LM head computes; the embedding lookups, norms,
// softmax and GELU are not matmuls and are not counted.
//
// Attention: the paper counts the full s x s square. A causal model needs
// only the lower triangle (s^2/2 of it, the convention of llm.c and of
// Megatron-LM since 2025), which halves the attention term:
//   kFull:   s / (6 h)     kCausal (default):   s / (12 h)
// The CPU backend computes close to the triangle (row blocks of the
// triangle), FlashAttention on CUDA skips the blocks above the diagonal.
//
// MFU counts model FLOPs only: recomputation is an implementation choice and
// is not counted (the model did not get bigger). HFU (hardware FLOPs) adds
// what activation recomputation (model/recompute.h) reruns, with the same
// attention convention:
//   selective  each block's attention core forward (scores and values):
//              l * 2 * 2 * B * s^2 * h (halved for kCausal);
//   full       each block's forward up to its MLP's output projection
//              (TransformerBlock::recompute skips that one matmul, since
//              backward reads nothing it makes), so per layer the qkv,
//              projection and fc matmuls 2 * B * s * 8 h^2 plus the attention
//              core; never the LM head (it is not a block).
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt_config.h"
#include "model/recompute.h"

namespace model {

enum class AttentionFlops : std::uint8_t { kCausal, kFull };

AttentionFlops parse_attention_flops(const std::string& text);  // "causal" | "full"
const char* attention_flops_name(AttentionFlops mode);

// Model FLOPs of one training step of `sequences` sequences of `seq_len` tokens
// (forward and backward, every rank together).
double training_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len,
                               AttentionFlops attention = AttentionFlops::kCausal);
// The FLOPs recomputation adds to that step (0 for kNone).
double recompute_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len,
                                Recompute recompute, AttentionFlops attention = AttentionFlops::kCausal);

// One line printed at start-up: the formula, the attention convention, and
// that recomputation counts in HFU only.
// For a Llama-family model (config.is_llama()) the same count of every
// matmul with its matrices: per token and layer 2 * (h (H+2KV) d + h^2 + 3 h F)
// forward FLOPs for qkv, projection and SwiGLU's gate, up and down, the
// attention core as above, and 2 h V for the untied or tied head.
std::string flops_convention(AttentionFlops attention, const GptConfig& config = {});

}  // namespace model
