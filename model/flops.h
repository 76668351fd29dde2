// Model FLOPs of a training step, the convention MFU is measured against.
//
// Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", section 5.1, without recomputation):
//   F = 72 * B * s * l * h^2 * (1 + s / (6 h) + V / (12 l h))
// for B sequences of s tokens through l layers of width h and vocabulary V.
// It counts every matmul of forward and backward (backward = 2x forward), with
// attention scores and values at the full s x s (causality not discounted) and
// recomputation not counted. We use the padded vocabulary, which is what the
// LM head computes.
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt_config.h"

namespace model {

double training_flops_per_step(const GptConfig& config, std::int64_t sequences, std::int64_t seq_len);
const char* flops_convention();  // one line printed at start-up

}  // namespace model
